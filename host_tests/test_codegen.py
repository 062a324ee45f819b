"""The code-generation plan: typed, frozen, strict, and the one source of shared constants."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from generator.archive import reader
from generator.archive.format import CQ_GROUP, KV_CQ_GROUP, KV_INT8_GROUP_N2
from generator.codegen import families, pipeline, plan as planner, render, tokenizer_plan
from generator.errors import CactError
from generator.model import geometry, numerics

HERE = Path(__file__).resolve().parent
KV4 = HERE / "golden" / "tiny-wrap-kv4" / "archive.cact"


@pytest.fixture(scope="module")
def tiny(tiny_bytes):
    return reader.read(tiny_bytes)


@pytest.fixture(scope="module")
def engine(tiny):
    return planner.plan(tiny, planner.Options(head_tokens=4), incbin_path="x.cact")


def _define(text: str, name: str) -> int:
    m = re.search(rf"^#define {name}\s+(0x[0-9A-Fa-f]+|\d+)(?:u|ull)?\b", text, re.M)
    assert m, f"{name} not defined"
    return int(m.group(1), 0)


# ---- strict rendering --------------------------------------------------------------------

def test_misspelt_attribute_names_template_line_and_attribute(engine, tmp_path, monkeypatch):
    (tmp_path / "typo.c.j2").write_text("/* ok */\n#define D {{ plan.model.d_model }}u\n"
                                        "#define X {{ plan.d_modle }}u\n")
    monkeypatch.setattr(render, "TEMPLATES_DIR", tmp_path)
    with pytest.raises(CactError) as exc:
        render.render("typo.c.j2", engine)
    assert str(exc.value) == "template typo.c.j2 line 3: 'EnginePlan object' has no attribute 'd_modle'"


def test_wrong_plan_for_a_real_template_is_one_clear_line(tiny):
    tok = tokenizer_plan.plan(tiny)
    with pytest.raises(CactError, match=r"^template needle_model\.h\.j2 line \d+: 'TokenizerPlan object' "
                                        r"has no attribute '\w+'$"):
        render.render("needle_model.h.j2", tok)


def test_render_still_takes_a_dict_context():
    with pytest.raises(CactError, match=r"^template link\.ld\.j2 line \d+: 'generator_version' is undefined$"):
        render.render("link.ld.j2", {})


# ---- frozen ------------------------------------------------------------------------------

def test_plans_are_frozen(engine, tiny):
    with pytest.raises(dataclasses.FrozenInstanceError):
        engine.model.d_model = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        engine.model = None
    with pytest.raises(dataclasses.FrozenInstanceError):
        engine.model.layers[0].q_proj.offset = 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        engine.model.kv.window = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        tokenizer_plan.plan(tiny).max_text = 1
    assert isinstance(engine.model.layers, tuple) and isinstance(engine.model.codebooks[0].int8, tuple)


def test_plan_reads_as_attributes(engine, tiny):
    """The plan is four sub-plans, each a typed record: the model, the target, the placement
    and the provenance."""
    assert {f.name for f in dataclasses.fields(engine)} == {"provenance", "target", "placement", "model", "warnings"}
    assert engine.target.family is families.get(engine.target.family.name) and engine.target.threads >= 1
    assert engine.placement.archive_tag == tiny.header["tag"]
    h = tiny.header
    assert (engine.model.d_model, engine.model.vocab, engine.model.num_layers) == (h["d_model"], h["vocab"], h["num_layers"])
    ly = engine.model.layers[0]
    assert ly.q_proj.offset == tiny.record("layer00.q_proj").offset
    assert ly.q_proj.c_name == "layer00_q_proj" and ly.q_proj.short_name == "q_proj"
    assert [m.short_name for m in ly.matrices] == list(planner.LAYER_MATRICES)
    assert engine.model.kv == geometry.kv_layout(h, engine.model.kv.window)
    assert [hd.name for hd in engine.model.head_plans] == [hd.name for hd in tiny.heads]


# ---- one definition per constant -----------------------------------------------------------

def test_generated_constants_equal_the_python_ones(tiny_path, tmp_path):
    out = tmp_path / "gen"
    plan = pipeline.generate(str(tiny_path), str(out), planner.Options(), incbin_path="x.cact")
    model_c = (out / "needle_model.c").read_text()
    model_h = (out / "needle_model.h").read_text()
    kernels_h = (out / "needle_kernels.h").read_text()
    assert _define(kernels_h, "NK_GROUP") == CQ_GROUP
    assert _define(model_c, "ENGRAM_HASH_SEED") == numerics.ENGRAM_HASH_SEED
    assert _define(model_c, "ENGRAM_HASH_PRIME") == numerics.ENGRAM_HASH_PRIME
    assert _define(model_c, "FNV64_OFFSET") == planner.FNV64_OFFSET
    assert _define(model_c, "FNV64_PRIME") == planner.FNV64_PRIME
    assert "0x9E3779B9" not in model_c.replace("#define ENGRAM_HASH_SEED  0x9E3779B9u", "")
    assert _define(model_h, "NEEDLE_KV_BYTES") == plan.model.kv.cache_bytes
    assert _define(model_c, "K_INT8_GROUP") == KV_INT8_GROUP_N2      # tiny: Needle 2, int8 KV
    a = reader.read(tiny_path)
    assert _define(model_h, "NEEDLE_MACS_PER_TOKEN") == geometry.macs_per_token(a)
    assert _define(model_h, "NEEDLE_STREAMED_BYTES") == geometry.streamed_bytes_per_token(a)
    assert _define(model_h, "NEEDLE_BOOT_HASH") == planner.fnv1a64(a.data[:a.directory_end])


def test_cq_kv_group_comes_from_the_format(tmp_path):
    if not KV4.exists():
        pytest.skip("golden tiny-wrap-kv4 archive missing")
    out = tmp_path / "gen"
    pipeline.generate(str(KV4), str(out), planner.Options(), incbin_path="x.cact")
    kernels_c = (out / "needle_kernels.c").read_text()
    assert _define(kernels_c, "NK_KV_GROUP") == KV_CQ_GROUP
    assert "0.125f" not in kernels_c


def test_geometry_per_token_costs_match_the_engine_plan(engine, tiny):
    assert engine.model.macs_per_token == geometry.macs_per_token(tiny)
    assert engine.model.streamed_bytes == geometry.streamed_bytes_per_token(tiny)
    assert engine.model.out_vocab == geometry.output_rows(tiny.header)


def test_codegen_does_not_import_the_build_layer():
    src = Path(pipeline.__file__).parent
    for f in src.glob("*.py"):
        assert "generator.build" not in f.read_text(), f.name


def test_outputs_follow_the_board_os():
    board = {"os": "none", "archive": {"placement": "partition"}}
    assert "link.ld" in pipeline.outputs(board) and "needle_archive.S" not in pipeline.outputs(board)
    linked = [n for n in pipeline.ENGINE_FILES if n != "needle_archive_file.c"]
    assert pipeline.outputs({"os": "linux"}) == linked
    # placement file: the archive file's mapping and check, and the absolute needle_cact symbol
    assert pipeline.outputs({"os": "linux", "archive": {"placement": "file"}}) == linked + ["needle_archive_file.c"]
