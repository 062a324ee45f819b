"""The bundled demo archive (issue 15 item 3): the committed trained Needle 2 is the one its
manifest describes, and it makes the right call for the demo query.

demo/needle2-demo.json is the manifest: the recipe it was trained with (byte-equal to the
committed recipe), its size and SHA-256, and the accuracy measured when it was made.  CI does
not retrain; these tests pin what was committed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from generator.archive import reader
from generator.commands import evaluate
from generator.commands.synth import _n2
from generator.tools.schema import compile_tools

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "demo"
ARCHIVE = DEMO / "needle2-demo.cact"
MANIFEST = json.loads((DEMO / "needle2-demo.json").read_text())
DEMO_QUERY = "what's the weather like in Lagos right now?"


def test_archive_is_the_one_the_manifest_names():
    data = ARCHIVE.read_bytes()
    assert len(data) == MANIFEST["bytes"]
    assert hashlib.sha256(data).hexdigest() == MANIFEST["sha256"]


def test_manifest_recipe_is_the_committed_recipe():
    recipe = json.loads((ROOT / MANIFEST["recipe_path"]).read_text())
    assert recipe == MANIFEST["recipe"]


def test_header_is_the_recipes_geometry():
    g = MANIFEST["recipe"]["geometry"]
    want = _n2(g["vocab"], g["d_model"], g["num_heads"], g["num_kv_heads"], g["head_dim"], g["num_layers"],
               g["max_seq_len"], g["mhc_lanes"], g["engram_slots"], g["engram_sub_dim"],
               g["num_engram_tables"], tuple(g["engram_orders"]), tuple(g["engram_sites"]), g["kv_window"])
    h = reader.read(ARCHIVE.read_bytes()).header
    assert {k: h[k] for k in want} == pytest.approx(want)


@pytest.mark.parametrize("grammar", [True, False], ids=["grammar", "raw"])
def test_demo_query_gets_the_right_call(grammar):
    """What `./setup` prints on the Pi Zero (the engine is bit-identical to the a8 reference):
    get_weather with city Lagos, with and without constrained decoding."""
    tools = json.loads((DEMO / "tools.json").read_text())
    ex = evaluate.Example(tools=tools, tools_text=json.dumps(tools, separators=(",", ":")), query=DEMO_QUERY,
                          calls=[{"name": "get_weather", "arguments": {"city": "Lagos"}}],
                          grammar=compile_tools(json.dumps(tools)), line=1)
    ref = evaluate.Reference(reader.read(ARCHIVE.read_bytes()), "a8")
    text = ref.answer(ex, grammar, 64)
    assert evaluate.parse_calls(text) == ex.calls, text
