"""The C call grammar and constrained decoding against their Python twins (docs/grammar.md).

* the grammar alone (host_tests/c/grammar_driver.c, built with AddressSanitizer and UBSan):
  random tool lists of every supported keyword, and random byte walks through them, give
  the same compile errors, the same accepted prefixes and the same shortest-completion
  lengths in C and in generator/tools/grammar.py;
* whole turns: `needle --tools F --query Q` prints the envelope generator/tools/decode.py
  computes on the reference (the same tokens, call, reasoning and confidence), for both
  generations, with and without --force-call, and for budgets that cut the call short;
* every call is valid JSON whose arguments validate against the tool's schema (jsonschema).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from generator.archive import reader
from generator.archive.tokenizer import Tokenizer
from generator.build import sources
from generator.paths import FIRMWARE_DIR
from generator.tools.prompt import render_prompt_ids
from generator.errors import CactError
from generator.model import reference
from generator.tools import grammar as gm
from generator.tools.decode import run_turn
from generator.tools.schema import compile_tools
from host_tests.scons_run import scons

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "host_tests" / "golden"
DEMO_TOOLS = ROOT / "demo" / "tools.json"


# ---- random tool lists ---------------------------------------------------------------------
PATTERNS = ["^[a-z]{2,5}$", "^\\d{3}-\\d{4}$", "[A-Z]", "^[^,\"]*$", "^(x)$", "^a+b?c*$", "\\w+@\\w+",
            "^[é-ë]{1,3}$", "^.$", "^\\{[0-9]\\}$", "a{3,2}", "^[\\u0000-\\u001f]$"]
WORDS = ["city", "minutes", "level", "on", "mode", "tags", "name", "ville", "température", "开关", "x", "y_z"]


def _number(r: random.Random, kind: str) -> dict:
    s: dict = {"type": kind}
    lo = r.choice([None, -5, 0, 1, 10, -1000000, 0.5])
    if lo is not None:
        s[r.choice(["minimum", "exclusiveMinimum"])] = lo
    if r.random() < 0.6:
        hi = (lo or 0) + r.choice([0, 1, 3, 100, 2.25, 10 ** 9])
        s[r.choice(["maximum", "exclusiveMaximum"])] = hi
    if r.random() < 0.3:
        s["multipleOf"] = r.choice([2, 5, 7, 0.25, 0.1] if kind == "number" else [2, 3, 5, 25])
    return s


def _schema(r: random.Random, depth: int) -> dict:
    kind = r.choice(["string", "integer", "number", "boolean", "null", "enum", "const", "array", "object"]
                    if depth < 3 else ["string", "integer", "boolean", "enum"])
    if kind == "string":
        s = {"type": "string"}
        if r.random() < 0.3:
            s["pattern"] = r.choice(PATTERNS)
        else:
            if r.random() < 0.4:
                s["minLength"] = r.randint(0, 3)
            if r.random() < 0.4:
                s["maxLength"] = s.get("minLength", 0) + r.randint(0, 4)
        return s
    if kind in ("integer", "number"):
        return _number(r, kind)
    if kind == "enum":
        pool = ["on", "off", "auto", "été", "冷", 1, 2.5, True, None, "a\"b", "tab\t"]
        return {"enum": r.sample(pool, r.randint(1, 4))}
    if kind == "const":
        return {"const": r.choice(["fixed", 3, False])}
    if kind == "array":
        item = _schema(r, depth + 1) if r.random() < 0.7 else {"enum": ["a", "b", "c"]}
        s = {"type": "array", "items": item}
        if r.random() < 0.4:
            s["minItems"] = r.randint(0, 2)
        if r.random() < 0.4:
            s["maxItems"] = s.get("minItems", 0) + r.randint(0, 2)
        if "enum" in item and r.random() < 0.5:
            s["uniqueItems"] = True
        return s
    if kind == "object":
        return _object(r, depth + 1)
    return {"type": kind}


def _object(r: random.Random, depth: int) -> dict:
    names = r.sample(WORDS, r.randint(0, 4))
    props = {n: _schema(r, depth) for n in names}
    s: dict = {"type": "object", "properties": props}
    req = [n for n in names if r.random() < 0.5]
    if req:
        s["required"] = req
    if r.random() < 0.2:
        s["additionalProperties"] = False
    return s


def random_tools(seed: int) -> str:
    r = random.Random(seed)
    tools = []
    for i in range(r.randint(1, 6)):
        t = {"name": r.choice(["get_weather", "set_timer", "lights", "reboot", "météo", "ping"]) + str(i),
             "description": "a tool"}
        if r.random() < 0.9:
            t["parameters"] = _object(r, 1)
        tools.append(t)
    return json.dumps(tools, ensure_ascii=False, indent=r.choice([None, 2]))


# ---- the grammar alone, C against Python ----------------------------------------------------------
@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    exe = tmp_path_factory.mktemp("grammar") / "grammar_driver"
    subprocess.run(["gcc", "-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror",
                    "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                    f"-I{FIRMWARE_DIR / sources.LIB_DIR}", str(ROOT / "host_tests" / "c" / "grammar_driver.c"),
                    *(str(FIRMWARE_DIR / f) for f in sources.GRAMMAR_SOURCES), "-o", str(exe)], check=True)
    return exe


CANDIDATES = list(b'{}[]",:-.0123456789eE \\/abcdntuxyzAZ_') + [0x00, 0x1F, 0x7F, 0xC3, 0xA9, 0xE5, 0x86,
                                                                   0xB7, 0xED, 0xF0, 0x9F, 0x98, 0x80, 0xFF]


def walks(g, r: random.Random, count: int, cands=CANDIDATES, complete: bool = False) -> list:
    """Byte strings that follow the grammar (a random allowed byte of cands each step, drifting
    to the shortest completion as they grow), some with a random byte at the end.  complete:
    every step must allow some byte (cands: all 256, so a dead end would show)."""
    out = []
    for _ in range(count):
        state, data = gm.start(g), bytearray()
        limit = r.randint(5, 160)
        while not gm.done(g, state):
            options = []
            for b in cands:
                nxt = gm.feed(g, state, b)
                if nxt is not None:
                    options.append((gm.min_bytes(g, nxt), b, nxt))
            assert options or not complete, data       # never a dead end
            if not options:
                break
            if len(data) > limit:
                options.sort(key=lambda o: o[0])
                options = [o for o in options if o[0] == options[0][0]]
            _, b, state = r.choice(options)
            data.append(b)
        if r.random() < 0.3:
            data.append(r.choice(cands))
        out.append(bytes(data))
    return out


def python_driver(g, cases: list) -> list:
    lines = [f"OK {g.nodes[g.root].min_bytes}"]
    for data in cases:
        state, parts = gm.start(g), []
        for b in data:
            nxt = gm.feed(g, state, b)
            if nxt is None:
                parts.append("X")
                break
            state = nxt
            parts.append(str(gm.min_bytes(g, state)))
        lines.append("".join(" " + p for p in parts) + (" D" if gm.done(g, state) else ""))
    return lines


def run_driver(driver, tmp_path, text: str, force: bool, cases: list) -> list:
    f = tmp_path / "tools.json"
    f.write_text(text, encoding="utf-8")
    proc = subprocess.run([str(driver), str(f), "1" if force else "0"], check=True, capture_output=True,
                          input="".join(c.hex() + "\n" for c in cases).encode())
    return proc.stdout.decode("utf-8").splitlines()


@pytest.mark.parametrize("block", range(8))
def test_grammar_equals_the_python_twin(driver, tmp_path, block):
    """25 random tool lists per block: the same compile result, and on 6 byte walks each the
    same refusals and shortest-completion lengths after every byte."""
    compiled = 0
    for seed in range(block * 25, block * 25 + 25):
        text = random_tools(seed)
        force = seed % 3 == 0
        try:
            g = compile_tools(text, force_call=force)
        except CactError as exc:
            assert run_driver(driver, tmp_path, text, force, []) == [f"ERR {exc}"], text
            continue
        compiled += 1
        cases = walks(g, random.Random(seed), 6)
        assert run_driver(driver, tmp_path, text, force, cases) == python_driver(g, cases), (seed, text)
    assert compiled >= 10      # the generator mostly writes valid lists


def test_a_character_in_progress_counts_only_items_that_can_take_it(driver, tmp_path):
    """A pattern string in the middle of a UTF-8 character: the shortest completion counts only
    the NFA items whose class holds a character with those bytes (hypothesis found `[A-Z]`
    counted as if it could take U+0080 after a 0xC2 lead byte, one byte short)."""
    tools = [{"name": "t", "parameters": {"type": "object", "properties": {
        "m": {"type": "string", "pattern": "[A-Z]"}, "c": {"type": "string", "pattern": "^[a-z\u00e9]+$"}},
        "required": ["m", "c"]}}]
    text = json.dumps(tools)
    g = compile_tools(text, force_call=True)
    head = b'[{"name":"t","arguments":{"m":"'
    cases = [head + b"\xc2", head + b"\xc2\x80", head + b"\xe5\x86", head + b'A","c":"\xc3', head + b'A","c":"\xc3\xa9']
    state = gm.feed_bytes(g, gm.start(g), head)
    before = gm.min_bytes(g, state)
    assert gm.min_bytes(g, gm.feed(g, state, 0xC2)) == before + 1     # the continuation, then still an A-Z
    assert run_driver(driver, tmp_path, text, True, cases) == python_driver(g, cases)


@pytest.mark.parametrize("tools, message", [
    ([{"name": "a", "parameters": {"type": "object", "properties": {"x": {"oneOf": []}}}}],
     'tool "a": property "x": unsupported keyword "oneOf"'),
    ([{"name": "a", "parameters": {"type": "object", "properties": {"x": {"type": ["string", "null"]}}}}],
     'tool "a": property "x": type must be one of'),
    ([{"name": "a", "parameters": {"type": "object", "properties": {"x": {"type": "string", "pattern": "(a|b)"}}}}],
     "groups and alternation are not supported"),
    ([{"name": "a", "parameters": {"type": "object", "properties": {
        "x": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}}}}],
     'tool "a": property "x": uniqueItems is supported for arrays of enum'),
    ([{"name": "a"}, {"name": "a"}], 'tool "a": the name is used by an earlier tool'),
    ([{"name": "a", "parameters": {"type": "object", "properties": {}, "required": ["q"]}}],
     'tool "a": required names "q", which is not in properties'),
    ([{"name": "a", "parameters": {"type": "object", "properties": {"x": {"enum": [{"k": 1}]}}}}],
     "enum and const values must be strings, numbers, booleans or null"),
    ([{"name": "a", "parameters": {"type": "object", "properties": {"x": {"type": "integer", "minimum": 5,
                                                                          "maximum": 4}}}}],
     "no integer satisfies its bounds and multipleOf"),
    ([{"name": "a", "parameters": {"type": "object", "properties": {"x": {"$ref": "#/y"}}}}],
     'unsupported keyword "$ref"'),
    ([{"name": f"t{i}"} for i in range(33)], "33 tools; a tool list holds at most 32"),
    ([{"name": f"t{i}", "parameters": {"type": "object", "properties": {
        f"p{j}": {"type": "integer"} for j in range(32)}}} for i in range(8)],
     'tool "t7": the grammar needs more than 256 nodes (NEEDLE_GRAMMAR_MAX_NODES): use fewer or simpler tools'),
])
def test_unsupported_schemas_fail_with_one_line_naming_tool_and_keyword(driver, tmp_path, tools, message):
    text = json.dumps(tools)
    with pytest.raises(CactError) as exc:
        compile_tools(text)
    assert message in str(exc.value) and "\n" not in str(exc.value)
    assert run_driver(driver, tmp_path, text, False, []) == [f"ERR {exc.value}"]


def test_force_call_needs_a_tool(driver, tmp_path):
    with pytest.raises(CactError, match="--force-call needs at least one tool"):
        compile_tools("[]", force_call=True)
    assert run_driver(driver, tmp_path, "[]", True, []) == ["ERR --force-call needs at least one tool"]


# ---- whole turns on the engine ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    """Host engines of a Needle 2 and a Needle 3 golden archive."""
    root = tmp_path_factory.mktemp("call-engines")
    out = {}
    for name in ("tiny", "n3-tiny"):
        scons("board=host", f"archive={GOLDEN / name / 'archive.cact'}", f"build={root / name}")
        out[name] = root / name / "needle"
    return out


def _reference(name):
    a = reader.read((GOLDEN / name / "archive.cact").read_bytes())
    tok = Tokenizer.from_blob(a.tokenizer_blob())
    return reference(a, "a8"), tok


ENVELOPE_KEYS = ("type", "success", "error", "error_code", "function_calls", "reasoning", "confidence",
                 "confidence_source", "confidence_head", "router", "text", "prompt_tokens", "prefix_tokens", "retrieved",
                 "generated_tokens", "overrides", "override", "min_confidence")


def python_envelope(model, tok, text: str, query: str, max_new: int, force: bool) -> dict:
    g = compile_tools(text, force_call=force)
    env = run_turn(model, tok, g, render_prompt_ids(tok, text, query), max_new)
    env["confidence"] = float(f"{env['confidence']:.9f}")
    env["min_confidence"] = float(f"{env['min_confidence']:.9f}")
    return {k: env[k] for k in ENVELOPE_KEYS}


def check_schema_valid(text: str, calls: list, force: bool) -> None:
    tools = {t["name"]: t.get("parameters", {"type": "object"}) for t in json.loads(text)}
    assert isinstance(calls, list) and (calls or not force)
    for call in calls:
        assert list(call) == ["name", "arguments"] and call["name"] in tools
        jsonschema.Draft202012Validator(tools[call["name"]]).validate(call["arguments"])


def test_long_answers_close_the_call_within_the_envelope(monkeypatch):
    """The byte rule (docs/grammar.md §4): with the envelope shrunk to a few bytes more than
    the shortest call, a roomy budget still ends in a complete, schema-valid call that fits;
    without the rule the same turn writes past it.  Shorter than the shortest call: refused."""
    import generator.tools.decode as dec
    model, tok = _reference("tiny")
    text = DEMO_TOOLS.read_text()
    query = "what's the weather like in Lagos right now?"
    g = compile_tools(text, force_call=True)
    ids = render_prompt_ids(tok, text, query)
    free = run_turn(model, tok, g, ids, 64)
    shortest = g.nodes[g.root].min_bytes
    cap = shortest + 8
    assert len(json.dumps(free["function_calls"], separators=(",", ":")).encode()) > cap
    monkeypatch.setattr(dec, "CALL_MAX_JSON", cap)
    env = run_turn(model, tok, g, ids, 64)
    body = env["text"].split("<tool_call>")[1].split("</tool_call>")[0].encode()
    assert shortest <= len(body) <= cap and env["text"].endswith("</tool_call><|im_end|>")
    check_schema_valid(text, json.loads(body), True)
    monkeypatch.setattr(dec, "CALL_MAX_JSON", shortest - 1)
    with pytest.raises(CactError, match=f"the shortest call takes {shortest} bytes"):
        run_turn(model, tok, g, ids, 64)


@pytest.mark.parametrize("name", ["tiny", "n3-tiny"])
def test_turns_equal_the_python_twin(engines, tmp_path, name):
    """Demo tools and random tool lists, two queries, both modes, budgets from tight to
    roomy: the CLI's envelope is the reference's, and every call is schema-valid."""
    model, tok = _reference(name)
    lists = [DEMO_TOOLS.read_text()] + [random_tools(seed) for seed in (3, 11, 17, 42)]
    checked = 0
    for i, text in enumerate(lists):
        try:
            compile_tools(text, force_call=True)
        except CactError:
            continue
        f = tmp_path / f"tools{i}.json"
        f.write_text(text, encoding="utf-8")
        for query, force, max_new in (("set a timer for ten minutes", True, 120),
                                      ("what's the weather in Lagos?", False, 48),
                                      ("turn the lights on", True, 200)):
            try:
                want = python_envelope(model, tok, text, query, max_new, force)
            except CactError as exc:   # the prompt or the budget is too small for this list
                proc = subprocess.run([str(engines[name]), "--tools", str(f), "--query", query, "--max-new",
                                       str(max_new)] + (["--force-call"] if force else []),
                                      capture_output=True, text=True)
                assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1
                if "a call needs" in str(exc):
                    assert str(exc) in proc.stderr
                continue
            proc = subprocess.run([str(engines[name]), "--tools", str(f), "--query", query, "--max-new",
                                   str(max_new)] + (["--force-call"] if force else []),
                                  capture_output=True, text=True, check=True)
            got = json.loads(proc.stdout)
            assert {k: got[k] for k in ENVELOPE_KEYS} == want, (text, query)
            check_schema_valid(text, got["function_calls"], force)
            assert got["generated_tokens"] <= max_new and got["text"].endswith("<|im_end|>")
            checked += 1
    assert checked >= 6


@pytest.mark.parametrize("name", ["tiny", "n3-tiny"])
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_generated_tool_lists_turn_like_the_twin(engines, name, data):
    """Hypothesis-drawn tool lists (unicode names, every leaf type and keyword, required and
    optional keys, arrays of them) and queries: the C engine's envelope equals the twin's,
    token for token, and every call validates against its schema (jsonschema)."""
    from host_tests.test_grammar import SHORT_NAMES, SMALL_PARAMS
    model, tok = _reference(name)
    tools = data.draw(st.lists(st.fixed_dictionaries({"name": SHORT_NAMES, "parameters": SMALL_PARAMS}),
                               min_size=1, max_size=3, unique_by=lambda t: t["name"]))
    text = json.dumps(tools, ensure_ascii=False)
    query = data.draw(st.sampled_from(["set a timer for ten minutes", "weather in Paris?", "天气", "lights"]))
    force = data.draw(st.booleans())
    max_new = data.draw(st.integers(24, 64))
    args = [str(engines[name]), "--tools", "/dev/stdin", "--query", query, "--max-new", str(max_new)]
    proc = subprocess.run(args + (["--force-call"] if force else []), input=text, capture_output=True, text=True)
    try:
        want = python_envelope(model, tok, text, query, max_new, force)
    except CactError as exc:      # the prompt or the budget is too small for this list: refused alike
        assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
        assert str(exc) in proc.stderr or "does not fit" in str(exc) or "shorter than" in str(exc)
        event("refused")
        return
    event("compared")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert {k: got[k] for k in ENVELOPE_KEYS} == want, (text, query, force, max_new)
    check_schema_valid(text, got["function_calls"], force)


def test_raw_keeps_the_plain_greedy_text(engines):
    """--raw is the unconstrained continuation (what --tools/--query printed before the grammar)."""
    raw = subprocess.run([str(engines["tiny"]), "--tools", str(DEMO_TOOLS), "--query", "hi", "--max-new", "6",
                          "--raw"], capture_output=True, text=True, check=True).stdout
    ids = subprocess.run([str(engines["tiny"]), "--tools", str(DEMO_TOOLS), "--query", "hi", "--max-new", "6",
                          "--ids"], capture_output=True, text=True, check=True).stdout
    model, tok = _reference("tiny")
    want = tok.decode([int(x) for x in ids.strip().split(",")])
    assert raw == want + "\n"


@pytest.mark.parametrize("args, message", [
    (["--prompt", "x", "--raw"], "--raw and --force-call go with --tools and --query"),
    (["--tools", str(DEMO_TOOLS), "--query", "x", "--raw", "--force-call"], "choose one"),
    (["--tools", str(DEMO_TOOLS), "--query", "x", "--ids", "--force-call"], "drop --force-call"),
    (["--tools", str(DEMO_TOOLS), "--query", "x", "--force-call", "--max-new", "10"],
     "a call needs at least"),
])
def test_call_flag_errors(engines, args, message):
    proc = subprocess.run([str(engines["tiny"])] + args, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr


def test_unique_arrays_count_distinct_values_like_the_twin(driver, tmp_path):
    """uniqueItems with values of different lengths: the shortest completion counts distinct
    values (the open item included), in C as in Python (found by host_tests/test_grammar.py)."""
    text = json.dumps([{"name": "t", "parameters": {"type": "object", "required": ["a"], "properties": {
        "a": {"type": "array", "items": {"enum": ["a", "bbbbbb", "cc"]}, "uniqueItems": True, "minItems": 2}}}}])
    g = compile_tools(text, force_call=True)
    cases = walks(g, random.Random(5), 20) + [b'[{"name":"t","arguments":{"a":["a"', b'[{"name":"t","arguments":{"a":["cc","a"]}}]']
    assert run_driver(driver, tmp_path, text, True, cases) == python_driver(g, cases)
    state = gm.feed_bytes(g, gm.start(g), b'[{"name":"t","arguments":{"a":["a"')
    assert gm.min_bytes(g, state) == len(b',"cc"]}}]')
# ---- tools built in: scons tools=FILE ------------------------------------------------------------
@pytest.mark.parametrize("tools", [DEMO_TOOLS, ROOT / "host_tests" / "data" / "tools_pattern.json"],
                         ids=["demo", "pattern"])
def test_built_in_tools_equal_the_tools_file(tmp_path, tools):
    """scons tools=FILE compiles the list in, its grammar's tables generated at build time into
    flash: `needle --query Q` (those tables) is `needle --tools FILE --query Q` (the tables
    compiled at run time into RAM), with and without --force-call; only the RAM differs."""
    scons("board=host", f"archive={GOLDEN / 'tiny' / 'archive.cact'}", f"build={tmp_path / 'b'}",
          f"tools={tools}", "snapshot=0")
    exe = tmp_path / "b" / "needle"
    gen = (tmp_path / "b" / "gen" / "needle_tools.c").read_text()
    assert "static const needle_gnode GRAMMAR_NODES[" in gen and "GRAMMAR_NODES_FORCE" in gen
    assert ("static const needle_gitem GRAMMAR_ITEMS[" in gen) == (tools != DEMO_TOOLS)   # the pattern's
    called = set()
    for query, force in [("set a timer for ten minutes", ["--force-call"]), ("set alarm", ["--force-call"]),
                         ("alarm 06:30 mo tu", ["--force-call"]), ("guest wifi on for two hours", [])]:
        args = ["--query", query, *force, "--max-new", "64"]
        builtin = json.loads(subprocess.run([str(exe)] + args, capture_output=True, text=True, check=True).stdout)
        given = json.loads(subprocess.run([str(exe), "--tools", str(tools)] + args, capture_output=True,
                                          text=True, check=True).stdout)
        assert {k: builtin[k] for k in ENVELOPE_KEYS} == {k: given[k] for k in ENVELOPE_KEYS}, query
        assert builtin["peak_ram_mb"] < given["peak_ram_mb"]     # no grammar store in RAM
        called |= {c["name"] for c in builtin["function_calls"]}
    if tools != DEMO_TOOLS:     # the pattern and the unique enum array were walked from flash
        assert "alarm" in called
    assert compile_tools(tools.read_text()).tools_json.replace('"', '\\"') in gen


def test_bad_built_in_tools_fail_the_build_in_one_line(tmp_path):
    bad = tmp_path / "tools.json"
    bad.write_text(json.dumps([{"name": "lights", "parameters": {"type": "object", "properties": {
        "level": {"type": "integer", "oneOf": []}}}}]))
    proc = subprocess.run([sys.executable, "-m", "SCons", "-Q", "board=host", f"build={tmp_path / 'b'}",
                           f"tools={bad}"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and not (tmp_path / "b").exists()
    assert proc.stderr.count("\n") == 1
    assert 'tools=' in proc.stderr and 'tool "lights": property "level": unsupported keyword "oneOf"' in proc.stderr


def test_query_without_tools_names_the_fix(engines):
    proc = subprocess.run([str(engines["tiny"]), "--query", "x"], capture_output=True, text=True)
    assert proc.returncode == 2 and "scons tools=FILE" in proc.stderr


# ---- multi-turn: --reply RESULTS -------------------------------------------------------------------
@pytest.mark.parametrize("name", ["tiny", "n3-tiny"])
def test_reply_continues_the_session_like_the_twin(engines, name):
    """A second turn after the calls' results keeps the KV cache: the CLI's two envelopes are
    the twin Session's (generator/tools/decode.py), and nothing is fed twice."""
    from generator.tools.decode import Session, reply_ids
    model, tok = _reference(name)
    text = DEMO_TOOLS.read_text()
    results = '[{"temp_c":31,"sky":"<|im_start|>clear"}]'     # a marker in the results stays text
    s = Session(model, tok, compile_tools(text, force_call=True))
    prompt = render_prompt_ids(tok, text, "weather in Lagos?")
    want = [s.turn(prompt, 56), s.reply(results, 56)]
    assert s.pos == len(prompt) + want[0]["generated_tokens"] - 1 + want[1]["prompt_tokens"] + \
        want[1]["generated_tokens"] - 1
    assert reply_ids(tok, results)[0] == tok.piece_id("<|im_end|>")
    assert tok.piece_id("<|im_start|>") not in reply_ids(tok, results)[3:-3]
    proc = subprocess.run([str(engines[name]), "--tools", str(DEMO_TOOLS), "--query", "weather in Lagos?",
                           "--force-call", "--max-new", "56", "--reply", results],
                          capture_output=True, text=True, check=True)
    got = [json.loads(line) for line in proc.stdout.splitlines()]
    for g, w in zip(got, want):
        w = dict(w, confidence=float(f"{w['confidence']:.9f}"))
        assert {k: g[k] for k in ENVELOPE_KEYS} == {k: w[k] for k in ENVELOPE_KEYS}
    assert len(got) == 2


