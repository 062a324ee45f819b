"""The envelope's confidence with the calibrated head (issue 10 item 4; docs/grammar.md §5).

An engine built with head_tokens=N keeps the probe heads' cells of the first N tokens; when
a turn's whole conversation fits there, `confidence` is the minimum of the confidence head
(its logit through the logistic function: the [FLAG] choice) and the decoding probability,
and `confidence_source` says "head+decoding".  Otherwise the decoding part alone, and the
envelope says "decoding".  Every value equals the Python twin's (generator/tools/decode.py
Session.confidence_head) to the 9 printed decimals, on both generations; Needle 3's router
head is reported raw."""

from __future__ import annotations

import json

import pytest

from generator.tools.decode import Session
from generator.tools.prompt import render_prompt_ids
from generator.tools.schema import compile_tools
from host_tests.goldens import host_engines, reference
from host_tests.scons_run import ROOT
from test_cli_robustness import needle_heads  # noqa: F401  (tiny, head_tokens=4)

DEMO_TOOLS = ROOT / "demo" / "tools.json"
MAX_SEQ = 256          # of both golden archives: every token of a session keeps its cells
KEYS = ("type", "function_calls", "confidence", "confidence_source", "confidence_head", "router", "text",
        "prompt_tokens", "generated_tokens")


def _printed(env: dict) -> dict:
    """The twin's envelope as the C engine prints it: probabilities with 9 decimals."""
    out = {k: env[k] for k in KEYS}
    for k in ("confidence", "confidence_head"):
        if out[k] is not None:
            out[k] = float(f"{out[k]:.9f}")
    if out["router"] is not None:     # raw outputs: 9 decimals, null beyond +-1e9
        out["router"] = [float(f"{v:.9f}") if abs(v) < 1e9 else None for v in out["router"]]
    return out


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    return host_engines(tmp_path_factory.mktemp("confidence"), f"head_tokens={MAX_SEQ}")


@pytest.mark.parametrize("name", ["tiny", "n3-tiny"])
def test_the_head_joins_the_confidence_like_the_twin(engines, name, board_runner):
    model, tok = reference(name)
    text = DEMO_TOOLS.read_text()
    results = '[{"minutes":10,"ok":true}]'
    proc = board_runner("host", engines / name / "needle").run(
        ["--tools", DEMO_TOOLS, "--query", "set a timer for ten minutes", "--force-call", "--max-new", "56",
         "--reply", results], check=True)
    got = [json.loads(line) for line in proc.stdout.splitlines()]
    s = Session(model, tok, compile_tools(text, force_call=True), head_tokens=MAX_SEQ)
    want = [s.turn(render_prompt_ids(tok, text, "set a timer for ten minutes"), 56), s.reply(results, 56)]
    for g, w in zip(got, want):
        assert {k: g[k] for k in KEYS} == _printed(w)
        assert g["confidence_source"] == "head+decoding" and 0.0 <= g["confidence_head"] <= 1.0
        assert g["confidence"] <= g["confidence_head"]
        assert (g["router"] is not None and len(g["router"]) == 3) == (name == "n3-tiny")   # Needle 3's head
    assert len(got) == 2


def test_without_the_cells_the_envelope_says_decoding(needle_heads):  # noqa: F811
    """head_tokens=4: the prompt alone is longer, so the head cannot score the turn."""
    model, tok = reference("tiny")
    text = DEMO_TOOLS.read_text()
    proc = needle_heads.run(["--tools", DEMO_TOOLS, "--query", "lights on", "--force-call", "--max-new", "64"],
                            check=True)
    got = json.loads(proc.stdout)
    want = Session(model, tok, compile_tools(text, force_call=True), head_tokens=4).turn(
        render_prompt_ids(tok, text, "lights on"), 64)
    assert {k: got[k] for k in KEYS} == _printed(want)
    assert got["confidence_source"] == "decoding" and got["confidence_head"] is None and got["router"] is None
