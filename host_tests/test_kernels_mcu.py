"""Cortex-M kernel families ("mdsp" on watch-m4/m7, "mve" on watch-m55) against the scalar
kernels, unit by unit, under QEMU; and the Cortex-M benchmark (`scons ... bench=1`).

The golden archives themselves (logits bit-identical, greedy continuations identical) are
covered by test_boards.py, which builds every board with its own kernel family.  Here:

* a generated C driver (bench/mcu.py, templates/bench/kernel_driver.c.j2) calls the
  family's nk_gemv_a8 and nk_a8_quantize and the scalar nk_gemv_a8_scalar /
  nk_a8_quantize_scalar on random inputs: every width code (binary, 2, 3, 4 bits, ternary), row counts 1..13 (all remainders of
  the 2- and 4-row blocks), 1..5 groups, a row offset, ordinary and odd norms (zero,
  subnormal, negative, infinite, NaN), a zero and a tiny activation scale; activations of
  lengths 1..640 (padding), ordinary, tiny, subnormal, sparse, huge, tie-rounding, all-zero
  and NaN/inf values; and the integer attention helpers nk_dot_i8n / nk_ws_i8n against plain
  loops (lengths 1..131, unaligned rows, runs of 1..128 positions, extreme codes and weights,
  lanes past the end left alone); and nk_fwht (mve: Helium within a bound where flushing
  cannot change a bit) against the plain butterfly loop (lengths 16..512, every kind of
  input above, values at and just past both edges of the bound); and nk_f16_to_f32 (the
  FPU's VCVTB for finite values) against the integer conversion on all 65,536 patterns; and
  nk_gemm_a8 (the board's GEMM form: mdsp's four-token form and its 1-3 token remainder,
  mve's blocked form) with 1..8 tokens, each against the scalar GEMV.  Every output must be
  bit-identical;
* the same driver times one 256 x 512 GEMV per width: the family must be the fast path, not
  a silent fallback;
* the benchmark prints its JSON line with the promised keys, and the instruction counts are
  the same on a second run (qemu -icount is deterministic).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import mcu as bench_mcu
from generator.build import boards
from host_tests.scons_run import scons

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "host_tests" / "golden"
FAMILIES = [("watch-m4", "mdsp"), ("watch-m7", "mdsp"), ("watch-m55", "mve")]

pytestmark = pytest.mark.skipif(
    any(boards.missing_tools(boards.load(b), run=True) for b, _ in FAMILIES),
    reason="needs arm-none-eabi-gcc and qemu-system-arm")


def test_watch_boards_use_their_families():
    for board, family in FAMILIES:
        b = boards.load(board)
        assert b["kernels"] == family
        assert isinstance(b["emulator"]["systick_hz"], int)
    # GCC would otherwise vectorise f32 loops into Helium, which flushes subnormals
    assert "-fno-tree-vectorize" in boards.load("watch-m55")["arch_flags"]


@pytest.fixture(scope="module")
def drivers(tmp_path_factory):
    root = tmp_path_factory.mktemp("kernel-drivers")
    out = {}
    for board, family in FAMILIES:
        elf = bench_mcu.kernel_driver(board, family, root / board)
        out[board] = bench_mcu.run_kernel_driver(board, elf)
    return out


@pytest.mark.parametrize("board,family", FAMILIES)
def test_family_equals_scalar_bit_for_bit(drivers, board, family):
    text, res = drivers[board]
    mismatches = [ln for ln in text.splitlines() if ln.startswith("MISMATCH")]
    assert res["kernels"] == family
    # 261 GEMV and quantisation, 90 batched products (nk_gemm_a8), 131 attention, 1 f16 (all 65,536), 104 nk_fwht
    assert res["cases"] >= 585
    assert not mismatches, "\n".join(mismatches[:20])
    assert res["mismatches"] == 0 and res["returncode"] == 0


@pytest.mark.parametrize("board,family", FAMILIES)
def test_family_is_the_fast_path(drivers, board, family):
    """Every width beats the scalar kernel; the 2-bit GEMV by the margin of its design."""
    _, res = drivers[board]
    by_kind = {g["kind"]: g for g in res["gemv"]}
    assert set(by_kind) == {"binary", "cq2", "cq3", "cq4", "ternary"}
    for g in res["gemv"]:
        assert g["instructions"] < g["instructions_scalar"], g
    floor = {"mdsp": 0.55, "mve": 3.5}[family]       # measured: 0.63 and 4.0 MACs/instruction
    assert by_kind["cq2"]["macs_per_instruction"] >= floor
    assert by_kind["ternary"]["macs_per_instruction"] >= floor
    assert res["quantize"]["instructions"] < res["quantize"]["instructions_scalar"]


KEYS = {"instructions_per_token": int, "instructions_per_token_scalar": int,
        "macs_per_instruction": float, "macs_per_instruction_scalar": float,
        "macs_per_token": int, "engine_text_bytes": int, "engine_text_bytes_scalar": int,
        "prefill_instructions_per_token": int, "speedup": float, "tokens": int}


@pytest.mark.parametrize("board", ["watch-m7", "watch-m55"])
def test_benchmark_json_and_repeatability(board, tmp_path):
    """watch-m7 keeps its archive in a partition, watch-m55 links it: both paths."""
    build = tmp_path / board
    proc = scons(f"board={board}", f"archive={GOLDEN / 'tiny' / 'archive.cact'}", f"build={build}",
                 "bench=1", "bench_tokens=3")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    for key, typ in KEYS.items():
        assert isinstance(res[key], typ), (key, res)
    assert res["board"] == board and res["kernels"] == boards.load(board)["kernels"]
    assert res["tokens"] == 3
    assert res["macs_per_token"] > 0 and res["engine_text_bytes"] > 0
    assert res["instructions_per_token"] < res["instructions_per_token_scalar"]
    assert res["macs_per_instruction"] == round(res["macs_per_token"] / res["instructions_per_token"], 3)
    assert res["engine_text_bytes"] <= 48 * 1024
    assert (build / "scalar" / "needle.elf").exists()
    # a second run of the same images: the same counts, instruction for instruction
    again = bench_mcu.compare(boards.load(board), build, build / "scalar", 3)
    for key in ("instructions_per_token", "instructions_per_token_scalar",
                "prefill_instructions_per_token", "prefill_instructions_per_token_scalar"):
        assert again[key] == res[key], key


def test_bare_metal_bench_needs_a_count(tmp_path, board_runner):
    """--bench on bare metal goes through the same argument checks as on Linux."""
    build = tmp_path / "m4"
    scons("board=watch-m4", f"archive={GOLDEN / 'tiny' / 'archive.cact'}", f"build={build}")
    board = boards.load("watch-m4")
    bad = board_runner(board, build / "needle.elf").run(["--bench", "0"], timeout=120)
    assert bad.returncode == 2 and "--bench wants an integer" in bad.stderr
    out = bench_mcu.run_bench(board, build, 2)
    assert out["tokens"] == 2 and out["kernels"] == "mdsp" and out["decode_ticks"] > 0
