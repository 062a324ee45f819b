"""Task accuracy (generator/commands/evaluate.py; docs/training.md, "Task accuracy").

* the scoring on hand-made answers: exact match (key order free, list order not, an integer
  is not 1.0 unless the schema says "number", true is not 1), decisions on the empty call,
  JSON and schema validity, the table;
* the data file's refusals, one line naming the line;
* `python -m generator eval` end to end on host_tests/data/eval_sample.jsonl with the
  bundled random demo archive: numbers that must hold whatever the model (the grammar's
  answers are always valid JSON and schema-valid), and the JSON re-scores to the table;
* `scons board=host eval=1` answers example by example as `python -m generator eval --mode a8`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from generator.build import boards
from generator.commands import evaluate as ev
from generator.errors import CactError
from host_tests.scons_run import scons

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "host_tests" / "data" / "eval_sample.jsonl"

TIMER = {"name": "set_timer", "parameters": {"type": "object", "properties": {
    "minutes": {"type": "integer", "minimum": 1}}, "required": ["minutes"]}}
CONVERT = {"name": "convert", "parameters": {"type": "object", "properties": {
    "amount": {"type": "number"}, "to": {"type": "string"},
    "legs": {"type": "array", "items": {"type": "number"}}}, "required": ["amount", "to"]}}
LIGHTS = {"name": "lights", "parameters": {"type": "object", "properties": {"on": {"type": "boolean"}}}}
TOOLS = [TIMER, CONVERT, LIGHTS]


def example(calls: list, tools: list = TOOLS) -> ev.Example:
    text = json.dumps(tools, separators=(",", ":"), ensure_ascii=False)
    return ev.Example(1, tools, "q", calls, text, None)


def answer(calls) -> str:
    """A model text holding `calls` (a list, or raw text between the markers)."""
    body = calls if isinstance(calls, str) else json.dumps(calls, separators=(",", ":"))
    return f"<think>ok</think><tool_call>{body}</tool_call><|im_end|>"


def call(name: str, **arguments) -> dict:
    return {"name": name, "arguments": arguments}


# ---- scoring -------------------------------------------------------------------------------

def test_parse_calls_takes_the_first_block_and_wants_a_list_of_calls():
    assert ev.parse_calls(answer([call("set_timer", minutes=5)])) == [call("set_timer", minutes=5)]
    assert ev.parse_calls("plain text <tool_call>[]</tool_call> <tool_call>[1]</tool_call>") == []
    for text in ["no block at all", "<tool_call>[]", "</tool_call>[]<tool_call>", None,
                 answer("[{\"name\":\"x\"}]"),                             # no arguments
                 answer("[{\"name\":\"x\",\"arguments\":{},\"id\":1}]"),   # something else in it
                 answer("[{\"name\":1,\"arguments\":{}}]"), answer("[{\"name\":\"x\",\"arguments\":[]}]"),
                 answer("{\"name\":\"x\",\"arguments\":{}}"),              # not a list
                 answer("[{\"name\":\"x\",\"arguments\":{\"a\":NaN}}]"),   # Python's, not JSON
                 answer("[{\"name\":\"x\",\"arguments\":{}}"), answer("[]]")]:
        assert ev.parse_calls(text) is None, text


def test_exact_match_ignores_key_order_but_not_list_order():
    gold = [call("convert", amount=3, to="EUR", legs=[1.5, 2]), call("set_timer", minutes=5)]
    reordered_keys = [{"arguments": {"legs": [1.5, 2], "to": "EUR", "amount": 3}, "name": "convert"},
                      {"arguments": {"minutes": 5}, "name": "set_timer"}]
    assert ev.calls_equal(gold, reordered_keys, TOOLS)
    assert not ev.calls_equal(gold, gold[::-1], TOOLS)                                    # call order
    assert not ev.calls_equal(gold, [call("convert", amount=3, to="EUR", legs=[2, 1.5]), gold[1]], TOOLS)
    assert not ev.calls_equal(gold, gold[:1], TOOLS) and not ev.calls_equal(gold, None, TOOLS)
    assert not ev.calls_equal(gold, [call("convert", amount=3, to="EUR", legs=[1.5, 2], x=1), gold[1]], TOOLS)
    assert not ev.calls_equal([call("set_timer", minutes=5)], [call("lights", minutes=5)], TOOLS)


def test_integer_and_float_differ_unless_the_schema_says_number():
    assert not ev.calls_equal([call("set_timer", minutes=10)], [call("set_timer", minutes=10.0)], TOOLS)
    assert ev.calls_equal([call("convert", amount=12, to="X")], [call("convert", amount=12.0, to="X")], TOOLS)
    assert ev.calls_equal([call("convert", amount=1, to="X", legs=[2])],
                          [call("convert", amount=1.0, to="X", legs=[2.0])], TOOLS)     # "items": number
    assert not ev.calls_equal([call("convert", amount=12.5, to="X")], [call("convert", amount=12, to="X")], TOOLS)
    # a bool is never a number, whatever Python says about True == 1
    assert not ev.calls_equal([call("lights", on=True)], [call("lights", on=1)], TOOLS)
    assert not ev.values_equal(1, True, {"type": "number"}) and not ev.values_equal(0.0, False, {"type": "number"})
    # no schema, or "integer" in a type list without "number": strict
    assert not ev.values_equal(1, 1.0) and not ev.values_equal(1, 1.0, {"type": ["integer", "null"]})
    assert ev.values_equal(1, 1.0, {"type": ["number", "null"]}) and ev.values_equal(None, None)
    assert not ev.values_equal("1", 1, {"type": "number"})


def test_score_the_empty_call_decision():
    calling = example([call("set_timer", minutes=5)])
    empty = example([])
    verdicts = ("exact_match", "decision", "json_valid", "schema_valid")

    def v(ex, text):
        s = ev.score(ex, text)
        return tuple(s[k] for k in verdicts)
    assert v(empty, answer([])) == (True, True, True, True)
    assert v(empty, answer([call("set_timer", minutes=5)])) == (False, False, True, True)
    assert v(calling, answer([])) == (False, False, True, True)
    assert v(calling, answer([call("set_timer", minutes=6)])) == (False, True, True, True)      # right tool, wrong value
    assert v(calling, answer([call("set_timer", minutes=5)])) == (True, True, True, True)
    assert v(calling, answer([call("set_timer", minutes=0)])) == (False, True, True, False)     # minimum 1
    assert v(calling, answer([call("reboot")])) == (False, True, True, False)                   # not in the block
    for text in ["no call written", answer("[{\"name\":"), None]:                               # None: the run failed
        assert v(empty, text) == (False, False, False, False)
    assert ev.score(calling, answer([]))["calls"] == [] and ev.score(calling, "x")["calls"] is None


def test_summary_and_table():
    results = [dict(error=None, seconds=1.0, exact_match=True, decision=True, json_valid=True, schema_valid=True),
               dict(error="engine exit 2: boom", seconds=9.0, exact_match=False, decision=False, json_valid=False,
                    schema_valid=False),
               dict(error=None, seconds=3.0, exact_match=False, decision=True, json_valid=True, schema_valid=False)]
    row = ev.summarize("a8", "on", results)
    assert row["n"] == 3 and row["failed"] == 1 and row["seconds_per_example"] == 2.0
    assert row["exact_match"] == {"count": 1, "rate": 1 / 3} and row["decision"]["count"] == 2
    table = ev.render_table([row, ev.summarize("rpi-zero", "off", results[:1])]).splitlines()
    assert table[0].split() == ["mode", "grammar", "n", "failed", "exact", "decision", "json", "schema", "s/example"]
    assert table[1].split() == ["a8", "on", "3", "1", "33.3%", "66.7%", "66.7%", "33.3%", "2.00"]
    assert table[2].split() == ["rpi-zero", "off", "1", "0", "100.0%", "100.0%", "100.0%", "100.0%", "1.00"]
    assert len({len(line) for line in table}) == 1          # right-aligned numbers: one width


def test_engine_output_from_a_linux_board_and_a_uart_console():
    env = json.dumps({"text": "<tool_call>[]</tool_call><|im_end|>", "function_calls": []})
    assert ev.engine_text(0, env + "\n", "", True, False) == "<tool_call>[]</tool_call><|im_end|>"
    assert ev.engine_text(0, "two\nlines\n", "", False, False) == "two\nlines"
    assert ev.engine_text(0, env + "\nneedle: exit 0\n", "", True, True).endswith("<|im_end|>")
    assert ev.engine_text(0, "two\nlines\nneedle: exit 0\n", "", False, True) == "two\nlines"
    with pytest.raises(CactError, match=r"^engine exit 2: needle: error: too long$"):
        ev.engine_text(2, "needle: error: too long\nneedle: exit 2\n", "", True, True)
    with pytest.raises(CactError, match=r"^engine exit 3: archive mismatch$"):
        ev.engine_text(3, "", "archive mismatch\n", True, False)
    with pytest.raises(CactError, match="printed no envelope"):
        ev.engine_text(0, "garbage\n", "", True, False)


# ---- the data file -----------------------------------------------------------------------------

def test_examples_load_with_their_lines(tmp_path):
    ex = ev.load_examples(SAMPLE)
    assert len(ex) == 8 and [e.line for e in ex] == list(range(1, 9))
    assert sum(not e.calls for e in ex) == 3
    assert ex[0].tools_text == json.dumps(ex[0].tools, separators=(",", ":"), ensure_ascii=False)
    f = tmp_path / "d.jsonl"
    line = {"tools": [LIGHTS], "query": "a\u2028b", "calls": [call("lights", on=True)]}   # U+2028 is not a line end
    f.write_text("\n" + json.dumps(line, ensure_ascii=False) + "\n\n" + json.dumps(line) + "\n", encoding="utf-8")
    got = ev.load_examples(f)
    assert [e.line for e in got] == [2, 4] and got[0].query == "a\u2028b"
    assert [e.line for e in ev.load_examples(f, limit=1)] == [2]


@pytest.mark.parametrize("line, message", [
    ('{"tools": [}', "line 2: not JSON: Expecting value (column 12)"),
    ('[1]', "line 2: want an object"),
    ('{"tools": [], "query": "q"}', "line 2: no 'calls' key"),
    ('{"tools": [{"description": "x"}], "query": "q", "calls": []}', "line 2: tools must be a list of tool objects"),
    ('{"tools": [], "query": " ", "calls": []}', "line 2: query must be a non-empty string"),
    ('{"tools": [{"name": "a"}], "query": "q", "calls": [{"name": "a"}]}', "line 2: calls[0] must be"),
    ('{"tools": [{"name": "a"}], "query": "q", "calls": [{"name": "b", "arguments": {}}]}',
     "line 2: calls[0] names 'b', which is not one of its tools"),
    ('{"tools": [{"name": "a", "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}}}], '
     '"query": "q", "calls": [{"name": "a", "arguments": {"n": 1.5}}]}', "line 2: calls[0] arguments do not validate"),
    ('{"tools": [{"name": "a", "parameters": {"type": "object", "patternProperties": {}}}], "query": "q", "calls": []}',
     "line 2: tools: "),
    ('{"tools": [], "query": "q", "calls": [], "x": Infinity}', "line 2: not JSON: Infinity is not JSON"),
])
def test_bad_lines_are_refused_with_their_number(tmp_path, line, message):
    f = tmp_path / "d.jsonl"
    f.write_text('{"tools": [], "query": "q", "calls": []}\n' + line + "\n")
    with pytest.raises(CactError) as err:
        ev.load_examples(f)
    assert str(err.value).startswith(f"{f} {message}"), str(err.value)
    assert "\n" not in str(err.value)


def test_missing_and_empty_data_files(tmp_path):
    with pytest.raises(CactError, match="does not exist"):
        ev.load_examples(tmp_path / "none.jsonl")
    (tmp_path / "e.jsonl").write_text("\n \n")
    with pytest.raises(CactError, match="has no examples"):
        ev.load_examples(tmp_path / "e.jsonl")
    (tmp_path / "b.jsonl").write_bytes(b'{"tools": [], "query": "q", "calls": []}\n"\xff"\n')
    with pytest.raises(CactError, match="line 2: not UTF-8"):
        ev.load_examples(tmp_path / "b.jsonl")


# ---- the command line ---------------------------------------------------------------------------

def run_generator(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "generator", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def demo_archive(tmp_path_factory) -> Path:
    """The bundled random demo archive, made as SConstruct makes it."""
    out = tmp_path_factory.mktemp("eval") / "demo.cact"
    proc = run_generator("synth", "--preset", "tiny", "--seed", "1", "-o", out)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="module")
def a8_eval(demo_archive, tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict]:
    """`python -m generator eval --mode a8 --grammar both` on the sample, with its JSON."""
    out = tmp_path_factory.mktemp("eval") / "a8.json"
    proc = run_generator("eval", "--archive", demo_archive, "--data", SAMPLE, "--mode", "a8",
                         "--grammar", "both", "--json", out)
    assert proc.returncode == 0, proc.stderr
    return proc, json.loads(out.read_text())


@pytest.mark.slow
def test_eval_end_to_end_on_the_sample(a8_eval):
    proc, doc = a8_eval
    lines = proc.stdout.splitlines()
    assert lines[1].split()[:3] == ["mode", "grammar", "n"]
    rows = {(r["mode"], r["grammar"]): r for r in doc["metrics"]}
    assert list(rows) == [("a8", "on"), ("a8", "off")] and doc["examples"] == 8 and doc["max_new"] == 96
    for (mode, grammar), row in rows.items():
        shown = next(l.split() for l in lines if l.split()[:2] == [mode, grammar])
        assert shown[2:4] == [str(row["n"]), str(row["failed"])] and row["n"] == 8 and row["failed"] == 0
        assert shown[4:8] == [f"{100 * row[k]['rate']:.1f}%" for k in ev.METRICS]
        c = {k: row[k]["count"] for k in ev.METRICS}
        assert c["exact_match"] <= c["decision"] <= c["json_valid"] and c["schema_valid"] <= c["json_valid"]
    on = rows["a8", "on"]
    # the grammar's answer is always a call list, every call schema-valid
    assert on["json_valid"]["rate"] == 1.0 and on["schema_valid"]["rate"] == 1.0
    # the per-example JSON re-scores to the table, from the model's text alone
    examples = ev.load_examples(SAMPLE)
    for key in ("a8/on", "a8/off"):
        mode, grammar = key.split("/")
        again = [{**ev.score(ex, p["runs"][key]["text"]), "error": None, "seconds": 1.0}
                 for ex, p in zip(examples, doc["predictions"])]
        assert {k: v for k, v in ev.summarize(mode, grammar, again).items() if k != "seconds_per_example"} == \
               {k: v for k, v in rows[mode, grammar].items() if k != "seconds_per_example"}
    for ex, p in zip(examples, doc["predictions"]):
        assert p["line"] == ex.line and p["gold"] == ex.calls
        assert p["runs"]["a8/on"]["text"].endswith("</tool_call><|im_end|>")


@pytest.mark.parametrize("args, message", [
    (["--data", "missing.jsonl"], "error: missing.jsonl does not exist"),
    (["--data", "BAD"], "line 2: not JSON: "),
    (["--data", SAMPLE, "--mode", "fp16"], "argument --mode: invalid choice: 'fp16'"),
    (["--data", SAMPLE, "--limit", "0"], "argument --limit: want a positive integer"),
    (["--data", SAMPLE, "--archive", "README.md"], "README.md: not a .cact archive"),
])
def test_eval_user_errors_are_one_line(demo_archive, tmp_path, args, message):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(SAMPLE.read_text().splitlines()[0] + "\n{\"tools\": [\n")
    args = [bad if a == "BAD" else a for a in args]
    archive = [] if "--archive" in args else ["--archive", demo_archive]
    proc = run_generator("eval", *archive, *args)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


# ---- scons eval=1 ---------------------------------------------------------------------------

@pytest.mark.slow
def test_scons_eval_on_the_host_matches_the_eval_command(demo_archive, a8_eval, tmp_path):
    """The host engine's answers, through scons eval=1, are python -m generator eval --mode a8's,
    example by example (calls and whole texts), and the table has both."""
    proc = scons("board=host", "eval=1", f"eval_data={SAMPLE}", "eval_limit=4", f"archive={demo_archive}",
                 f"build={tmp_path / 'b'}")
    assert "engine against the a8 reference: 0 of 12 runs differ" in proc.stdout, proc.stdout   # on, off, span
    table = [l.split() for l in proc.stdout.splitlines()]
    assert ["host", "on", "4", "0"] in [row[:4] for row in table]
    doc = json.loads((tmp_path / "b" / "eval.json").read_text())
    assert doc["engine"]["board"] == "host" and doc["engine"]["mismatches"]["runs"] == 12   # 4 examples x on, off, span
    _, want = a8_eval
    assert len(doc["predictions"]) == 4
    for got, ref in zip(doc["predictions"], want["predictions"]):
        assert got["line"] == ref["line"]
        for g in ("on", "off"):
            e, r = got["runs"][f"host/{g}"], ref["runs"][f"a8/{g}"]
            assert e["error"] is None and (e["calls"], e["text"]) == (r["calls"], r["text"]), (got["line"], g)


def assert_refused(proc: subprocess.CompletedProcess, text: str) -> None:
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith("scons: error: ") and text in proc.stderr, proc.stderr


@pytest.mark.parametrize("args, text", [
    (["eval_data=x.jsonl"], "eval_data=x.jsonl goes with eval=1"),
    (["eval=1", f"eval_data={SAMPLE}", "eval_limit=0"], "eval_limit=0 must be a positive integer"),
    (["eval=1", "eval_data=nope.jsonl"], "eval_data=nope.jsonl does not exist"),
    (["eval=1", f"eval_data={SAMPLE}", "board=all"], "eval=1 evaluates one board: pass board=NAME"),
    (["eval=1", f"eval_data={SAMPLE}", "kv_window=16"], "drop kv_window=16"),
    (["eval=1", "eval_data=BAD"], "line 2: not JSON"),
])
def test_scons_eval_refusals(tmp_path, args, text):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(SAMPLE.read_text().splitlines()[0] + "\n{\n")
    args = [a.replace("BAD", str(bad)) for a in args]
    board = [] if any(a.startswith("board=") for a in args) else ["board=host"]
    assert_refused(scons(*board, *args, f"build={tmp_path / 'b'}", check=False), text)


def test_scons_eval_names_the_missing_default_data(tmp_path):
    """In a tree without demo/eval (deleted, or a trimmed copy), eval=1 without eval_data=
    names the missing file and the way out.  Run in a copy of what SConstruct reads."""
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in ("SConstruct", "site_scons", "generator", "templates", "firmware", "boards", "demo"):
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, tree / name, ignore=shutil.ignore_patterns("__pycache__", "eval"))
        else:
            shutil.copy2(src, tree / name)
    assert not (tree / ev.DEFAULT_DATA).exists()
    proc = scons("board=host", "eval=1", f"build={tmp_path / 'b'}", cwd=tree, check=False)
    assert_refused(proc, f"eval=1 reads {ev.DEFAULT_DATA} unless eval_data=FILE says otherwise, and it is missing")
    assert "demo/eval/README.md" in proc.stderr
    assert "eval_data=host_tests/data/eval_sample.jsonl" in proc.stderr


def test_scons_eval_on_a_uart_board_needs_its_built_in_list(tmp_path):
    """A UART console reads no file: without tools=FILE it cannot take an example's tools, and
    a built-in list no example uses leaves nothing to evaluate."""
    why = boards.missing_tools(boards.load("watch-m4-uart"), run=True)
    if why:
        pytest.skip(why)
    proc = scons("board=watch-m4-uart", "eval=1", f"eval_data={SAMPLE}", f"build={tmp_path / 'b'}", check=False)
    assert_refused(proc, "board watch-m4-uart has no host files (console = \"uart\"), so it cannot read "
                         "each example's tools: build it with tools=FILE")
    proc = scons("board=watch-m4-uart", "eval=1", f"eval_data={SAMPLE}", "tools=host_tests/data/tools_pattern.json",
                 f"build={tmp_path / 'b'}", check=False)
    assert_refused(proc, "none of the 8 examples")
    assert [ev.same_tools(e, (ROOT / "demo" / "tools.json").read_text()) for e in ev.load_examples(SAMPLE)] == \
           [True, True, True, False, False, True, False, False]
