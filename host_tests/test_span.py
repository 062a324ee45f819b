"""Span strings: arguments copied from the query (docs/grammar.md §2a; issue 44, item 3).

* the matcher on hand cases: a span is accepted, text that is not in the query is refused,
  case counts, spans at the start and the end, repeated substrings, no escapes, minLength;
* the C grammar (host_tests/c/grammar_driver.c) against generator/tools/grammar.py on random
  tool lists and random queries, with the ``x-needle-span`` keyword and with the switch that
  makes every free string a span: the same refusals and shortest completions after every byte;
* the bad inputs (the keyword on a non-string or with enum/const/pattern, a query longer than
  the span bound or without the plain run minLength needs): one line, the same in both twins.
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest

from generator.errors import CactError
from generator.tools import grammar as gm
from generator.tools import schema as sc
from generator.tools.schema import compile_tools, set_query
from host_tests.test_tool_call import driver, python_driver, random_tools, walks  # noqa: F401 (driver: the fixture)

ROOT = Path(__file__).resolve().parent.parent




def run_c(driver, tmp_path, text: str, force: bool, query: str | None, span_all: bool, cases: list) -> list:
    (tmp_path / "tools.json").write_text(text, encoding="utf-8")
    args = [str(driver), str(tmp_path / "tools.json"), "1" if force else "0"]
    if query is not None:
        (tmp_path / "query.txt").write_bytes(query.encode("utf-8"))
        args += [str(tmp_path / "query.txt"), "1" if span_all else "0"]
    proc = subprocess.run(args, check=True, capture_output=True,
                          input="".join(c.hex() + "\n" for c in cases).encode())
    return proc.stdout.decode("utf-8").splitlines()


def tool(props: dict, required=None, name="msg") -> list:
    return [{"name": name, "parameters": {"type": "object", "properties": props,
                                          "required": list(props) if required is None else required}}]


SPAN = {"type": "string", "x-needle-span": True}


def grammar(tools, query, span_all=False, force=True):
    g = compile_tools(json.dumps(tools, ensure_ascii=False), force_call=force)
    set_query(g, query, span_all)
    return g


def accepts(g, text: str) -> bool:
    return gm.feed_bytes(g, gm.start(g), text.encode("utf-8")) is not None


def value(name: str, v: str, close: bool = True) -> str:
    return f'[{{"name":"msg","arguments":{{"{name}":"{v}' + ('"}}]' if close else "")


# ---- the matcher on hand cases ---------------------------------------------------------------------
def test_a_span_of_the_query_is_accepted_and_other_text_refused():
    g = grammar(tool({"to": SPAN}), "tell Anna and Annabel hi")
    for ok in ("Anna", "Annabel", "tell", "tell Anna and Annabel hi", "Anna and", "hi", " ", ""):
        assert accepts(g, value("to", ok)), ok
    for bad in ("anna", "Bob", "Anna Annabel", "hi!", "ANNA", "nna", "l A"):  # case counts; no gaps; words whole
        assert not accepts(g, value("to", bad, close=False)), bad
    for cut in ("Ann", "Annab", "tel"):                             # a span does not end inside a word
        assert accepts(g, value("to", cut, close=False)) and not accepts(g, value("to", cut)), cut
    # a repeated substring: "Anna" is at 5 and 14; the state keeps the first, both continue
    st = gm.feed_bytes(g, gm.start(g), value("to", "Anna", close=False).encode())
    assert st[-1][9] == 5 | 4 << 32
    assert gm.allowed_text(g, st) == '<0x20>"b'


def test_no_escapes_and_whole_characters():
    g = grammar(tool({"to": SPAN}), 'say "hi" to Zoë\\now')
    assert accepts(g, value("to", "hi")) and accepts(g, value("to", "Zoë"))
    assert not accepts(g, value("to", 'say \\"', close=False))      # a quote cannot be copied
    assert not accepts(g, value("to", "Zoë\\\\", close=False))      # nor a backslash
    st = gm.feed_bytes(g, gm.start(g), value("to", "Zo", close=False).encode() + b"\xc3")
    assert gm.feed(g, st, 0x22) is None                             # mid-character: no quote
    assert gm.min_bytes(g, st) == 1 + 1 + 3                          # the continuation, ", }}]


def test_min_length_counts_characters_of_the_query():
    g = grammar(tool({"to": dict(SPAN, minLength=3)}), "ab cdé")
    assert not accepts(g, value("to", "ab"))
    assert accepts(g, value("to", "ab ")) and accepts(g, value("to", "cdé"))
    st = gm.feed_bytes(g, gm.start(g), value("to", "c", close=False).encode())
    assert gm.min_bytes(g, st) == 3 + 1 + 3                          # "dé" is 3 bytes, then ", }}]


def test_the_switch_spans_free_strings_only():
    tools = tool({"to": {"type": "string"}, "mode": {"type": "string", "enum": ["a", "b"]},
                  "code": {"type": "string", "pattern": "^[0-9]+$"}})
    g = grammar(tools, "text Felix", span_all=True)
    assert accepts(g, '[{"name":"msg","arguments":{"to":"Felix","mode":"a","code":"12"}}]')
    assert not accepts(g, '[{"name":"msg","arguments":{"to":"Bob')
    g = grammar(tools, "text Felix", span_all=False)
    assert accepts(g, '[{"name":"msg","arguments":{"to":"Bob","mode":"a","code":"12"}}]')
    g = grammar(tools, None, span_all=True)                          # no query: plain strings
    assert accepts(g, '[{"name":"msg","arguments":{"to":"Bob","mode":"a","code":"12"}}]')


# ---- C against Python ------------------------------------------------------------------------------
QUERY_WORDS = ["Anna", "anna", "Annabel", "set", "the", "timer", "to", "10", "Zoë", "开关", "café", '"quoted"',
               "back\\slash", "tab\there", "Lagos", "la", "a", "aa", "aaa", "é", "x-y", "🙂"]


def random_query(r: random.Random) -> str:
    return " ".join(r.choice(QUERY_WORDS) for _ in range(r.randint(1, 9)))


def with_span_keywords(text: str, r: random.Random) -> str:
    """The list with "x-needle-span": true on some of its free strings."""
    def visit(s):
        if isinstance(s, dict):
            if s.get("type") == "string" and not ({"enum", "const", "pattern"} & set(s)) \
                    and s.get("maxLength", 1) != 0 and r.random() < 0.6:
                s["x-needle-span"] = True
            for v in s.values():
                visit(v)
        elif isinstance(s, list):
            for v in s:
                visit(v)
    tools = json.loads(text)
    visit(tools)
    return json.dumps(tools, ensure_ascii=False)


def span_walks(g, q: bytes, r: random.Random, count: int) -> list:
    """Byte walks through the grammar, trying every byte (so a dead end would show)."""
    return walks(g, r, count, cands=range(256), complete=True)


@pytest.mark.parametrize("block", range(4))
def test_span_grammar_equals_the_python_twin(driver, tmp_path, block):
    """25 random tool lists and queries per block, half with the keyword, half with the switch:
    the same compile result, the same refused queries, and on 6 walks each the same refusals
    and shortest completions after every byte."""
    walked = 0
    for seed in range(1000 + block * 25, 1000 + block * 25 + 25):
        r = random.Random(seed)
        span_all = seed % 2 == 0
        text = random_tools(seed)
        if not span_all:
            text = with_span_keywords(text, r)
        force = seed % 3 == 0
        query = random_query(r)
        try:
            g = compile_tools(text, force_call=force)
        except CactError as exc:
            assert run_c(driver, tmp_path, text, force, query, span_all, []) == [f"ERR {exc}"], text
            continue
        try:
            set_query(g, query, span_all)
        except CactError as exc:
            assert run_c(driver, tmp_path, text, force, query, span_all, []) == [f"QERR {exc}"], text
            continue
        walked += 1
        cases = span_walks(g, query.encode(), r, 6)
        assert run_c(driver, tmp_path, text, force, query, span_all, cases) == python_driver(g, cases), \
            (seed, text, query)
    assert walked >= 8


def test_hand_cases_equal_the_c_twin(driver, tmp_path):
    tools = tool({"to": dict(SPAN, minLength=2), "n": {"type": "integer"}}, required=["to"])
    text = json.dumps(tools)
    query = "ask Anna, then Annabel: é 开关"
    g = grammar(tools, query)
    head = b'[{"name":"msg","arguments":{"to":"'
    cases = [head + w.encode() for w in ("Anna", "Annabel", "anna", "é ", "开关", "关", ": é 开关")]
    cases += [head + b'Anna"}]', head + b'Anna","n":3}]', head + b"\xe5\xbc", head + b"A\\"]
    assert run_c(driver, tmp_path, text, True, query, False, cases) == python_driver(g, cases)


# ---- bad input ----------------------------------------------------------------------------------
@pytest.mark.parametrize("prop, message", [
    ({"type": "integer", "x-needle-span": True},
     'property "to": "x-needle-span" needs type string (it copies a span of the query into a string)'),
    ({"enum": ["a"], "x-needle-span": True}, '"x-needle-span" needs type string'),
    ({"type": "string", "enum": ["a"], "x-needle-span": True},
     '"x-needle-span" cannot be combined with "enum" (a span is any text of the query): drop one of them'),
    ({"type": "string", "const": "a", "x-needle-span": True}, 'cannot be combined with "const"'),
    ({"type": "string", "pattern": "^a$", "x-needle-span": True}, 'cannot be combined with "pattern"'),
    ({"type": "string", "maxLength": 0, "x-needle-span": True}, '"x-needle-span" needs maxLength of at least 1'),
    ({"type": "string", "x-needle-span": 1}, '"x-needle-span" must be true or false'),
    ({"type": "string", "x-needle-spam": True}, 'unsupported keyword "x-needle-spam"'),
])
def test_bad_keyword_is_refused_in_one_line_by_both_twins(driver, tmp_path, prop, message):
    text = json.dumps(tool({"to": prop}))
    with pytest.raises(CactError) as exc:
        compile_tools(text)
    assert message in str(exc.value) and "\n" not in str(exc.value)
    assert run_c(driver, tmp_path, text, False, None, False, []) == [f"ERR {exc.value}"]


def test_span_false_and_minlength_maxlength_combine(driver, tmp_path):
    text = json.dumps(tool({"a": {"type": "integer", "x-needle-span": False},
                            "b": {"type": "string", "minLength": 1, "maxLength": 4, "x-needle-span": True}}))
    g = compile_tools(text)
    set_query(g, "say hi, hello")
    assert accepts(g, '[{"name":"msg","arguments":{"a":1,"b":"hi, "}}]')
    assert not accepts(g, '[{"name":"msg","arguments":{"a":1,"b":"hell')     # hello is 5 characters
    assert not accepts(g, '[{"name":"msg","arguments":{"a":1,"b":""}}]')     # minLength 1
    assert run_c(driver, tmp_path, text, False, "say hi, hello", False, [])[0].startswith("OK ")


@pytest.mark.parametrize("query, span_all, message", [
    ("x" * (sc.SPAN_MAX + 1), False,
     f"the query is {sc.SPAN_MAX + 1} bytes, more than the {sc.SPAN_MAX} span strings copy from "
     "(NEEDLE_GRAMMAR_SPAN_MAX): shorten it, or raise grammar.span_bytes in the board file"),
    ("é é é", False, "the query holds no span of exactly 2 plain ASCII characters between words, which a span "
                     "string's minLength 2 needs: lower minLength, or turn the span off"),
    ("abc def", False, "the query holds no span of exactly 2 plain ASCII characters between words, which a span "
                      "string's minLength 2 needs: lower minLength, or turn the span off"),
])
def test_bad_query_is_refused_in_one_line_by_both_twins(driver, tmp_path, query, span_all, message):
    text = json.dumps(tool({"to": dict(SPAN, minLength=2)}))
    g = compile_tools(text)
    with pytest.raises(CactError) as exc:
        set_query(g, query, span_all)
    assert str(exc.value) == message and g.query is None
    assert run_c(driver, tmp_path, text, False, query, span_all, []) == [f"QERR {message}"]


def test_a_long_query_without_span_strings_is_not_refused(driver, tmp_path):
    text = json.dumps(tool({"n": {"type": "integer"}}))
    g = compile_tools(text)
    set_query(g, "x" * (sc.SPAN_MAX + 5), True)
    assert g.query is None
    assert run_c(driver, tmp_path, text, False, "x" * (sc.SPAN_MAX + 5), True, [])[0].startswith("OK ")


def test_a_refusal_names_the_span():
    tools = tool({"to": SPAN, "text": {"type": "string"}})
    g = grammar(tools, "hi Anna")
    assert gm.describe(g.nodes[3], g) == "a string copied from the query"
    assert gm.describe(g.nodes[4], g) == "a string"
    set_query(g, "hi Anna", True)
    assert gm.describe(g.nodes[4], g) == "a string copied from the query"
    assert gm.describe(g.nodes[4]) == "a string"
