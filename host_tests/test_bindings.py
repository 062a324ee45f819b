"""Typed C bindings of a built-in tool list (issue 10 item 8; docs/grammar.md): examples/tools,
built outside SCons against the SDK of `scons board=X lib=1 tools=examples/tools/tools.json`,
answers a query with needle_run() and its three handlers receive typed arguments, on the
host, on a Linux board under qemu-user and on a watch under qemu-system-arm.  What each
handler prints must follow from the call the Python twin decodes for the same query."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from generator.archive import reader
from generator.archive.tokenizer import Tokenizer
from generator.build import boards, sdk
from generator.tools.prompt import render_prompt_ids
from generator.model.needle2 import Needle2
from generator.tools.decode import run_turn
from generator.tools.schema import compile_tools
from host_tests.scons_run import ROOT, scons

EXAMPLE = ROOT / "examples" / "tools"
TOOLS = EXAMPLE / "tools.json"
ARCHIVE = ROOT / "host_tests" / "golden" / "small" / "archive.cact"   # max_seq 512: room for the tool list
QUERIES = [("turn on the kitchen lights", 96), ("remind me to call mum", 120)]


def expected_output(calls: list) -> str:
    """What examples/tools/main.c prints for a call list: one line per handler, then the count."""
    out = []
    for call in calls:
        a = call["arguments"]
        if call["name"] == "set_timer":
            out.append(f"set_timer minutes={a['minutes']}" + (f" label={a['label']}" if "label" in a else ""))
        elif call["name"] == "lights":
            line = f"lights room={a['room']} on={'true' if a['on'] else 'false'}"
            if "level" in a:
                micro = int(float(a["level"]) * 1e6 + 0.5)
                line += f" level={micro // 1000000}.{micro % 1000000:06d}"
            out.append(line)
        else:
            out.append(f"notify text={a['text']}" + (f" tags={','.join(a['tags'])}" if "tags" in a else ""))
    return "".join(line + "\n" for line in out) + f"calls made: {len(calls)}\n"


@pytest.fixture(scope="module")
def twin():
    """The reference's envelope per query, with no minimum confidence (0) and with the
    generation's recommended one (None: what needle_run is given as NEEDLE_MIN_CONFIDENCE)."""
    a = reader.read(ARCHIVE.read_bytes())
    tok = Tokenizer.from_blob(a.tokenizer_blob())
    model, text = Needle2(a, "a8"), TOOLS.read_text()
    g = compile_tools(text, force_call=True)
    out = {}
    for query, max_new in QUERIES:
        for floor in (0, None):
            ids = render_prompt_ids(tok, text, query, plain_markers=True)
            out[query, floor] = run_turn(model, tok, g, ids, max_new, min_confidence=floor)
    return out


def expected_stdout(env: dict) -> str:
    """What examples/tools prints: the handlers' lines and the calls, or, for an envelope not
    to be acted on, its reason and the calls, no handler having run."""
    if env["error_code"]:
        return f"not acted on (error_code {env['error_code']}): {env['error']}\nfunction_calls: {env['calls_json']}\n"
    return expected_output(env["function_calls"]) + f"function_calls: {env['calls_json']}\n"


@pytest.mark.parametrize("name", ["host", "rpi-zero", "watch-m4"])
def test_handlers_receive_typed_arguments(name, twin, tmp_path, board_runner):
    board = boards.load(name)
    why = boards.missing_tools(board, run=True)
    if why:
        pytest.skip(why)
    build = tmp_path / "build"
    scons(f"board={name}", f"archive={ARCHIVE}", f"build={build}", f"tools={TOOLS}", "lib=1")
    sdk_dir = build / sdk.SDK_DIR
    assert (sdk_dir / "include" / "needle_tools.h").is_file()
    proc = subprocess.run(["make", "-C", str(EXAMPLE), f"NEEDLE_SDK={sdk_dir}", f"OUT={tmp_path}"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    shipped = sdk.archive_file(board)
    archive = sdk_dir / "share" / "needle" / shipped if shipped else None
    example = board_runner(board, tmp_path / "tools", archive)
    acted = withheld = 0
    for query, max_new in QUERIES:
        for floor in (0, None):       # MIN_CONFIDENCE 0, then the example's default
            got = example.run([query, str(max_new)] + (["0"] if floor == 0 else []), cwd=tmp_path, timeout=600,
                              text=False, env={"NEEDLE_ARCHIVE": str(archive or "")})
            env = twin[query, floor]
            assert env["function_calls"]          # force_call: at least one call
            assert (got.returncode, got.stdout.decode("utf-8")) == (1 if env["error_code"] else 0,
                                                                     expected_stdout(env)), got.stderr
            acted += not env["error_code"]
            withheld += env["error_code"] == 3
    assert acted and withheld    # both paths ran: typed handlers, and a call below the minimum not dispatched


def test_bindings_header_types(tmp_path):
    """The generated C types follow the schemas (generator/tools/bindings.py's table)."""
    from generator.tools import bindings
    plan = bindings.plan(compile_tools(TOOLS.read_text()))
    fields = {(t.name, f.name): f for t in plan for f in t.fields}
    assert fields["set_timer", "minutes"].ctype == "int64_t" and not fields["set_timer", "minutes"].optional
    assert fields["set_timer", "label"].cap == 4 * 12 + 1 and fields["set_timer", "label"].optional
    assert fields["lights", "room"].enum_names == ["NEEDLE_LIGHTS_ROOM_KITCHEN", "NEEDLE_LIGHTS_ROOM_BEDROOM",
                                                    "NEEDLE_LIGHTS_ROOM_HALL"]
    assert fields["lights", "on"].ctype == "bool" and fields["lights", "level"].ctype == "double"
    assert fields["notify", "tags"].array == 3 and fields["notify", "tags"].enum_type == "needle_notify_tags"
