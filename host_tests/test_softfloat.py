"""The routers' own f32 add, subtract, multiply and divide (firmware/softfloat/softfloat.c).

Boards without an FPU (router-mt7621, router-ath79) link these in place of the compiler
runtime's __addsf3, __subsf3, __mulsf3 and __divsf3; the engine's butterflies call needle_sf_butterfly
(both results of one a + b, a - b pair), its lane mixing needle_sf_add_scaled (o + w * v over a
row), its sums of squares and dot products needle_sf_dot (acc + a * b, step by step) and its
GEMV groups needle_sf_group_step (acc + (norm g) (float)dot).  They must
give IEEE 754 results bit for bit, each product and each sum rounded on its own, or the
routers would leave the engine's one numerics contract:

* natively, under their NK_SOFTFLOAT_PREFIX names, against the host's hardware f32 (NumPy:
  round to nearest even, gradual underflow) on millions of operand pairs: a stride over all
  bit patterns, subnormals, the overflow and underflow edges, cancellation (operands one or
  two ulps apart, exponents up to 30 apart) and exact ties;
* cross-built for both MIPS routers (little and big endian, soft float) and run under
  QEMU, where the driver's plain `a + b` is a call the linker resolved to these functions:
  the test checks that the image's __addsf3 and __mulsf3 are ours (pyelftools), then
  compares the results the same way;
* NaN results are compared as NaN (payloads are not part of the numerics contract).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from elftools.elf.elffile import ELFFile

from generator.build import boards, flags

U32 = np.uint32
F32 = np.float32
SOURCE = Path(__file__).resolve().parents[1] / "firmware" / "softfloat" / "softfloat.c"

DRIVER = r"""
#include <stdint.h>
#include <stdio.h>
#include <string.h>

void needle_sf_butterfly(float *x, float *y);   /* both builds: the engine's butterflies */
void needle_sf_add_scaled(float *o, float w, const float *v, uint32_t n);
float needle_sf_dot(const float *a, const float *b, uint32_t n, float acc);
float needle_sf_group_step(float acc, float norm, float g, int32_t dot);

#ifdef NK_SOFTFLOAT_PREFIX
float nk_sf_add(float, float);
float nk_sf_sub(float, float);
float nk_sf_mul(float, float);
float nk_sf_div(float, float);
#define ADD(a, b) nk_sf_add(a, b)
#define SUB(a, b) nk_sf_sub(a, b)
#define MUL(a, b) nk_sf_mul(a, b)
#define DIV(a, b) nk_sf_div(a, b)
#else                           /* soft-float build: the operators call __addsf3, ... */
#define ADD(a, b) ((a) + (b))
#define SUB(a, b) ((a) - (b))
#define MUL(a, b) ((a) * (b))
#define DIV(a, b) ((a) / (b))
#endif

