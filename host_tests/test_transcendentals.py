"""The engine's f32 exp, log, sin and cos (docs/numerics.md §2).

* Bit identity: the generated C (nk_exp, nk_log, nk_sincos in needle_kernels.{h,c}) and the
  reference's twins (generator/model/numerics.py exp, log, sincos) agree bit for bit on
  millions of arguments: a stride over all 2^32 bit patterns (NaN payloads, infinities,
  subnormals, negatives), dense samples of each function's domain, RoPE angles t·ω and the
  edge cases, natively and under QEMU on a soft-float MIPS board (router-mt7621: no FPU,
  every float operation a call into firmware/softfloat or compiler-rt) and an ARMv6 VFP board (rpi-zero).
* Accuracy: within 1 ulp of the exact value (float64 NumPy as the reference, whose own
  error is < 2^-28 f32 ulp) on a dense sample of every domain: exp on [-104, 89], log on
  every positive float, sin/cos on |x| <= 65536; set NEEDLE_EXHAUSTIVE=1 to check every
  float of those domains instead (tens of minutes; exp alone takes several).
* The special values docs/numerics.md §2 states.
"""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest

from generator.build import boards, flags
from generator.model import numerics as nm
from host_tests.tiny_firmware import runtime_paths

U32 = np.uint32
F32 = np.float32
NAN_BITS = 0x7FC00000

DRIVER = r"""
#include "needle_kernels.c"
#include <stdio.h>
#include <stdlib.h>

/* driver IN OUT: for every f32 (raw bits) of IN, write exp, log, sin, cos bits to OUT, and
 * exp again through the branch-free nk_exp_sub8 (eight arguments at a time, vectorised where
 * the compiler can) */
int main(int argc, char **argv)
{
    if (argc != 3) return 2;
    FILE *in = fopen(argv[1], "rb"), *out = fopen(argv[2], "wb");
    if (!in || !out) return 2;
    uint32_t buf[4096], res[5 * 4096];
    float block[4096];
    size_t n;
    while ((n = fread(buf, 4, 4096, in)) > 0) {
        for (size_t i = 0; i < n; i++) block[i] = nk_bits_f32(buf[i]);
        for (size_t i = 0; i + 8 <= n; i += 8) nk_exp_sub8(block + i, 0.0f);
        for (size_t i = n / 8 * 8; i < n; i++) block[i] = nk_exp_select(block[i]);
        for (size_t i = 0; i < n; i++) {
            float x = nk_bits_f32(buf[i]), s, c;
            nk_sincos(x, &s, &c);
            res[5 * i + 0] = nk_f32_bits(nk_exp(x));
            res[5 * i + 1] = nk_f32_bits(nk_log(x));
            res[5 * i + 2] = nk_f32_bits(s);
            res[5 * i + 3] = nk_f32_bits(c);
            res[5 * i + 4] = nk_f32_bits(block[i]);
        }
        if (fwrite(res, 4, 5 * n, out) != 5 * n) return 3;
    }
    return fclose(out) != 0;
}
"""

# (board, number of arguments): natively millions, under QEMU a million each; rpi-zero2
# (AArch64 NEON) and the host (AVX2, when it has it) vectorise nk_exp_sub8.
BOARDS = [("host", 8_000_000), ("router-mt7621", 1_000_000), ("rpi-zero", 1_000_000),
          ("rpi-zero2", 1_000_000)]


def edge_cases() -> np.ndarray:
    bits = [0, 0x80000000, 1, 0x80000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF,
            0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FBFFFFF, 0xFFFFFFFF,
            0x39000000, 0x38FFFFFF, 0xB9000000, 0x39800000, 0x397FFFFF,     # the tiny thresholds
            0x42B17217, 0x42B17218, 0x42B17180, 0xC2CFF1B5, 0xC2CFF1B4, 0xC2CFF1B6,
            0xC2AEAC4F, 0xC2AEAC50, 0xC2B00000, 0x4A800000, 0x4A800001, 0x4A7FFFFF]
    vals = [1.0, 2.0, 0.5, np.sqrt(2), np.sqrt(0.5), np.e, np.pi, np.pi / 2, np.pi / 4, 65536.0,
            -65536.0, 252.89821, 102943.0, 1e-30, -1e-30, 88.0, -88.0, -87.33655, -103.0, 89.0, -104.0]
    ks = np.arange(-41722, 41723, dtype=np.float64)            # near every multiple of pi/2
    near = (ks * (np.pi / 2)).astype(F32)
    near_bits = near.view(U32)
    return np.concatenate([np.array(bits, dtype=U32).view(F32), F32(vals),
                           near, (near_bits + 1).view(F32), (near_bits - 1).view(F32)])


