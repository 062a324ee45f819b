"""Span strings in whole turns (docs/grammar.md §2a): `needle --span-strings`, the service's
"span_strings" and the "x-needle-span" keyword give the envelope generator/tools/decode.py
computes with the query set (set_query), and every bad input is refused in one line with
nothing decoded: on the CLI, in the service (an error answer, the session untouched)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from generator.errors import CactError
from generator.tools.decode import run_turn
from generator.tools.prompt import render_prompt_ids
from generator.tools.schema import compile_tools, set_query
from host_tests.test_tool_call import ENVELOPE_KEYS, _reference
from test_cli_robustness import needle  # noqa: F401  (the host engine of the tiny golden, built once)
from test_serve import error, request, serve_pipe

ROOT = Path(__file__).resolve().parent.parent

TOOLS = [
    {"name": "send_message", "description": "Send a text message.",
     "parameters": {"type": "object", "properties": {"contact": {"type": "string"}, "text": {"type": "string"}},
                    "required": ["contact", "text"]}},
    {"name": "get_weather", "description": "Get the current weather for a city.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
]
KEYWORD_TOOLS = [
    {"name": "get_weather", "description": "Get the current weather for a city.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string", "x-needle-span": True,
                                                               "minLength": 2}},
                    "required": ["city"]}},
]
QUERIES = ["let Felix know that start without me", "weather in Lagos?", "text Zoë: café at 5"]


def python_envelope(text: str, query: str, max_new: int, span_all: bool) -> dict:
    model, tok = _reference("tiny")
    g = compile_tools(text, force_call=True)
    set_query(g, query, span_all)
    env = run_turn(model, tok, g, render_prompt_ids(tok, text, query), max_new)
    env["confidence"] = float(f"{env['confidence']:.9f}")
    env["min_confidence"] = float(f"{env['min_confidence']:.9f}")
    return {k: env[k] for k in ENVELOPE_KEYS}


def cli_envelope(needle, tmp_path, text: str, query: str, max_new: int, *flags) -> dict:
    (tmp_path / "tools.json").write_text(text, encoding="utf-8")
    proc = needle.run(["--tools", str(tmp_path / "tools.json"), "--query", query, "--force-call",
                       "--max-new", str(max_new), *flags])
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    env = json.loads(proc.stdout)
    return {k: env[k] for k in ENVELOPE_KEYS}


def spans_of(env: dict, query: str) -> None:
    for call in env["function_calls"]:
        for v in call["arguments"].values():
            if isinstance(v, str):
                assert v in query, (v, query)


@pytest.mark.parametrize("query", QUERIES)
def test_span_strings_turn_like_the_twin(needle, tmp_path, query):
    text = json.dumps(TOOLS, ensure_ascii=False)
    got = cli_envelope(needle, tmp_path, text, query, 72, "--span-strings")
    assert got == python_envelope(text, query, 72, True)
    spans_of(got, query)


def test_the_keyword_turns_like_the_twin(needle, tmp_path):
    text = json.dumps(KEYWORD_TOOLS)
    query = "what is it like in Lagos today"
    got = cli_envelope(needle, tmp_path, text, query, 72)
    assert got == python_envelope(text, query, 72, False)
    spans_of(got, query)


def test_service_span_strings_equal_the_cli(needle, tmp_path):
    text = json.dumps(TOOLS)
    query = QUERIES[0]
    cli = cli_envelope(needle, tmp_path, text, query, 72, "--span-strings")
    a = serve_pipe(needle, [request(query=query, tools=TOOLS, force_call=True, max_new=72, span_strings=True)])
    assert {k: a[0]["envelope"][k] for k in ENVELOPE_KEYS} == cli


# ---- bad input --------------------------------------------------------------------------------
def one_line_failure(proc, *words):
    assert proc.returncode == 2 and proc.stdout == "", (proc.returncode, proc.stdout)
    line = proc.stderr.rstrip("\n")
    assert "\n" not in line and line.startswith("needle: error: "), proc.stderr
    for w in words:
        assert w in line, (w, line)


def test_cli_refuses_bad_span_input_in_one_line(needle, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"name": "t", "parameters": {"type": "object", "properties": {
        "n": {"type": "integer", "x-needle-span": True}}}}]))
    one_line_failure(needle.run(["--tools", str(bad), "--query", "q"]),
                     'tool "t": property "n": "x-needle-span" needs type string')
    bad.write_text(json.dumps([{"name": "t", "parameters": {"type": "object", "properties": {
        "s": {"type": "string", "enum": ["a"], "x-needle-span": True}}}}]))
    one_line_failure(needle.run(["--tools", str(bad), "--query", "q"]),
                     '"x-needle-span" cannot be combined with "enum"', "drop one of them")
    good = tmp_path / "tools.json"
    good.write_text(json.dumps(TOOLS))
    one_line_failure(needle.run(["--tools", str(good), "--query", "a" * 1100, "--span-strings"]),
                     "the query is 1100 bytes, more than the 1024 span strings copy from (NEEDLE_GRAMMAR_SPAN_MAX)",
                     "raise grammar.span_bytes")
    one_line_failure(needle.run(["--tools", str(good), "--query", "q", "--raw", "--span-strings"]),
                     "--span-strings goes with a constrained --query")


def test_service_refuses_bad_span_input_and_keeps_the_session(needle):
    long_query = "a" * 1100
    bad_tools = [{"name": "t", "parameters": {"type": "object", "properties": {
        "s": {"type": "string", "pattern": "^a$", "x-needle-span": True}}}}]
    a = serve_pipe(needle, [request(query=QUERIES[1], tools=TOOLS, force_call=True, max_new=72, span_strings=True),
                            request(query=long_query, tools=TOOLS, span_strings=True),           # 1
                            request(query="q", tools=bad_tools),                                  # 2
                            request(results=[1], span_strings=True),                              # 3
                            request(query="q", tools=TOOLS, raw=True, span_strings=True),         # 4
                            request(query="q", tools=TOOLS, span_strings=1),                      # 5
                            request(results={"temp_c": 30}, max_new=72)])                         # 6
    first = a[0]
    assert "envelope" in first, first
    spans_of(first["envelope"], QUERIES[1])
    error(a[1], '"query": the query is 1100 bytes', "NEEDLE_GRAMMAR_SPAN_MAX")
    error(a[2], '"x-needle-span" cannot be combined with "pattern"')
    error(a[3], '"span_strings" goes with a constrained "query"')
    error(a[4], '"span_strings" goes with a constrained "query"')
    error(a[5], '"span_strings" must be true or false')
    # the refusals left the session as it was: the first call is still answerable, its strings
    # still spans of its own query
    assert "envelope" in a[6] and a[6]["position"] > first["position"], a[6]
    spans_of(a[6]["envelope"], QUERIES[1])
    with pytest.raises(CactError):
        set_query(compile_tools(json.dumps(TOOLS)), long_query, True)


def test_the_span_bound_comes_from_the_board_file(board_dir, tmp_path):
    """[grammar] span_bytes = 16: a built-in list whose strings are spans, on a board that
    copies from 16 bytes of query: a 16-byte query calls, a 17-byte one is refused in one line
    naming the board key."""
    from host_tests.test_grammar_budget import ARCHIVE, host_copy, scons_with_boards
    from generator.build import boards
    from generator.tools import tables
    host_copy(board_dir, "host-span", "span_bytes = 16")
    assert tables.defines(boards.load("host-span")) == ["-DNEEDLE_GRAMMAR_SPAN_MAX=16u"]
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(KEYWORD_TOOLS))
    proc = scons_with_boards(board_dir, tmp_path, "board=host-span", f"archive={ARCHIVE}", f"build={tmp_path / 'b'}",
                             f"tools={tools}", "snapshot=0")
    assert proc.returncode == 0, proc.stderr
    exe = str(tmp_path / "b" / "needle")
    import subprocess
    ok = subprocess.run([exe, "--query", "weather in Lagos", "--force-call", "--max-new", "72"], capture_output=True,
                        text=True)
    assert ok.returncode == 0, ok.stderr
    spans_of(json.loads(ok.stdout), "weather in Lagos")
    bad = subprocess.run([exe, "--query", "weather in Lagos?", "--force-call"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stdout == "" and bad.stderr == (
        "needle: error: the query is 17 bytes, more than the 16 span strings copy from (NEEDLE_GRAMMAR_SPAN_MAX): "
        "shorten it, or raise grammar.span_bytes in the board file\n")


SPAN_PROBE = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "needle_session.h"
#include "needle_model.h"

int main(int argc, char **argv)
{
    char err[512] = "";
    static needle_envelope env;
    needle_call_options opt;
    memset(&opt, 0, sizeof opt);
    opt.span_strings = 1;
    opt.force_call = 1;
    opt.max_new = 72;
    if (argc > 2) { opt.tools_json = argv[2]; opt.tools_len = strlen(argv[2]); }
    if (needle_boot()) { fprintf(stderr, "%s\n", needle_error()); return 3; }
    int rc = needle_call(argv[1], &opt, &env, err, sizeof err);
    printf("%d %s\n", rc, rc ? err : env.calls);
    return 0;
}
"""