static float f(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
static uint32_t u(float x) { uint32_t b; memcpy(&b, &x, 4); return b; }

/* driver IN OUT: IN holds little-endian pairs (a, b) of f32 bits, read 1024 at a time; OUT
 * gets a+b, a-b, a*b, the butterfly's a+b, a-b, and with c the next pair's a (the chunk's
 * first after its last) and w the chunk's first a: c + w*b (needle_sf_add_scaled over the chunk),
 * c + a*b (needle_sf_dot of one step), c + a*b + a'*b' + a''*b'' (three steps, as far as the
 * chunk goes), a/b, and with m the next pair's b bits as an int32: c + (a*b)*(float)m and
 * c + (a*b)*(float)(m >> 12) (needle_sf_group_step, large and small dots) */
int main(int argc, char **argv)
{
    if (argc != 3) return 2;
    FILE *in = fopen(argv[1], "rb"), *out = fopen(argv[2], "wb");
    if (!in || !out) return 2;
    static unsigned char buf[8 * 1024], res[44 * 1024];
    static float fa[1024], fb[1024], fc[1024];
    size_t n;
    while ((n = fread(buf, 8, 1024, in)) > 0) {
        for (size_t i = 0; i < n; i++) {
            const unsigned char *p = buf + 8 * i;
            fa[i] = f(p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
            fb[i] = f(p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24);
        }
        for (size_t i = 0; i < n; i++) fc[i] = fa[(i + 1) % n];
        needle_sf_add_scaled(fc, fa[0], fb, (uint32_t)n);       /* fc[i] = c + w*b */
        for (size_t i = 0; i < n; i++) {
            volatile float x = fa[i], y = fb[i];    /* no constant folding, no contraction */
            float s = fa[i], d = fb[i], c = fa[(i + 1) % n];
            int32_t m = (int32_t)u(fb[(i + 1) % n]);
            needle_sf_butterfly(&s, &d);
            uint32_t steps = n - i < 3 ? (uint32_t)(n - i) : 3u;
            uint32_t r[11] = { u(ADD(x, y)), u(SUB(x, y)), u(MUL(x, y)), u(s), u(d), u(fc[i]),
                              u(needle_sf_dot(fa + i, fb + i, 1, c)), u(needle_sf_dot(fa + i, fb + i, steps, c)),
                              u(DIV(x, y)), u(needle_sf_group_step(c, fa[i], fb[i], m)),
                              u(needle_sf_group_step(c, fa[i], fb[i], m >> 12)) };
            for (int k = 0; k < 11; k++)
                for (int j = 0; j < 4; j++) res[44 * i + 4 * k + j] = (unsigned char)(r[k] >> (8 * j));
        }
        if (fwrite(res, 44, n, out) != n) return 3;
    }
    return fclose(out) != 0;
}
"""

SPECIALS = [0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x00000002, 0x007FFFFF, 0x807FFFFF,
            0x00800000, 0x80800000, 0x00800001, 0x00FFFFFF, 0x01000000, 0x3F800000, 0xBF800000,
            0x3F800001, 0x3F7FFFFF, 0x40000000, 0x3F000000, 0x33800000, 0x33000000, 0x34000000,
            0x7F7FFFFF, 0xFF7FFFFF, 0x7F7FFFFE, 0x7F000000, 0x7F800000, 0xFF800000, 0x7FC00000,
            0xFFC00000, 0x7F800001, 0x7FBFFFFF, 0xFFFFFFFF, 0x1F800000, 0x1F7FFFFF, 0x20000000,
            0x5F800000, 0x5F7FFFFF, 0x3FFFFFFF, 0x4B800000, 0x4B7FFFFF, 0x0C000000, 0x0B800000]


def operand_pairs(n: int, seed: int = 7) -> np.ndarray:
    """About n pairs (a, b) of f32 bit patterns as an (n, 2) uint32 array."""
    rng = np.random.default_rng(seed)
    parts = []
    s = np.array(SPECIALS, dtype=U32)
    parts.append(np.stack(np.meshgrid(s, s), axis=-1).reshape(-1, 2))            # every pair of edges
    k = n // 8
    parts.append(rng.integers(0, 2 ** 32, (k, 2), dtype=np.uint64).astype(U32))  # any bits
    # ordinary magnitudes, exponents close: the engine's sums and products
    a = rng.integers(0x30000000, 0x50000000, k, dtype=np.uint64).astype(U32)
    d = rng.integers(-30 << 23, 30 << 23, k).astype(np.int64)
    b = (a.astype(np.int64) + d).clip(0, 0x7F7FFFFF).astype(U32) ^ (rng.integers(0, 2, k).astype(U32) << 31)
    parts.append(np.stack([a, b], axis=1))
    # cancellation: b = -(a + small), and near-ties
    a = rng.integers(0x00800000, 0x7F000000, k, dtype=np.uint64).astype(U32)
    b = (a.astype(np.int64) + rng.integers(-3, 4, k)).astype(U32) | U32(0x80000000)
    parts.append(np.stack([a, b], axis=1))
    # subnormals with anything small, and products that underflow or overflow
    sub = rng.integers(0, 0x00800000, k, dtype=np.uint64).astype(U32) | (rng.integers(0, 2, k).astype(U32) << 31)
    small = rng.integers(0, 0x0A000000, k, dtype=np.uint64).astype(U32) | (rng.integers(0, 2, k).astype(U32) << 31)
    parts.append(np.stack([sub, small], axis=1))
    lo = rng.integers(0x00800000, 0x21000000, k, dtype=np.uint64).astype(U32)
    mid = rng.integers(0x1A000000, 0x3F800000, k, dtype=np.uint64).astype(U32)
    parts.append(np.stack([lo, mid], axis=1))
    hi = rng.integers(0x5C000000, 0x7F800000, k, dtype=np.uint64).astype(U32)
    parts.append(np.stack([hi, hi ^ U32(0x00400001)], axis=1))
    # quotients: every divisor significand interval of the reciprocal seed (1.0 exactly
    # included: powers of two), dividends just below and above the divisor's significand,
    # and exponents that put the quotient at the edges of the normal range
    b = (rng.integers(1, 254, k).astype(U32) << 23) | (rng.integers(0, 64, k).astype(U32) << 17) \
        | (rng.integers(0, 2, k).astype(U32) * rng.integers(0, 1 << 17, k).astype(U32))
    a = (b & U32(0x007FFFFF)).astype(np.int64) + rng.integers(-2, 3, k)
    a = (a.clip(0, 0x007FFFFF).astype(U32) | (rng.integers(1, 254, k).astype(U32) << 23))
    parts.append(np.stack([a, b ^ (rng.integers(0, 2, k).astype(U32) << 31)], axis=1))
    a = rng.integers(0x00800000, 0x7F800000, k, dtype=np.uint64).astype(U32)
    eb = ((a >> 23).astype(np.int64) + rng.choice([-128, -127, -126, 125, 126, 127, 128, 150], k)
          ).clip(1, 254).astype(U32)
    parts.append(np.stack([a, (eb << 23) | rng.integers(0, 1 << 23, k, dtype=np.uint64).astype(U32)], axis=1))
    # sums that tie: b is a's ulp/2 times an odd number, scaled
    a = rng.integers(0x3F800000, 0x40000000, k, dtype=np.uint64).astype(U32)
    e = rng.integers(1, 26, k).astype(U32)
    b = ((U32(0x3F800000) - (e << 23)) | rng.integers(0, 2, k).astype(U32) << 22)
    parts.append(np.stack([a, b], axis=1))
    pairs = np.concatenate(parts)
    return np.concatenate([pairs, pairs[:, ::-1]])


CHUNK = 1024        # the driver's pairs per read: needle_sf_add_scaled's rows, the dots' reach


def expected(pairs: np.ndarray) -> np.ndarray:
    x, y = pairs[:, 0].view(F32), pairs[:, 1].view(F32)
    i = np.arange(len(pairs))
    start = i // CHUNK * CHUNK
    end = np.minimum(start + CHUNK, len(pairs))
    c = x[start + (i - start + 1) % (end - start)]       # the next pair's a, within the chunk
    w = x[start]
    m = pairs[start + (i - start + 1) % (end - start), 1].view(np.int32)   # the next pair's b bits
    with np.errstate(all="ignore"):
        p = x * y                                        # each product rounded, then each sum
        dot3 = c + p
        for k in (1, 2):
            more = i + k < end
            dot3 = np.where(more, dot3 + p[np.minimum(i + k, len(p) - 1)], dot3)
        return np.stack([x + y, x - y, p, x + y, x - y, c + w * y, c + p, dot3, x / y,
                         c + p * m.astype(F32), c + p * (m >> 12).astype(F32)],
                        axis=1).astype(F32).view(U32)


def compare(pairs: np.ndarray, got: np.ndarray) -> None:
    want = expected(pairs)
    assert got.shape == want.shape
    nan_got = (got & U32(0x7FFFFFFF)) > U32(0x7F800000)
    nan_want = (want & U32(0x7FFFFFFF)) > U32(0x7F800000)
    bad = np.nonzero(((got != want) & ~(nan_got & nan_want)).any(axis=1))[0]
    names = ("+", "-", "*", "butterfly +", "butterfly -", "add_scaled c + w*", "dot c +",
             "dot of three, c +", "/", "group step, c + a*b*", "group step (small), c + a*b*")
    detail = [f"{pairs[i, 0]:08x} {names[j]} {pairs[i, 1]:08x}: got {got[i, j]:08x}, IEEE {want[i, j]:08x}"
              for i in bad[:10] for j in range(11) if got[i, j] != want[i, j] and not (nan_got[i, j] and nan_want[i, j])]
    assert bad.size == 0, f"{bad.size} of {len(pairs)} pairs differ:\n" + "\n".join(detail)


def run_driver(cmd: list[str], pairs: np.ndarray, tmp_path: Path) -> np.ndarray:
    (tmp_path / "in.bin").write_bytes(pairs.astype("<u4").tobytes())
    run = subprocess.run(cmd + [str(tmp_path / "in.bin"), str(tmp_path / "out.bin")],
                         capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stderr
    return np.frombuffer((tmp_path / "out.bin").read_bytes(), dtype="<u4").astype(U32).reshape(-1, 11)


def build(board_name: str, tmp_path: Path, prefixed: bool) -> Path:
    board = boards.load(board_name)
    why = boards.missing_tools(board, run=True)
    if why:
        pytest.skip(why)
    (tmp_path / "driver.c").write_text(DRIVER)
    exe = tmp_path / "driver"
    defines = ["-DNK_SOFTFLOAT_PREFIX"] if prefixed else []
    proc = subprocess.run([*boards.compiler_argv(board), *flags.compile_flags(board, "scalar"), *defines,
                           str(tmp_path / "driver.c"), str(SOURCE), *flags.link_flags(board), "-o", str(exe)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return exe


def test_matches_hardware_floats_natively(tmp_path):
    exe = build("host", tmp_path, prefixed=True)
    pairs = operand_pairs(6_000_000)
    compare(pairs, run_driver([str(exe)], pairs, tmp_path))


@pytest.mark.parametrize("board_name", ["router-mt7621", "router-ath79"])
def test_routers_link_and_match(board_name, tmp_path):
    board = boards.load(board_name)
    exe = build(board_name, tmp_path, prefixed=False)
    with open(exe, "rb") as fh:
        symtab = ELFFile(fh).get_section_by_name(".symtab")
        sizes = {s.name: s["st_size"] for s in symtab.iter_symbols() if s.name in ("__addsf3", "__mulsf3", "__divsf3")}
    obj = tmp_path / "softfloat.o"
    subprocess.run([*boards.compiler_argv(board), *flags.compile_flags(board, "scalar"), "-c", str(SOURCE),
                    "-o", str(obj)], check=True)
    with open(obj, "rb") as fh:
        symtab = ELFFile(fh).get_section_by_name(".symtab")
        ours = {s.name: s["st_size"] for s in symtab.iter_symbols() if s.name in ("__addsf3", "__mulsf3", "__divsf3")}
    assert sizes == ours, f"the image's runtime functions are not firmware/softfloat's: {sizes} vs {ours}"
    pairs = operand_pairs(6_000_000, seed=11)
    compare(pairs, run_driver(board["emulator"]["command"] + [str(exe)], pairs, tmp_path))


@pytest.mark.parametrize("board_name,fused", [("router-mt7621", True), ("router-ath79", True),
                                              ("rpi-zero", False), ("host", False)])
def test_soft_float_engines_take_the_fused_paths(board_name, fused, tmp_path):
    """The engine of a board without an FPU runs its butterflies through needle_sf_butterfly (both
    results from one unpacking, the bits of a + b and a - b above), its lane mixing through
    needle_sf_add_scaled, its sums of squares and dot products through needle_sf_dot and its GEMV
    groups through needle_sf_group_step; every other board keeps the plain f32 operations."""
    board = boards.load(board_name)
    archive = Path(__file__).resolve().parent / "golden" / "tiny" / "archive.cact"
    boards.generate_engine(board, str(archive), str(tmp_path / "gen"))
    kernels = (tmp_path / "gen" / "needle_kernels.c").read_text()
    model = (tmp_path / "gen" / "needle_model.c").read_text()
    assert ("needle_sf_butterfly(x + j, x + j + h)" in kernels) == fused
    assert ("needle_sf_add_scaled(o, w, v, n)" in model) == fused
    assert ("return needle_sf_dot(x, x, n, 0.0f)" in kernels) == fused
    assert ("return needle_sf_dot(a, b, n, 0.0f)" in kernels) == fused
    assert ("acc = needle_sf_group_step(acc, nk_f16(nrm + 2u * j), G[j], dot);" in kernels) == fused
    assert boards.soft_float(board) == fused
