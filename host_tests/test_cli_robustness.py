"""CLI holes that once failed silently: repeated flags, unwritable standard output, a
--max-new the context cannot hold, --heads on an engine that cannot produce them.

Each must end in one stderr line, a non-zero exit (2 usage, 1 I/O) and no output file."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from host_tests.scons_run import scons

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "host_tests" / "golden"
DEV_FULL = Path("/dev/full")


@pytest.fixture(scope="module")
def needle(tmp_path_factory, board_runner):
    """The host engine for the tiny golden archive (random weights: a generation never meets
    EOS, which the context and budget tests rely on), built once."""
    build = tmp_path_factory.mktemp("cli-host")
    scons("board=host", f"archive={GOLDEN / 'tiny' / 'archive.cact'}", f"build={build}")
    return board_runner("host", build / "needle")


@pytest.fixture(scope="module")
def needle_heads(tmp_path_factory, board_runner):
    """The tiny golden engine with probe heads over at most 4 tokens."""
    build = tmp_path_factory.mktemp("cli-heads")
    scons("board=host", f"archive={GOLDEN / 'tiny' / 'archive.cact'}", f"build={build}", "head_tokens=4")
    return board_runner("host", build / "needle")


def one_line(proc: subprocess.CompletedProcess, code: int, *words: str) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert proc.stderr.count("\n") == 1 and proc.stderr.endswith("\n"), proc.stderr
    for w in words:
        assert w in proc.stderr, proc.stderr


@pytest.mark.parametrize("args, flag", [
    (["--tokens", "1,2", "--tokens", "3"], "--tokens"),
    (["--prompt", "a", "--prompt", "b"], "--prompt"),
    (["--prompt", "a", "--max-new", "2", "--max-new", "3"], "--max-new"),
    (["--tokens", "1,2", "--logits", "{out}", "--logits", "{out}"], "--logits"),
    (["--info", "--info"], "--info"),
])
def test_repeated_flag_is_refused(needle, tmp_path, args, flag):
    out = tmp_path / "out.f32"
    proc = needle.run([a.format(out=out) for a in args])
    one_line(proc, 2, f"{flag} given more than once", "pass it once")
    assert proc.stdout == ""
    assert not out.exists()


@pytest.mark.skipif(not DEV_FULL.exists(), reason="needs /dev/full")
@pytest.mark.parametrize("args", [
    ["--prompt", "hi"],
    ["--prompt", "hi", "--max-new", "4", "--ids"],
    ["--info"],
    ["--tokens", "1,2"],
    ["--help"],
])
def test_unwritable_stdout_exits_1(needle, args):
    with open(DEV_FULL, "w") as full:
        proc = needle.run(args, stdout=full)
    one_line(proc, 1, "cannot write standard output", os.strerror(28))   # ENOSPC


@pytest.mark.skipif(not DEV_FULL.exists(), reason="needs /dev/full")
def test_unwritable_stdout_creates_no_heads_file(needle_heads, tmp_path):
    heads = tmp_path / "h.f32"
    with open(DEV_FULL, "w") as full:
        proc = needle_heads.run(["--tokens", "2,5", "--heads", heads], stdout=full)
    one_line(proc, 1, "cannot write standard output")
    assert not heads.exists()


def test_max_new_beyond_the_context_is_refused_up_front(needle):
    proc = needle.run(["--prompt", "hi", "--max-new", "256"])
    one_line(proc, 2, "--max-new 256 does not fit", "max_seq_len 256", "or less")
    assert proc.stdout == ""
    # what the message offers is accepted
    limit = int(proc.stderr.split("use --max-new ")[1].split()[0])
    ok = needle.run(["--prompt", "hi", "--max-new", limit, "--ids"])
    assert ok.returncode == 0 and ok.stderr == ""


def test_heads_on_an_engine_without_heads(needle, tmp_path):
    heads = tmp_path / "h.f32"
    proc = needle.run(["--tokens", "1,2", "--heads", heads])
    one_line(proc, 2, "no probe heads", "build with head_tokens=N")
    assert proc.stdout == ""
    assert not heads.exists()


def test_heads_with_more_tokens_than_head_tokens(needle_heads, tmp_path):
    heads, logits = tmp_path / "h.f32", tmp_path / "l.f32"
    proc = needle_heads.run(["--tokens", "2,5,6,7,8", "--heads", heads])
    one_line(proc, 2, "at most 4", "head_tokens=5")
    assert proc.stdout == "" and not heads.exists()
    proc = needle_heads.run(["--tokens", "2,5,6,7,8", "--logits", logits, "--heads", heads])
    one_line(proc, 2, "at most 4")
    assert not heads.exists() and not logits.exists()
    ok = needle_heads.run(["--tokens", "2,5,6,7", "--heads", heads])
    assert ok.returncode == 0 and heads.stat().st_size > 0


@pytest.mark.skipif(not DEV_FULL.exists(), reason="needs /dev/full")
def test_unwritable_logits_file(needle):
    proc = needle.run(["--tokens", "1,2", "--logits", DEV_FULL])
    one_line(proc, 1, "cannot write /dev/full")
    assert DEV_FULL.exists()   # never removed: only regular files are cleaned up