def test_c_api_refuses_bad_span_input_with_code_and_message(tmp_path):
    """needle_call_options.span_strings: a query the spans cannot copy from is
    NEEDLE_CALL_E_ENGINE with the message, a bad keyword NEEDLE_CALL_E_TOOLS; a good query calls
    with spans of itself."""
    import subprocess
    from host_tests.scons_run import sdk_probe
    from host_tests.test_grammar_budget import ARCHIVE
    exe = sdk_probe(tmp_path / "lib", SPAN_PROBE, f"archive={ARCHIVE}", f"tools={ROOT / 'demo' / 'tools.json'}")

    def call(*args):
        proc = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        rc, rest = proc.stdout.rstrip("\n").split(" ", 1)
        return int(rc), rest
    assert call("a" * 1100) == (-1, "the query is 1100 bytes, more than the 1024 span strings copy from "
                                    "(NEEDLE_GRAMMAR_SPAN_MAX): shorten it, or raise grammar.span_bytes in the "
                                    "board file")
    bad = json.dumps([{"name": "t", "parameters": {"type": "object", "properties": {
        "s": {"type": "string", "const": "a", "x-needle-span": True}}}}])
    rc, msg = call("q", bad)
    assert rc == -2 and msg == ('tool "t": property "s": "x-needle-span" cannot be combined with "const" (a span '
                                'is any text of the query): drop one of them')
    rc, calls = call("weather in Lagos")
    assert rc == 0
    spans_of({"function_calls": json.loads(calls)}, "weather in Lagos")


@pytest.mark.emulator
def test_span_strings_on_a_watch_equal_the_twin(tmp_path, board_runner):
    """watch-m4 under qemu-system-arm, the list built in: --span-strings gives the twin's call."""
    from generator.build import boards
    from host_tests.scons_run import scons
    from host_tests.test_grammar_budget import ARCHIVE
    board = boards.load("watch-m4")
    if boards.missing_tools(board, run=True):
        pytest.skip(boards.missing_tools(board, run=True))
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    build = tmp_path / "b"
    scons("board=watch-m4", f"archive={ARCHIVE}", f"build={build}", f"tools={tools}")
    engine = board_runner(board, build / "needle.elf")
    query = QUERIES[0]
    got = engine.run(["--query", query, "--force-call", "--max-new", "72", "--span-strings"], cwd=tmp_path,
                     timeout=900, text=False)
    assert got.returncode == 0, got.stderr
    env = json.loads(got.stdout.decode())
    want = python_envelope(tools.read_text(), query, 72, True)
    keys = [k for k in ENVELOPE_KEYS if k != "prefix_tokens"]    # the watch starts from its snapshot
    assert {k: env[k] for k in keys} == {k: want[k] for k in keys}
    spans_of(env, query)
