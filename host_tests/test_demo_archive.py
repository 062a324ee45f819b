"""The bundled demo archives (issue 15 item 3): each committed trained model (Needle 2, the
default archive of every build, and Needle 3) is the one its manifest describes, and it makes
the right call for the demo query.

demo/<name>.json is the manifest: the recipe it was trained with (byte-equal to the committed
recipe), its size and SHA-256, and the training time and curve.  CI does not retrain; these
tests pin what was committed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from generator.archive import reader
from generator.archive.format import TAGS
from generator.commands import evaluate
from generator.commands.synth import _n2, _n3
from generator.model.geometry import stored_kv_window
from generator.tools.schema import compile_tools

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "demo"
DEMO_QUERY = "what's the weather like in Lagos right now?"
NAMES = ["needle2-demo", "needle3-demo"]


def _manifest(name: str) -> dict:
    return json.loads((DEMO / f"{name}.json").read_text())


def _archive(name: str) -> bytes:
    return (DEMO / f"{name}.cact").read_bytes()


@pytest.mark.parametrize("name", NAMES)
def test_archive_is_the_one_the_manifest_names(name):
    data, manifest = _archive(name), _manifest(name)
    assert manifest["archive"] == f"{name}.cact"
    assert len(data) == manifest["bytes"]
    assert hashlib.sha256(data).hexdigest() == manifest["sha256"]


@pytest.mark.parametrize("name", NAMES)
def test_manifest_recipe_is_the_committed_recipe(name):
    manifest = _manifest(name)
    assert manifest["recipe_path"] == f"train/recipes/{name}.json"
    assert json.loads((ROOT / manifest["recipe_path"]).read_text()) == manifest["recipe"]


@pytest.mark.parametrize("name", NAMES)
def test_header_is_the_recipes_geometry(name):
    recipe = _manifest(name)["recipe"]
    g = recipe["geometry"]
    if recipe["generation"] == 2:
        want = _n2(g["vocab"], g["d_model"], g["num_heads"], g["num_kv_heads"], g["head_dim"],
                   g["num_layers"], g["max_seq_len"], g["mhc_lanes"], g["engram_slots"],
                   g["engram_sub_dim"], g["num_engram_tables"], tuple(g["engram_orders"]),
                   tuple(g["engram_sites"]), g["kv_window"])
        # the trainer stores the window the engine sizes to, never 0 (train/train.py header)
        want["kv_window"] = stored_kv_window(want, g["kv_window"])
    else:
        want = _n3(g["vocab"], g["out_vocab"], g["d_model"], g["num_heads"], g["num_kv_heads"],
                   g["qk_head_dim"], g["v_head_dim"], g["num_layers"], g["max_seq_len"],
                   g["mhc_lanes"], g["sliding_window"], tuple(g["global_layers"]),
                   g["qkv_conv_taps"], g["engram_slots"], g["engram_sub_dim"],
                   g["num_engram_tables"], tuple(g["engram_orders"]), tuple(g["engram_sites"]),
                   g["kv_window"], seed_heads=g["engram_seed_heads"])
    h = reader.read(_archive(name)).header
    assert TAGS[h["tag"]] == recipe["generation"]
    assert {k: h[k] for k in want} == pytest.approx(want)


@pytest.mark.parametrize("grammar", [True, False], ids=["grammar", "raw"])
@pytest.mark.parametrize("name", NAMES)
def test_demo_query_gets_the_right_call(name, grammar):
    """What `./setup` prints on the Pi Zero for the default archive (the engine is
    bit-identical to the a8 reference): get_weather with city Lagos, with and without
    constrained decoding; the Needle 3 demo answers the same."""
    tools = json.loads((DEMO / "tools.json").read_text())
    ex = evaluate.Example(tools=tools, tools_text=json.dumps(tools, separators=(",", ":")), query=DEMO_QUERY,
                          calls=[{"name": "get_weather", "arguments": {"city": "Lagos"}}],
                          grammar=compile_tools(json.dumps(tools)), line=1)
    ref = evaluate.Reference(reader.read(_archive(name)), "a8")
    text = ref.answer(ex, grammar, 64)
    assert evaluate.parse_calls(text) == ex.calls, text
