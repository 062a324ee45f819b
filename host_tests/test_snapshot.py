"""Prefix snapshots (issue 10 item 7; docs/snapshot.md): with `scons tools=FILE` the host engine
prefills the tools' constant prompt prefix at build time and the firmware starts each query
from that state.  The output must not change: every envelope equals the Python twin's
(generator/tools/decode.py Prefix), token for token, and the build without the snapshot;
only `prefix_tokens` says where the prompt started.  A damaged snapshot is refused in one
line; ids that differ from the snapshot's (--system, a reply turn) feed the whole prompt."""

from __future__ import annotations

import json
import subprocess

import pytest

from generator.build import boards
from generator.tools.decode import Prefix, Session, prefix_ids, run_turn
from generator.tools.prompt import render_prompt_ids
from generator.tools.schema import compile_tools
from host_tests.goldens import GOLDEN, host_engines, reference
from host_tests.scons_run import ROOT, scons

DEMO_TOOLS = ROOT / "demo" / "tools.json"
KEYS = ("type", "function_calls", "reasoning", "confidence", "text", "prompt_tokens", "prefix_tokens",
        "generated_tokens")
QUERIES = [("set a timer for ten minutes", True, 64), ("what's the weather in Lagos?", False, 40)]


def _twin(model, tok, prefix, query, force, max_new, system=None):
    text = DEMO_TOOLS.read_text()
    env = run_turn(model, tok, compile_tools(text, force_call=force), render_prompt_ids(tok, text, query, system),
                   max_new, prefix)
    env["confidence"] = float(f"{env['confidence']:.9f}")
    return {k: env[k] for k in KEYS}


