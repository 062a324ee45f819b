"""The kernel families' contract (generator/codegen/families.py): every family rendered on a
board of its instruction set defines the functions its descriptor says it does, the engine
takes the generic fallback of every optional one it does not, and nothing outside the
contract leaks out of a family's template.  Rendering only: the kernel drivers
(test_kernels*.py) and the goldens (test_boards.py) compile and run the families."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from generator.build import boards
from generator.codegen import families, render
from generator.errors import CactError
from generator.paths import KERNELS_DIR

HERE = Path(__file__).resolve().parent
KV4 = HERE / "golden" / "tiny-wrap-kv4" / "archive.cact"    # a CQ-coded cache: key_columns applies

CONTRACT = {s.name for s in families.REQUIRED + families.OPTIONAL}

# a function definition: "[NK_UNUSED] [static] [inline] TYPE name(PARAMS)" then its body's brace
DEFINITION = re.compile(r"^(?P<static>(?:NK_UNUSED\s+)?static\s+)?(?:inline\s+)?[A-Za-z_][\w \*]*?"
                        r"\b(?P<name>nk_\w+)\s*\([^;{]*\)\s*\{", re.M)


def definitions(c_text: str) -> list[tuple[str, bool]]:
    """(name, is static) of every nk_ function the C text defines, in order."""
    return [(m["name"], bool(m["static"])) for m in DEFINITION.finditer(c_text)]


def board_for(family: str) -> str:
    """A board whose default family it is, else the first board that can build it."""
    names = boards.names()
    own = [n for n in names if boards.load(n)["kernels"] == family]
    own.sort(key=lambda n: boards.load(n)["os"] != "linux")   # Linux boards first: their prefill passes are long
    return (own or [n for n in names if family in boards.board_families(boards.load(n))])[0]


@pytest.fixture(scope="module", params=families.names())
def rendered(request, tmp_path_factory):
    """A family's engine sources, and its template rendered on its own, on a board of its own."""
    fam = families.FAMILIES[request.param]
    out = tmp_path_factory.mktemp(fam.name)
    plan = boards.generate_engine(boards.load(board_for(fam.name)), str(KV4), str(out), incbin_path="x.cact",
                                  kernels=fam.name)
    own = render.render(fam.template, {"plan": plan, "codebooks": plan.model.codebooks, "shapes": plan.model.a8_shapes})
    return fam, plan, own, (out / "needle_kernels.c").read_text(), (out / "needle_kernels.h").read_text()


def test_the_definitions_regex_finds_what_it_should():
    text = ("NK_UNUSED static void nk_a(float *y,\n        const int8_t *q)\n{\n}\n"
            "static inline int32_t nk_b(void) { return 0; }\n"
            "void nk_c(const nk_cq *w, uint32_t n)\n{\n}\nvoid nk_d(void);\n")
    assert definitions(text) == [("nk_a", True), ("nk_b", True), ("nk_c", False)]


def test_family_defines_what_its_descriptor_says(rendered):
    fam, plan, own, _, _ = rendered
    assert plan.target.family is fam and plan.key_columns == fam.key_columns
    defined = {name for name, _ in definitions(own)}
    assert defined & CONTRACT == fam.defines, fam.name


def test_family_template_exports_only_the_contract(rendered):
    """A family's other functions are static: the engine links to the contract alone."""
    fam, _, own, _, _ = rendered
    external = {name for name, static in definitions(own) if not static}
    assert external <= CONTRACT, f"{fam.name}: {sorted(external - CONTRACT)} outside the contract"


def test_engine_has_each_contract_function_once(rendered):
    """The family's own definition or the generic fallback, never both, never neither."""
    fam, plan, _, kernels_c, _ = rendered
    names = [name for name, _ in definitions(kernels_c)]
    for symbol in ("nk_a8_quantize", "nk_gemv_a8", "nk_fwht"):
        assert names.count(symbol) == 1, (fam.name, symbol)
    assert names.count(f"nk_gemm_a8_{fam.gemm_form}") == 1
    assert names.count("nk_gemm_a8_family") == (fam.gemm_form == "family")
    assert names.count("nk_columns8") == fam.key_columns
    assert ("#define NK_HAVE_COLUMNS8" in kernels_c) == fam.key_columns
    assert f"nk_gemm_a8_{fam.gemm_form}(w, row0, rows, io, n);" in kernels_c   # prefill_chunk > 1 here
    assert plan.target.prefill_chunk > 1


def test_header_takes_the_descriptors_variants(rendered):
    fam, plan, _, _, kernels_h = rendered
    names = [name for name, _ in definitions(kernels_h)]
    assert names.count("nk_dot_i8n") == 1
    assert ("#define NK_DOT_I8N_OWN 1" in kernels_h) == (fam.dot_i8n in ("smlad", "family"))
    assert ("#include <arm_mve.h>" in kernels_h) == (fam.dot_i8n == "helium")
    assert ("#define NK_WS_RUNS 1" in kernels_h) == (fam.weighted_sum != "loop")
    assert names.count("nk_ws_i8n") == (fam.weighted_sum != "loop")
    assert names.count("nk_mac_i8n") == (fam.weighted_sum != "helium")
    assert ("__fp16 v;" in kernels_h) == fam.fp16_convert
    assert f'#define NK_KERNELS      "{fam.name}"' in kernels_h


def test_every_template_has_a_descriptor_and_every_descriptor_a_template():
    templates = {f"kernels/{p.name}" for p in KERNELS_DIR.glob("*.c.j2") if not p.name.startswith("_")}
    named = {f.template for f in families.FAMILIES.values()}
    assert named == templates
    assert all(name == f.name for name, f in families.FAMILIES.items())


def test_every_family_fits_some_board():
    fitting = {f for n in boards.names() for f in boards.board_families(boards.load(n))}
    assert fitting == set(families.names())


@pytest.mark.parametrize("trait, value", [("gemm_form", "scalar"), ("dot_i8n", "sdot"),
                                          ("weighted_sum", "helium"), ("attention_lanes", 4)])
def test_descriptor_refuses_a_variant_there_is_no_code_for(trait, value):
    with pytest.raises(ValueError, match=f"kernel family new: {trait}|Helium weighted sum"):
        families.KernelFamily("new", "kernels/new.c.j2", "a test", **{trait: value})


def test_unknown_family_is_one_line():
    with pytest.raises(CactError, match=r"^kernel family 'sse2': choose one of armv6, mdsp, "):
        families.get("sse2")


def test_every_family_has_a_kernel_driver():
    """Adding a family means naming its board in a kernel driver, which runs it against the
    scalar reference on random inputs: test_kernels.py (A profile, x86) or test_kernels_mcu.py
    (Cortex-M, under qemu-system-arm)."""
    from host_tests import test_kernels, test_kernels_mcu
    driven = {"scalar", *test_kernels.FAMILIES, *(f for _, f in test_kernels_mcu.FAMILIES)}
    assert driven == set(families.names())