def test_generator_call_prints_the_cli_envelope(engines):
    """`python -m generator call` is the twin on the command line: the same envelope fields."""
    args = ["--tools", str(DEMO_TOOLS), "--query", "set a timer for ten minutes", "--force-call", "--max-new", "64"]
    py = subprocess.run([sys.executable, "-m", "generator", "call", "--archive", str(GOLDEN / "tiny" / "archive.cact"),
                         *args], cwd=ROOT, capture_output=True, text=True, check=True)
    c = subprocess.run([str(engines["tiny"]), *args], capture_output=True, text=True, check=True)
    want, got = json.loads(py.stdout), json.loads(c.stdout)
    assert {k: want[k] for k in ENVELOPE_KEYS} == {k: got[k] for k in ENVELOPE_KEYS}
    bad = subprocess.run([sys.executable, "-m", "generator", "call", "--archive", str(GOLDEN / "tiny" / "archive.cact"),
                          "--tools", str(DEMO_TOOLS), "--query", "x", "--max-new", "3"], cwd=ROOT,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "a call needs at least" in bad.stderr


# ---- system facts: --date ---------------------------------------------------------------------
@pytest.mark.parametrize("system, composed", [
    (None, "date: 2026-07-21 Tue 14:30"),
    ("  locale: en-US \n", "date: 2026-07-21 Tue 14:30; locale: en-US"),
    ("locale: en-US; date: 2025-01-01 Wed 09:00", "locale: en-US; date: 2025-01-01 Wed 09:00"),   # caller's wins
    ("date: 2025-01-01 Wed 09:00", "date: 2025-01-01 Wed 09:00"),
])
def test_date_fact_is_composed_like_the_twin(engines, system, composed):
    """--date puts the date fact first in the system turn (docs/prompt.md, "System facts"):
    the envelope equals the twin's with the composed system text, on Needle 3 (whose wrapper
    prepends the fact)."""
    from generator.tools.prompt import system_facts
    date = "2026-07-21 Tue 14:30"
    assert system_facts(system, date).strip() == composed
    model, tok = _reference("n3-tiny")
    text = DEMO_TOOLS.read_text()
    want = run_turn(model, tok, compile_tools(text, force_call=True),
                    render_prompt_ids(tok, text, "remind me tomorrow", system_facts(system, date)), 64)
    want["confidence"] = float(f"{want['confidence']:.9f}")
    args = ["--tools", str(DEMO_TOOLS), "--query", "remind me tomorrow", "--date", date, "--force-call",
            "--max-new", "64"] + (["--system", system] if system else [])
    got = json.loads(subprocess.run([str(engines["n3-tiny"]), *args], capture_output=True, text=True,
                                    check=True).stdout)
    assert {k: got[k] for k in ENVELOPE_KEYS} == {k: want[k] for k in ENVELOPE_KEYS}


def test_date_now_runs_and_date_goes_with_a_query(engines):
    proc = subprocess.run([str(engines["tiny"]), "--tools", str(DEMO_TOOLS), "--query", "x", "--date", "now",
                           "--raw", "--ids", "--max-new", "1"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    bad = subprocess.run([str(engines["tiny"]), "--prompt", "x", "--date", "now"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr == "needle: error: --date goes with --query (a service request takes \"date\")\n"
