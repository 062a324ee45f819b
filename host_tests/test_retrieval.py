"""Tool retrieval (issue 10 item 5; docs/grammar.md, "Retrieval"): with 12 tools, an engine
with the embedding head renders the five the head picks for the query.  The five chosen, the
call and the whole envelope equal the Python twin's (generator/tools/retrieval.py), and the
embeddings behind them are bit-identical (the probe-head goldens check the head itself; here
a different pick would change `retrieved`).  Without the head every tool is rendered."""

from __future__ import annotations

import json
import subprocess

import jsonschema
import pytest

from generator.archive import reader
from generator.archive.tokenizer import Tokenizer
from generator.model.needle2 import Needle2
from generator.model.needle3 import Needle3
from generator.tools.decode import Session
from generator.tools.prompt import render_prompt_ids
from generator.tools.retrieval import retrieve, split_elements
from generator.tools.schema import compile_tools
from host_tests.scons_run import ROOT, scons

GOLDEN = ROOT / "host_tests" / "golden"
TOOLS12 = ROOT / "host_tests" / "data" / "tools12.json"
HEAD_TOKENS = 512        # the small archives' max_seq: every tool, the query and a turn keep their cells
KEYS = ("type", "function_calls", "confidence", "confidence_source", "text", "prompt_tokens", "generated_tokens",
        "retrieved")
QUERIES = ["turn on the kitchen lights", "what's the weather in Lagos", "reboot the router please"]


def _reference(name):
    a = reader.read((GOLDEN / name / "archive.cact").read_bytes())
    tok = Tokenizer.from_blob(a.tokenizer_blob())
    return (Needle3 if a.generation == 3 else Needle2)(a, "a8"), tok


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    root = tmp_path_factory.mktemp("retrieval")
    for name in ("small", "n3-small"):
        scons("board=host", f"archive={GOLDEN / name / 'archive.cact'}", f"build={root / name}",
              f"head_tokens={HEAD_TOKENS}")
    return root


@pytest.mark.parametrize("name", ["small", "n3-small"])
def test_the_five_chosen_and_the_call_equal_the_twin(engines, name):
    model, tok = _reference(name)
    text = TOOLS12.read_text()
    picks = set()
    for query in QUERIES:
        subset, chosen = retrieve(model, tok, text, query, HEAD_TOKENS)
        assert len(chosen) == 5 and chosen == sorted(chosen)
        s = Session(model, tok, compile_tools(subset, force_call=True), head_tokens=HEAD_TOKENS)
        s.retrieved = chosen
        want = s.turn(render_prompt_ids(tok, subset, query), 64)
        want["confidence"] = float(f"{want['confidence']:.9f}")
        proc = subprocess.run([str(engines / name / "needle"), "--tools", str(TOOLS12), "--query", query,
                               "--force-call", "--max-new", "64"], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        got = json.loads(proc.stdout)
        assert {k: got[k] for k in KEYS} == {k: want[k] for k in KEYS}, query
        tools = {t["name"]: t["parameters"] for t in json.loads(text)}
        for call in got["function_calls"]:      # only a rendered tool can be called
            assert call["name"] in {json.loads(text)[i]["name"] for i in chosen}
            jsonschema.Draft202012Validator(tools[call["name"]]).validate(call["arguments"])
        picks.add(tuple(chosen))
    assert len(picks) > 1      # the pick depends on the query


def test_without_the_head_every_tool_is_rendered(engines, tmp_path):
    """An engine built without head_tokens cannot embed: the twin and the CLI render all 12."""
    model, tok = _reference("small")
    text = TOOLS12.read_text()
    assert retrieve(model, tok, text, QUERIES[0], 0) == (text, None)
    assert len(split_elements(compile_tools(text).tools_json)) == 12
    scons("board=host", f"archive={GOLDEN / 'small' / 'archive.cact'}", f"build={tmp_path / 'b'}")
    proc = subprocess.run([str(tmp_path / "b" / "needle"), "--tools", str(TOOLS12), "--query", QUERIES[0],
                           "--force-call", "--max-new", "64"], capture_output=True, text=True)
    # all twelve rendered: the prompt leaves no room for a call (what retrieval is for)
    left = HEAD_TOKENS - len(render_prompt_ids(tok, text, QUERIES[0]))
    assert proc.returncode == 2 and f"but only {left} are left" in proc.stderr


def test_a_short_head_budget_is_refused_in_one_line(tmp_path):
    scons("board=host", f"archive={GOLDEN / 'small' / 'archive.cact'}", f"build={tmp_path / 'b'}", "head_tokens=8")
    proc = subprocess.run([str(tmp_path / "b" / "needle"), "--tools", str(TOOLS12), "--query", "lights on",
                           "--force-call", "--max-new", "64"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1
    assert "is longer than the embedding head's 8 tokens (rebuild with a larger head_tokens=N)" in proc.stderr
