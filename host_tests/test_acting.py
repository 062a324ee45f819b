"""Calls a device can act on (issue 44, items 1 and 2; docs/grammar.md §5a).

The grammar guarantees a call that parses; it cannot make the model mean it.  Asked to "heat
the house to 40" with one tool whose `celsius` runs from 10 to 30, the demo model wants `4`
where only 1-3 can start a value in range; the grammar completed `{"celsius": 20}` and the
envelope said `"success": true`.  Now the step is counted as an override, the call is refused
(error code 4, naming the argument and its bounds) unless `--overrides complete` is asked
for, and a call below the minimum confidence is withheld (error code 3), in the CLI, the
service and the C API (needle_run() is tested in test_bindings.py), with the Python twin
(generator/tools/decode.py judge()) deciding the same, byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from generator.archive import reader
from generator.errors import CactError
from generator.tools.decode import parse_min_confidence
from host_tests.scons_run import ROOT, scons
from test_serve import serve_pipe

DEMOS = {"n2": ROOT / "demo" / "needle2-demo.cact", "n3": ROOT / "demo" / "needle3-demo.cact"}
CELSIUS = {"type": "integer", "minimum": 10, "maximum": 30}
THERMOSTAT = {"name": "set_thermostat", "description": "Set the thermostat.",
              "parameters": {"type": "object", "properties": {"celsius": CELSIUS}, "required": ["celsius"]}}
LIGHTS = {"name": "set_lights", "description": "Turn the lights in a room on or off.",
          "parameters": {"type": "object", "properties": {
              "room": {"type": "string", "enum": ["kitchen", "office", "bedroom"]},
              "state": {"type": "string", "enum": ["on", "off"]}}, "required": ["room", "state"]}}
FAN = {"name": "set_fan", "description": "Set the fan speed.",
       "parameters": {"type": "object", "properties": {"speed": {"type": "integer", "minimum": 0, "maximum": 3}},
                      "required": ["speed"]}}
# the same list with each tool's own minimum confidence (our extension key, never rendered)
OWN = [dict(THERMOSTAT, **{"x-needle-min-confidence": 0.99}), dict(LIGHTS, **{"x-needle-min-confidence": 0.1}), FAN]
LISTS = {"thermostat": [THERMOSTAT], "home": [THERMOSTAT, LIGHTS, FAN], "own": OWN,
         "demo": json.loads((ROOT / "demo" / "tools.json").read_text())}
CASES = [("thermostat", "heat the house to 40"), ("thermostat", "set the heating to 21 degrees"),
         ("home", "heat the house to 40 degrees"), ("home", "set the fan to 2"), ("home", "turn the heating off"),
         ("home", "turn off the kitchen lights"), ("demo", "set a timer for 10 minutes"),
         ("demo", "What is the weather in Lagos?"), ("own", "set the thermostat to 21"),
         ("own", "turn off the kitchen lights"), ("own", "turn the heating off"), ("own", "set the fan to 2")]
JUDGED = ("type", "success", "error", "error_code", "function_calls", "confidence", "overrides", "override",
          "min_confidence")


@pytest.fixture(scope="module")
def engines(tmp_path_factory, board_runner, demo_host) -> dict:
    """The host engine of each demo archive (BoardRunner: .run(args), .command(args))."""
    build = tmp_path_factory.mktemp("acting-n3")
    scons("board=host", f"archive={DEMOS['n3']}", f"build={build}")
    return {"n2": demo_host, "n3": board_runner("host", build / "needle")}


@pytest.fixture(scope="module")
def builtin(tmp_path_factory, board_runner, tool_files):
    """The n2 demo's host engine with the OWN list built in (its grammar's tables in flash)."""
    build = tmp_path_factory.mktemp("acting-builtin")
    scons("board=host", f"archive={DEMOS['n2']}", f"build={build}", f"tools={tool_files['own']}")
    return board_runner("host", build / "needle")


@pytest.fixture(scope="module")
def tool_files(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("tools")
    files = {}
    for name, tools in LISTS.items():
        files[name] = d / f"{name}.json"
        files[name].write_text(json.dumps(tools), encoding="utf-8")
    return files


def reference(name: str, tools: list, query: str, min_confidence=None, overrides="refuse") -> dict:
    from generator.commands.evaluate import Reference
    from generator.tools.prompt import render_prompt_ids
    from generator.tools.decode import run_turn
    from generator.tools.schema import compile_tools
    ref = _references.get(name) or _references.setdefault(name, Reference(reader.read(DEMOS[name].read_bytes()), "a8"))
    text = json.dumps(tools)
    env = run_turn(ref.model, ref.tok, compile_tools(text), render_prompt_ids(ref.tok, text, query), 96,
                   min_confidence=min_confidence, overrides=overrides)
    env["confidence"] = float(f"{env['confidence']:.9f}")
    env["min_confidence"] = float(f"{env['min_confidence']:.9f}")
    return {k: env[k] for k in JUDGED}


_references: dict = {}


def cli(engine, tools: Path, query: str, *args: str) -> dict:
    proc = engine.run(["--tools", str(tools), "--query", query, *args], timeout=120)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    env = json.loads(proc.stdout)
    return {k: env[k] for k in JUDGED}


def test_the_out_of_range_thermostat_is_refused_naming_the_argument_and_its_bounds():
    env = reference("n2", [THERMOSTAT], "heat the house to 40")
    assert (env["success"], env["error_code"]) == (False, 4)
    assert env["error"] == ('the grammar overrode the model\'s "4" in "celsius" of set_thermostat (the schema '
                            'allows an integer from 10 to 30): the call was refused; ask again within the tools\' '
                            'schema, or use overrides complete to take the grammar\'s value')
    assert env["override"] == {"token": 19, "offset": 49, "place": "value", "tool": "set_thermostat",
                               "argument": "celsius", "wanted": "4", "allowed": "1-3",
                               "schema": "an integer from 10 to 30"}
    # complete: the grammar's value, counted, not refused (the confidence still withholds it)
    done = reference("n2", [THERMOSTAT], "heat the house to 40", min_confidence=0, overrides="complete")
    assert (done["success"], done["overrides"], done["function_calls"]) == \
        (True, 1, [{"name": "set_thermostat", "arguments": {"celsius": 20}}])
    assert reference("n2", [THERMOSTAT], "heat the house to 40", overrides="complete")["error_code"] == 3


@pytest.mark.parametrize("name", sorted(DEMOS))
def test_the_issue_cases_are_never_a_success(name):
    """The out-of-range and unseen-tool requests of issue 44 with the default settings: no call,
    or refused or withheld, on both demo generations; the requests the tools serve succeed."""
    for key, query in [("thermostat", "heat the house to 40"), ("home", "heat the house to 40 degrees"),
                       ("home", "set the fan to 2")]:
        env = reference(name, LISTS[key], query)   # nothing to act on: no call, or refused or withheld
        assert env["function_calls"] == [] or (not env["success"] and env["error_code"] in (3, 4)), (query, env)
    for key, query, call in [("home", "turn off the kitchen lights",
                              {"name": "set_lights", "arguments": {"room": "kitchen", "state": "off"}}),
                             ("demo", "set a timer for 10 minutes", {"name": "set_timer", "arguments": {"minutes": 10}})]:
        env = reference(name, LISTS[key], query)
        assert (env["success"], env["function_calls"]) == (True, [call]), (query, env)


@pytest.mark.parametrize("name", sorted(DEMOS))
@pytest.mark.parametrize("settings", [(), ("--overrides", "complete"), ("--min-confidence", "0"),
                                      ("--min-confidence", "0.99", "--overrides", "refuse")])
def test_the_cli_judges_like_the_twin(engines, tool_files, name, settings):
    flags = dict(zip(settings[::2], settings[1::2]))
    floor = parse_min_confidence(flags["--min-confidence"]) if "--min-confidence" in flags else None
    for key, query in CASES:
        want = reference(name, LISTS[key], query, floor, flags.get("--overrides", "refuse"))
        assert cli(engines[name], tool_files[key], query, *settings) == want, (key, query)


@pytest.mark.parametrize("args,message", [
    (["--min-confidence", "1.5"], "--min-confidence wants a number from 0 to 1"),
    (["--min-confidence", "-0.1"], "not \"-0.1\""),
    (["--min-confidence", "0.1234567"], "at most 6 decimals"),
    (["--min-confidence", "abc"], "not \"abc\""),
    (["--min-confidence", ""], "--min-confidence wants"),
    (["--overrides", "bend"], "--overrides wants refuse or complete"),
    (["--overrides", "refuse", "--overrides", "complete"], "given more than once"),
])
def test_bad_settings_are_refused_in_one_line(engines, tool_files, args, message):
    proc = engines["n2"].run(["--tools", str(tool_files["demo"]), "--query", "hi", *args])
    assert (proc.returncode, proc.stdout, proc.stderr.count("\n")) == (2, "", 1) and message in proc.stderr, proc.stderr


def test_the_settings_go_with_a_constrained_query(engines, tool_files):
    for args in (["--prompt", "hi", "--min-confidence", "0.5"],
                 ["--tools", str(tool_files["demo"]), "--query", "hi", "--raw", "--overrides", "complete"]):
        proc = engines["n2"].run(args)
        assert proc.returncode == 2 and "go with a constrained --query or --serve" in proc.stderr, proc.stderr


@pytest.mark.parametrize("text", ["0", "1", "0.5", ".25", "1.0", "0.000001", "1.000000", "1.5", "1.000001", "2",
                                  "0.", "", "-0", "+0.5", "0.1234567", "1e-1", " 0.5", "0.5 ", "00.5", "0x1"])
def test_the_threshold_parsers_are_twins(engines, tool_files, text):
    """needle_parse_confidence (the CLI) and parse_min_confidence (the twin) take the same texts
    and give the same parts per million (the envelope's min_confidence)."""
    try:
        ppm = parse_min_confidence(text)
    except CactError:
        ppm = None
    proc = engines["n2"].run(["--tools", str(tool_files["demo"]), "--query", "hi", "--min-confidence", text,
                              "--max-new", "24"])
    assert (proc.returncode == 0) == (ppm is not None), (text, proc.stderr)
    if ppm is not None:
        assert json.loads(proc.stdout)["min_confidence"] == ppm / 1e6


def test_the_service_judges_each_request(engines, tool_files):
    """Defaults from the service's flags, a request's own keys over them, refused settings
    answered in one line with the session untouched, and a call not to act on never ok:true."""
    q40 = {"query": "heat the house to 40", "tools": [THERMOSTAT]}
    lines = [dict(q40, id=1),                                              # refused: an override
             dict(q40, id=2, overrides="complete", min_confidence=0),      # completed, counted
             {"id": 3, "query": "set a timer for 10 minutes"},             # the --min-confidence 0.99 default
             {"id": 4, "query": "set a timer for 10 minutes", "min_confidence": 0.5},
             {"id": 5, "query": "set a timer for 10 minutes", "min_confidence": 2},
             {"id": 6, "query": "set a timer for 10 minutes", "overrides": "bend"},
             {"id": 7, "prompt": "hi", "min_confidence": 0.5},
             {"id": 8, "results": {"ok": True}, "min_confidence": 0}]       # continues call 4
    a = serve_pipe(engines["n2"], [json.dumps(x).encode() for x in lines], "--tools", str(tool_files["demo"]),
                   "--min-confidence", "0.99")
    assert [x["id"] for x in a] == list(range(1, 9))
    assert (a[0]["ok"], a[0]["envelope"]["error_code"], a[0]["error"]) == (False, 4, a[0]["envelope"]["error"])
    assert "stop" not in a[0] and a[0]["envelope"]["override"]["argument"] == "celsius"
    assert (a[1]["ok"], a[1]["envelope"]["overrides"], a[1]["envelope"]["function_calls"]) == \
        (True, 1, [{"name": "set_thermostat", "arguments": {"celsius": 20}}])
    assert (a[2]["ok"], a[2]["envelope"]["error_code"], a[2]["envelope"]["min_confidence"]) == (False, 3, 0.99)
    assert "is below the minimum 0.99: the call was withheld" in a[2]["error"]
    assert a[3]["ok"] and a[3]["envelope"]["function_calls"] == [{"name": "set_timer", "arguments": {"minutes": 10}}]
    for bad, words in ((a[4], '"min_confidence" must be a number from 0 to 1'),
                       (a[5], '"overrides" must be "refuse" or "complete"'),
                       (a[6], '"min_confidence" and "overrides" go with a constrained "query" or with "results"')):
        assert (bad["ok"], set(bad)) == (False, {"id", "ok", "error"}) and words in bad["error"], bad
    # the refused requests left the session as call 4 left it: its results are answered
    assert a[7]["ok"] and a[7]["envelope"]["min_confidence"] == 0.0, a[7]


def test_a_withheld_call_raises_in_the_python_client(engines, tool_files):
    import sys
    sys.path.insert(0, str(ROOT / "examples" / "client"))
    from needle_client import NeedleClient, NeedleError
    with NeedleClient.spawn(engines["n2"].command(["--serve", "--tools", str(tool_files["thermostat"])])) as c:
        with pytest.raises(NeedleError, match="in \"celsius\" of set_thermostat") as info:
            c.query("heat the house to 40")
        assert info.value.answer["envelope"]["function_calls"]   # kept for the log


def test_a_tool_s_own_minimum_confidence_rules_its_calls(engines, tool_files, builtin):
    """"x-needle-min-confidence" on a tool object: the minimum for calls of that tool (higher
    or lower than the caller's), the largest over the tools a list calls; the same from a
    list given at run time and from the built-in tables (tools=FILE)."""
    thermostat = reference("n2", OWN, "set the thermostat to 21")
    lights = reference("n2", OWN, "turn off the kitchen lights", min_confidence=999999)
    assert thermostat["function_calls"][0]["name"] == "set_thermostat" and thermostat["min_confidence"] == 0.99
    assert thermostat["confidence"] < 0.99 and thermostat["error_code"] == 3      # its own bar, above 0.5
    assert (lights["function_calls"][0]["name"], lights["min_confidence"], lights["success"]) == \
        ("set_lights", 0.1, True)                                                   # its own, below the caller's
    for query in ("set the thermostat to 21", "turn off the kitchen lights"):
        assert cli(builtin, tool_files["own"], query) == reference("n2", OWN, query)
        proc = builtin.run(["--query", query], timeout=120)                         # the built-in list itself
        env = json.loads(proc.stdout)
        assert {k: env[k] for k in JUDGED} == reference("n2", OWN, query), query


def test_the_extension_key_is_not_rendered(engines, tool_files):
    """The model sees the list as it would without our keys: the same prompt ids."""
    from generator.tools.prompt import render_prompt
    plain = [THERMOSTAT, LIGHTS, FAN]
    assert render_prompt(json.dumps(OWN), "hi") == render_prompt(json.dumps(plain), "hi")
    ids = [engines["n2"].run(["--tools", str(tool_files[k]), "--query", "hi", "--ids", "--max-new", "1"],
                             timeout=60).stdout for k in ("own", "home")]
    assert ids[0] == ids[1] and ids[0].strip()


@pytest.mark.parametrize("tool,message", [
    ({"x-needle-min-confidence": "0.9"}, 'column 43: "x-needle-min-confidence" must be a number from 0 to 1'),
    ({"x-needle-min-confidence": 1.5}, '"x-needle-min-confidence" must be a number from 0 to 1'),
    ({"x-needle-min-confidence": 0.1234567}, "at most 6 decimals"),
    ({"x-needle-min-conf": 0.5}, 'unknown extension key on a tool (the one there is: "x-needle-min-confidence")'),
])
def test_bad_tool_extensions_are_refused_like_the_twin(engines, tmp_path, tool, message):
    from generator.tools.schema import compile_tools
    text = json.dumps([dict({"name": "a"}, **tool)])
    with pytest.raises(CactError) as info:
        compile_tools(text)
    f = tmp_path / "bad.json"
    f.write_text(text)
    proc = engines["n2"].run(["--tools", str(f), "--query", "hi"])
    assert proc.returncode == 2 and proc.stderr == f"needle: error: {f}: {info.value}\n" and message in proc.stderr