def _call(exe, *args) -> list:
    proc = subprocess.run([str(exe), *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """Host firmware with the demo tools built in, per archive: <b>/needle starts from the
    snapshot; <b>/prefix-host/needle (the engine that made it) is the same firmware without."""
    return host_engines(tmp_path_factory.mktemp("snapshot"), f"tools={DEMO_TOOLS}")


@pytest.mark.parametrize("name", ["tiny", "n3-tiny"])
def test_turns_start_from_the_snapshot_and_equal_the_twin(builds, name):
    model, tok = reference(name)
    prefix = Prefix(model, tok, DEMO_TOOLS.read_text())
    on, off = builds / name / "needle", builds / name / "prefix-host" / "needle"
    blob = (builds / name / "prefix.bin").read_bytes()
    assert int.from_bytes(blob[24:28], "little") == len(prefix.ids)         # the snapshot's token count
    assert [int.from_bytes(blob[32 + 4 * i:36 + 4 * i], "little") for i in range(len(prefix.ids))] == prefix.ids
    for query, force, max_new in QUERIES:
        args = ["--query", query, "--max-new", str(max_new)] + (["--force-call"] if force else [])
        got, without = _call(on, *args)[0], _call(off, *args)[0]
        want = _twin(model, tok, prefix, query, force, max_new)
        assert want["prefix_tokens"] == len(prefix.ids) and want["prompt_tokens"] > len(prefix.ids)
        assert {k: got[k] for k in KEYS} == want
        assert {k: without[k] for k in KEYS} == dict(want, prefix_tokens=0)
    # the plain greedy text (--raw) starts from the snapshot too, and does not change
    raw = ["--query", "turn the lights on", "--raw", "--max-new", "8"]
    assert subprocess.run([str(on), *raw], capture_output=True, check=True).stdout == \
        subprocess.run([str(off), *raw], capture_output=True, check=True).stdout


@pytest.mark.parametrize("name", ["tiny"])
def test_other_prompts_feed_everything(builds, name):
    """--system changes the prompt's first tokens: no snapshot.  A reply turn continues the
    session (position > 0): nothing restored, and both turns equal the twin's."""
    model, tok = reference(name)
    prefix = Prefix(model, tok, DEMO_TOOLS.read_text())
    on = builds / name / "needle"
    got = _call(on, "--query", "hello", "--system", "be brief", "--max-new", "40")[0]
    assert {k: got[k] for k in KEYS} == _twin(model, tok, prefix, "hello", False, 40, system="be brief")
    assert got["prefix_tokens"] == 0
    results = '[{"temp_c":31}]'
    got = _call(on, "--query", "weather in Lagos?", "--force-call", "--max-new", "56", "--reply", results)
    text = DEMO_TOOLS.read_text()
    s = Session(model, tok, compile_tools(text, force_call=True), prefix)
    want = [s.turn(render_prompt_ids(tok, text, "weather in Lagos?"), 56), s.reply(results, 56)]
    for g, w in zip(got, want):
        w = dict(w, confidence=float(f"{w['confidence']:.9f}"))
        assert {k: g[k] for k in KEYS} == {k: w[k] for k in KEYS}
    assert [g["prefix_tokens"] for g in got] == [len(prefix.ids), 0]


@pytest.mark.parametrize("offset, value, message", [
    (0, 0x00, "prefix snapshot: not a snapshot of this engine version (rebuild the firmware)"),
    (8, 0x5A, "prefix snapshot: made for another archive or KV layout (rebuild the firmware)"),
    (16, 0x5A, "prefix snapshot: made for another archive or KV layout (rebuild the firmware)"),
    (24, 0x05, "prefix snapshot: truncated or damaged (rebuild the firmware)"),
])
def test_a_damaged_snapshot_is_refused_in_one_line(builds, tmp_path, offset, value, message):
    """The snapshot's bytes patched inside the executable: header, layout hash, archive hash,
    token count.  The query fails with one line naming the cause; nothing on stdout."""
    exe = builds / "tiny" / "needle"
    blob = (builds / "tiny" / "prefix.bin").read_bytes()
    image = bytearray(exe.read_bytes())
    at = image.find(blob)
    assert at >= 0 and image.find(blob, at + 1) < 0
    image[at + offset] ^= value or 0xFF
    bad = tmp_path / "needle"
    bad.write_bytes(bytes(image))
    bad.chmod(0o755)
    proc = subprocess.run([str(bad), "--query", "set a timer", "--force-call", "--max-new", "64"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"needle: error: {message}\n"


def test_ids_that_differ_from_the_snapshot_start_from_nothing(builds, tmp_path):
    """A snapshot whose ids are not the prompt's (one id patched) is not used: same output."""
    exe = builds / "tiny" / "needle"
    blob = (builds / "tiny" / "prefix.bin").read_bytes()
    image = bytearray(exe.read_bytes())
    at = image.find(blob)
    image[at + 32 + 4 * 5] ^= 0x01          # the sixth saved id
    other = tmp_path / "needle"
    other.write_bytes(bytes(image))
    other.chmod(0o755)
    args = ["--query", "set a timer for ten minutes", "--force-call", "--max-new", "64"]
    got, want = _call(other, *args)[0], _call(exe, *args)[0]
    assert got["prefix_tokens"] == 0 and {k: got[k] for k in KEYS} == dict({k: want[k] for k in KEYS},
                                                                            prefix_tokens=0)


def test_a_snapshot_that_cannot_be_written_leaves_no_file(builds, tmp_path):
    plain = builds / "tiny" / "prefix-host" / "needle"
    proc = subprocess.run([str(plain), "--snapshot-save", str(tmp_path / "no" / "such" / "dir.bin")],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and "cannot create" in proc.stderr
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("name", ["rpi-zero", "router-ath79", "watch-m4"])
def test_boards_restore_the_host_snapshot(name, tmp_path, board_runner):
    """Linux boards under qemu-user (one of them big-endian: the snapshot is little-endian on
    every board) and a watch under qemu-system-arm: the snapshot the host engine made
    restores there (the engines are bit-identical) and the envelope is the twin's."""
    board = boards.load(name)
    why = boards.missing_tools(board, run=True)
    if why:
        pytest.skip(why)
    build = tmp_path / "b"
    scons(f"board={name}", f"archive={GOLDEN / 'tiny' / 'archive.cact'}", f"build={build}", f"tools={DEMO_TOOLS}")
    query, force, max_new = QUERIES[0]
    exe = build / ("needle.elf" if board["os"] == "none" else "needle")
    image = GOLDEN / "tiny" / "archive.cact" if board["archive"]["placement"] == "file" else None
    proc = board_runner(board, exe, image).run(["--query", query, "--force-call", "--max-new", max_new], cwd=ROOT,
                                               timeout=600)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.splitlines()[-1])
    model, tok = reference("tiny")
    want = _twin(model, tok, Prefix(model, tok, DEMO_TOOLS.read_text()), query, force, max_new)
    assert {k: got[k] for k in KEYS} == want and got["prefix_tokens"] > 0


def test_prefix_ids_end_at_the_tools_block():
    model, tok = reference("tiny")
    ids = prefix_ids(tok, DEMO_TOOLS.read_text())
    assert ids[-1] == tok.piece_id("</tools>") and ids.count(tok.piece_id("</tools>")) == 1
    for query in ("a", "</tools>", "   "):
        assert render_prompt_ids(tok, DEMO_TOOLS.read_text(), query)[:len(ids)] == ids