def arguments(n: int, seed: int = 13) -> np.ndarray:
    """About n arguments: a quarter a stride over all bit patterns, the rest the domains."""
    rng = np.random.default_rng(seed)
    every = np.arange(0, 2 ** 32, 2 ** 32 // (n // 4), dtype=np.uint64).astype(U32).view(F32)
    exp_dom = rng.uniform(-104, 89, n // 4).astype(F32)
    log_dom = np.concatenate([rng.uniform(0.5, 2.0, n // 16), np.exp(rng.uniform(-103, 88, n // 16))]).astype(F32)
    sc_dom = rng.uniform(-65536, 65536, n // 8).astype(F32)
    t = rng.integers(0, 65536, n // 8).astype(F32)               # RoPE: f32(t · ω), ω <= 1
    omega = (F32(1) / np.power(F32(10000), rng.uniform(0, 1, n // 8)).astype(F32)).astype(F32)
    return np.concatenate([edge_cases(), every, exp_dom, log_dom, sc_dom, (t * omega).astype(F32)])


def twins(x: np.ndarray) -> np.ndarray:
    s, c = nm.sincos(x)
    return np.stack([nm.exp(x), nm.log(x), s, c], axis=1).view(U32)


@pytest.fixture(scope="module")
def tiny_archive(tmp_path_factory, tiny_bytes):
    path = tmp_path_factory.mktemp("transcendentals") / "tiny.cact"
    path.write_bytes(tiny_bytes)
    return path


@pytest.mark.parametrize("board_name,count", BOARDS)
def test_c_matches_numpy_twins_bit_for_bit(tiny_archive, board_name, count, tmp_path):
    board = boards.load(board_name)
    why = boards.missing_tools(board, run=True)
    if why:
        pytest.skip(why)
    gen = tmp_path / "gen"
    boards.generate_engine(board, str(tiny_archive), str(gen), incbin_path=str(tiny_archive), kernels="scalar")
    (tmp_path / "driver.c").write_text(DRIVER)
    exe = tmp_path / "driver"
    family = boards.kernel_family(board) if board_name == "host" else "scalar"   # x86: -mavx2
    runtime = runtime_paths(board)   # the soft-float routines on the routers
    proc = subprocess.run([*boards.compiler_argv(board), *flags.compile_flags(board, family), f"-I{gen}",
                           str(tmp_path / "driver.c"), *runtime, *flags.link_flags(board), "-o", str(exe), "-lm"],
                          capture_output=True, text=True)        # -lm: the kernels' sqrtf
    assert proc.returncode == 0, proc.stderr
    x = arguments(count)
    (tmp_path / "in.bin").write_bytes(x.view(U32).astype("<u4").tobytes())
    run = subprocess.run(board["emulator"]["command"] + [str(exe), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")],
                         capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stderr
    got = np.frombuffer((tmp_path / "out.bin").read_bytes(), dtype="<u4").reshape(-1, 5)
    branch_free = np.nonzero(got[:, 4] != got[:, 0])[0]
    assert branch_free.size == 0, "nk_exp_select differs from nk_exp at " + ", ".join(
        f"{int(x.view(U32)[i]):08x}: {got[i, 4]:08x} vs {got[i, 0]:08x}" for i in branch_free[:10])
    got = got[:, :4]
    want = twins(x)
    assert got.shape == want.shape
    bad = np.nonzero((got != want).any(axis=1))[0]
    names = ("exp", "log", "sin", "cos")
    detail = [f"x={x[i]!r} ({int(x.view(U32)[i]):08x}): " +
              ", ".join(f"{names[j]} C {got[i, j]:08x} numpy {want[i, j]:08x}" for j in range(4) if got[i, j] != want[i, j])
              for i in bad[:10]]
    assert bad.size == 0, f"{bad.size} of {len(x)} arguments differ:\n" + "\n".join(detail)


# ---- accuracy ------------------------------------------------------------------------

def ulp_error(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|got − exact| in units of the f32 ulp of the binade holding |exact| (2^-149 below 2^-126)."""
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(np.maximum(np.abs(exact), 2.0 ** -149)))
    return np.abs(got.astype(np.float64) - exact) / np.exp2(np.maximum(e - 23, -149))


EXHAUSTIVE = os.environ.get("NEEDLE_EXHAUSTIVE") == "1"
CHUNK = 1 << 22


def bit_chunks(lo: float, hi: float, step: int):
    """Every step-th f32 of [lo, hi] (lo <= 0 < hi or 0 <= lo < hi), in chunks."""
    spans = [(0.0, hi, 1.0)] + ([(0.0, -lo, -1.0)] if lo < 0 else [])
    if lo > 0:
        spans = [(lo, hi, 1.0)]
    for a, b, sign in spans:
        first, last = int(F32(a).view(U32)), int(F32(b).view(U32))
        for at in range(first, last + 1, CHUNK * step):
            u = np.arange(at, min(at + CHUNK * step, last + 1), step, dtype=np.uint64).astype(U32)
            yield u.view(F32) * F32(sign)


def max_errors(fns, exacts, lo: float, hi: float, step: int) -> list[tuple[float, float]]:
    """(largest ulp error, its argument) of each function over every step-th f32 of [lo, hi]."""
    worst = [(0.0, 0.0)] * len(exacts)
    for xs in bit_chunks(lo, hi, 1 if EXHAUSTIVE else step):
        got = fns(xs)
        for j, exact in enumerate(exacts):
            with np.errstate(all="ignore"):
                ref = exact(xs.astype(np.float64))
            finite = np.abs(ref) <= float(np.finfo(F32).max)
            err = ulp_error(got[j][finite], ref[finite])
            i = int(np.argmax(err))
            if err[i] > worst[j][0]:
                worst[j] = (float(err[i]), float(xs[finite][i]))
    return worst


@pytest.mark.slow
def test_exp_within_one_ulp():
    [(worst, arg)] = max_errors(lambda v: [nm.exp(v)], [np.exp], -104.0, 89.0, 97)
    print(f"exp: {worst:.4f} ulp at x = {arg!r}")
    assert worst < 1.0, (worst, arg)


@pytest.mark.slow
def test_log_within_one_ulp():
    [(worst, arg)] = max_errors(lambda v: [nm.log(v)], [np.log], 0.0, float(np.finfo(F32).max), 211)
    print(f"log: {worst:.4f} ulp at x = {arg!r}")
    assert worst < 1.0, (worst, arg)


@pytest.mark.slow
def test_sin_cos_within_one_ulp():
    errs = max_errors(nm.sincos, [np.sin, np.cos], -65536.0, 65536.0, 53)
    print(f"sin: {errs[0][0]:.4f} ulp at x = {errs[0][1]!r}; cos: {errs[1][0]:.4f} ulp at x = {errs[1][1]!r}")
    assert errs[0][0] < 1.0 and errs[1][0] < 1.0, errs


def test_sin_cos_of_the_hardest_reduction():
    """x = 252.898 lies 2^-27.8 from 161·π/2: the reduction keeps every bit of r."""
    x = F32(252.89820861816406)
    s, c = nm.sincos(np.array([x]))
    assert ulp_error(s, np.sin(np.float64(x)))[0] < 1.0
    assert ulp_error(c, np.cos(np.float64(x)))[0] < 1.0


def test_special_values():
    inf, nan = np.inf, np.nan
    e = nm.exp(F32([nan, inf, -inf, 0.0, -0.0, 88.72283, 88.72284, -103.97207, -103.97209, -87.33655]))
    assert e.view(U32)[0] == NAN_BITS
    assert list(e[1:5]) == [inf, 0.0, 1.0, 1.0]
    assert np.isfinite(e[5]) and e[6] == inf and e[7] > 0 and e[8] == 0.0 and e[9] > 0
    assert nm.exp(F32([-103.97207]))[0] == F32(2.0 ** -149)     # the smallest subnormal
    lg = nm.log(F32([nan, inf, -inf, -1.0, 0.0, -0.0, 1.0, 1e-45]))
    assert list(lg.view(U32)[[0, 2, 3]]) == [NAN_BITS] * 3
    assert list(lg[[1, 4, 5, 6]]) == [inf, -inf, -inf, 0.0]
    assert lg[7] == F32(np.log(2.0 ** -149))
    s, c = nm.sincos(F32([nan, inf, -inf, 2.0 ** 22 + 1, 0.0, -0.0, 1e-5]))
    assert list(s.view(U32)[:4]) == [NAN_BITS] * 4 and list(c.view(U32)[:4]) == [NAN_BITS] * 4
    assert list(s.view(U32)[4:6]) == [0, 0x80000000] and list(c[4:6]) == [1.0, 1.0]
    assert s[6] == F32(1e-5) and c[6] == 1.0


def test_rope_tables_use_the_f32_functions():
    cos, sin = nm.rope_tables(np.arange(5), 8, 10000.0)
    s, c = nm.sincos(F32([[3.0]]) * F32(1.0))
    assert cos[3, 0] == c[0, 0] and sin[3, 0] == s[0, 0]
    assert cos[0, 0] == 1.0 and sin[0, 0] == 0.0
