"""The SIMD kernel families (templates/kernels/*.c.j2) against the scalar kernels.

* Goldens: every family builds the engine for every golden archive and must reproduce the
  a8 logits bit for bit and the greedy continuations.  test_boards.py already runs each
  board's default family (rpi-zero armv6, rpi-zero2 neon64, rpi5 neon64-dot, ipq40xx
  neon32, the host x86) on the goldens, so here the families run where that does not:
  neon64 on the Cortex-A76 board, armv6 on the Cortex-A7 (ARMv7, Thumb-2, hard float)
  board; the families that exist on one board only (x86, x86-vnni, neon64-dot, neon32) run
  there (the host's two x86 families where its CPU has their instructions).
* Unit exactness: a generated C driver includes the family's needle_kernels.c and compares
  nk_a8_quantize / nk_gemv_a8 / nk_gemm_a8 (the board's GEMM form: a prompt pass's product,
  every token against the scalar GEMV) with nk_a8_quantize_scalar / nk_gemv_a8_scalar (and a family's
  own nk_columns8 and the weighted sum's nk_ws_i8n with what they must equal, and nk_fwht
  with the plain butterfly loop) bit for bit on
  random inputs for every width of an archive holding 2-, 3-, 4-bit and ternary matrices,
  including the awkward values (zeros, subnormals, values below 2^-100, infinities, NaN,
  subnormal and infinite f16 norms, tiny group scales) -- natively for x86 and under QEMU
  on each ARM family's own board (QEMU models ARMv7 NEON's flush-to-zero).
* The instruction-count benchmark is deterministic.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from bench import host as bench
from generator.build import boards, flags
from generator.commands import golden
from host_tests.tiny_firmware import runtime_paths
from generator.commands import synth
from host_tests.scons_run import scons

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "host_tests" / "golden"
ARCHIVES = ["tiny", "small", "tiny-wrap-kv4"]
FAMILIES = ["x86", "x86-vnni", "neon64", "neon64-dot", "neon32", "armv6", "rvv"]
GOLDEN_BOARD = {"x86": "host", "x86-vnni": "host", "neon64": "rpi5", "neon64-dot": "rpi5", "neon32": "router-ipq40xx",
                "armv6": "router-ipq40xx", "rvv": "riscv64-k1"}
# rvv: the random inputs at VLEN 128 (riscv64-k230); test_boards.py runs the goldens at 256 (riscv64-k1)
NATIVE_BOARD = {"x86": "host", "x86-vnni": "host", "neon64": "rpi-zero2", "neon64-dot": "rpi5", "neon32": "router-ipq40xx",
                "armv6": "rpi-zero", "rvv": "riscv64-k230"}


def unavailable(family: str, board_name: str) -> str | None:
    board = boards.load(board_name)
    if family in boards.X86_FAMILIES and family not in boards.native_x86_families():
        need = " ".join(boards.X86_FAMILIES[family])
        return f"the {family} family needs an x86-64 build machine with {need} (/proc/cpuinfo)"
    return boards.missing_tools(board, run=True)


@pytest.fixture(scope="session")
def family_builds(tmp_path_factory):
    """(family, archive) -> engine binary (one scons at a time: they share .sconsign)."""
    root = tmp_path_factory.mktemp("kernels")
    jobs = [(f, a) for f in FAMILIES for a in ARCHIVES if not unavailable(f, GOLDEN_BOARD[f])]

    def one(job):
        fam, name = job
        out = root / fam / name
        scons(f"board={GOLDEN_BOARD[fam]}", f"kernels={fam}", f"archive={GOLDEN / name / 'archive.cact'}",
              f"build={out}")
        return job, out / "needle"

    return dict(map(one, jobs))


@pytest.mark.parametrize("name", ARCHIVES)
@pytest.mark.parametrize("family", FAMILIES)
def test_family_matches_goldens(family_builds, family, name, tmp_path, board_runner):
    why = unavailable(family, GOLDEN_BOARD[family])
    if why:
        pytest.skip(why)
    board = boards.load(GOLDEN_BOARD[family])
    binary = family_builds[family, name]
    gen = (binary.parent / "gen" / "needle_kernels.h").read_text()
    assert f'#define NK_KERNELS      "{family}"' in gen
    meta, logits = golden.load(GOLDEN / name)
    engine = board_runner(board, binary, GOLDEN / name / "archive.cact")
    proc = engine.run(["--tokens", ",".join(map(str, meta["tokens"])), "--logits", "logits.f32"], cwd=tmp_path,
                      timeout=1800)
    assert proc.returncode == 0, proc.stderr
    got = np.fromfile(tmp_path / "logits.f32", dtype="<f4").reshape(logits["a8"].shape)
    assert np.array_equal(got, logits["a8"]), \
        f"{family} {name}: max |Δlogit| {np.abs(got - logits['a8']).max():.3g}"
    greedy = engine.run(["--prompt", meta["prompt"], "--max-new", meta["recipe"]["max_new"], "--ids"], cwd=tmp_path,
                        timeout=1800)
    assert greedy.returncode == 0, greedy.stderr
    assert [int(x) for x in greedy.stdout.strip().split(",") if x] == meta["greedy"]["a8"]


def test_boards_use_their_families():
    """The families test_boards.py runs on the goldens with each board's defaults."""
    assert set(FAMILIES) <= set(boards.families())
    for name, fam in (("rpi-zero", "armv6"), ("rpi-zero2", "neon64"), ("rpi5", "neon64-dot"),
                      ("router-ipq40xx", "neon32")):
        assert boards.load(name)["kernels"] == fam
    for name in ("router-mt7621", "router-ath79"):
        assert boards.load(name)["kernels"] == "scalar"
    for name in ("riscv64-k1", "riscv64-k230"):
        assert boards.load(name)["kernels"] == "rvv"


# ---- unit exactness: family kernels vs the scalar kernels on random inputs --------------

DRIVER = r"""
#include "needle_kernels.c"
#include <stdio.h>
#include <stdlib.h>

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (uint32_t)(rs >> 16); }
static float rndf(void) { return ((float)(rnd() & 0xFFFFFF) / 16777216.0f - 0.5f) * 8.0f; }

static const uint8_t widths[] = { WIDTHS };
static uint8_t packed[64 * NK_MAX_GROUPS * 64], norms[64 * NK_MAX_GROUPS * 2];

static uint16_t rnd_f16(int mode)
{
    switch (mode) {
    case 0: return (uint16_t)(0x3000u + (rnd() & 0x0FFFu) + ((rnd() & 1u) << 15));   /* ordinary */
    case 1: return (uint16_t)(rnd() & 0x83FFu);                                       /* subnormal or zero */
    case 2: return (uint16_t)((rnd() & 3u) == 0 ? 0x7C00u : 0x0400u);                 /* inf or smallest normal */
    default: return (uint16_t)(rnd() & 0xFFFFu);                                      /* anything, NaN included */
    }
}

static float special(int mode)
{
    uint32_t b;
    switch (mode) {
    case 0: return rndf();
    case 1: return 0.0f;
    case 2: b = rnd() & 0x807FFFFFu; return nk_bits_f32(b);                 /* subnormal */
    case 3: b = (rnd() & 0x80FFFFFFu) | (20u << 23); return nk_bits_f32(b); /* ~2^-107 */
    case 4: return rndf() * 1e30f;
    case 5: return (rnd() & 1u) ? INFINITY : -INFINITY;
    default: return NAN;
    }
}

int main(void)
{
    int bad = 0, trials = 0;
    /* nk_gemv_a8 */
    for (int t = 0; t < 3000; t++) {
        uint8_t bits = widths[rnd() % sizeof widths];
        uint32_t ng = 1 + rnd() % NK_MAX_GROUPS, rows = 1 + rnd() % 40, total = rows + rnd() % 5;
        uint32_t gb = nk_group_bytes(bits), row0 = total - rows;
        for (uint32_t i = 0; i < total * ng * gb; i++) packed[i] = (uint8_t)rnd();
        const int extreme = t % 13 == 5;   /* one level and one activation sign throughout: the largest sums */
        if (extreme) memset(packed, (rnd() & 1u) ? 0xFF : 0x00, total * ng * gb);
        const int8_t q_all = (rnd() & 1u) ? 127 : -127;
        int nmode = t % 10 < 7 ? 0 : (int)(rnd() % 4);
        for (uint32_t i = 0; i < total * ng; i++) {
            uint16_t h = rnd_f16(rnd() % 8 == 0 ? nmode : 0);
            norms[2 * i] = (uint8_t)h;
            norms[2 * i + 1] = (uint8_t)(h >> 8);
        }
        int8_t q[NK_MAX_GROUPS * NK_GROUP];
        float gs[NK_MAX_GROUPS];
        for (uint32_t i = 0; i < ng * NK_GROUP; i++) {
            int v = (int)(rnd() % 255u) - 127;
            q[i] = (int8_t)(extreme ? q_all : t % 7 == 0 ? (v < 0 ? -127 : 127) : t % 11 == 0 ? 0 : v);
        }
        for (uint32_t j = 0; j < ng; j++) {
            uint32_t k = rnd() % 16;
            gs[j] = k == 0 ? 0.0f : k == 1 ? 1e-30f * (float)(1 + rnd() % 100) : k == 2 ? 1e30f
                  : k == 3 ? nk_bits_f32(rnd() & 0x007FFFFFu) : rndf() * 0.01f;
        }
        nk_cq w = { packed, norms, ng * gb, (uint16_t)ng, bits };
        float y1[64], y2[64];
        nk_gemv_a8(y1, &w, row0, rows, q, gs);
        nk_gemv_a8_scalar(y2, &w, row0, rows, q, gs);
        trials++;
        if (memcmp(y1, y2, rows * sizeof(float))) {
            for (uint32_t r = 0; r < rows; r++)
                if (nk_f32_bits(y1[r]) != nk_f32_bits(y2[r])) {
                    if (bad < 10)
                        printf("gemv bits=%u ng=%u rows=%u row %u: %08x vs scalar %08x\n", bits, ng, rows, r,
                               (unsigned)nk_f32_bits(y1[r]), (unsigned)nk_f32_bits(y2[r]));
                    break;
                }
            bad++;
        }
    }
    int gemm = 0;
#if NK_MAX_BATCH > 1
    /* nk_gemm_a8 (a prompt pass's product, the board's GEMM form): every token of a batch of
     * 1..NK_MAX_BATCH against the scalar GEMV, the awkward norms and scales included */
    for (int t = 0; t < 400; t++, gemm++) {
        static int8_t qb[NK_MAX_BATCH][NK_MAX_GROUPS * NK_GROUP];
        static float gsb[NK_MAX_BATCH][NK_MAX_GROUPS], yb1[NK_MAX_BATCH][48], yb2[48];
        uint8_t bits = widths[rnd() % sizeof widths];
        uint32_t ng = 1 + rnd() % NK_MAX_GROUPS, rows = 1 + rnd() % 40, total = rows + rnd() % 5;
        uint32_t gb = nk_group_bytes(bits), row0 = total - rows, n = 1 + rnd() % NK_MAX_BATCH;
        if (t % 4 == 0) n = NK_MAX_BATCH;
        for (uint32_t i = 0; i < total * ng * gb; i++) packed[i] = (uint8_t)rnd();
        int nmode = t % 10 < 7 ? 0 : (int)(rnd() % 4);
        for (uint32_t i = 0; i < total * ng; i++) {
            uint16_t h = rnd_f16(rnd() % 8 == 0 ? nmode : 0);
            norms[2 * i] = (uint8_t)h;
            norms[2 * i + 1] = (uint8_t)(h >> 8);
        }
        nk_a8_io io[NK_MAX_BATCH];
        for (uint32_t c = 0; c < n; c++) {
            for (uint32_t i = 0; i < ng * NK_GROUP; i++) {
                int v = (int)(rnd() % 255u) - 127;
                qb[c][i] = (int8_t)(t % 13 == 5 ? 127 : t % 11 == 0 ? 0 : v);
            }
            for (uint32_t j = 0; j < ng; j++) {
                uint32_t k = rnd() % 16;
                gsb[c][j] = k == 0 ? 0.0f : k == 1 ? 1e-30f : k == 2 ? 1e30f : rndf() * 0.01f;
            }
            io[c].y = yb1[c];
            io[c].q = qb[c];
            io[c].gs = gsb[c];
        }
        nk_cq w = { packed, norms, ng * gb, (uint16_t)ng, bits };
        nk_gemm_a8(&w, row0, rows, io, n);
        for (uint32_t c = 0; c < n; c++) {
            nk_gemv_a8_scalar(yb2, &w, row0, rows, qb[c], gsb[c]);
            if (memcmp(yb1[c], yb2, rows * sizeof(float))) {
                if (bad < 10) printf("gemm bits=%u ng=%u rows=%u n=%u: token %u differs\n", bits, ng, rows, n, c);
                bad++;
                break;
            }
        }
    }
#endif
    /* nk_a8_quantize */
    for (int t = 0; t < 3000; t++) {
        uint32_t in = 1 + rnd() % (NK_MAX_GROUPS * NK_GROUP), in_pad = (in + NK_GROUP - 1) / NK_GROUP * NK_GROUP;
        float x[NK_MAX_GROUPS * NK_GROUP];
        int mode = t % 4 == 0 ? (int)(rnd() % 7) : 0;
        float scale = t % 5 == 0 ? nk_bits_f32((1u + rnd() % 253u) << 23) : 1.0f;
        for (uint32_t i = 0; i < in; i++) {
            x[i] = rndf() * scale;
            if (t % 13 == 0) x[i] = (float)((int)(rnd() % 9) - 4);             /* exact ties */
            if (mode && rnd() % 16 == 0) x[i] = special(mode);
            if (t % 17 == 0 && rnd() % 2) x[i] = 0.0f;
        }
        if (t % 29 == 0) for (uint32_t i = 0; i < in; i++) x[i] = 0.0f;
        int8_t q1[NK_MAX_GROUPS * NK_GROUP], q2[NK_MAX_GROUPS * NK_GROUP];
        float g1[NK_MAX_GROUPS], g2[NK_MAX_GROUPS];
        nk_a8_quantize(x, in, in_pad, q1, g1);
        nk_a8_quantize_scalar(x, in, in_pad, q2, g2);
        trials++;
        if (memcmp(q1, q2, in_pad) || memcmp(g1, g2, in_pad / NK_GROUP * sizeof(float))) {
            if (bad < 10) printf("quantize in=%u mode=%d scale=%g: differs\n", in, mode, (double)scale);
            bad++;
        }
    }
    int own = 0;   /* the family's own versions of the generic helpers */
#ifdef NK_HAVE_COLUMNS8
    /* nk_columns8: eight rows as the columns of a block, any bits moved unchanged */
    for (int t = 0; t < 200; t++, own++) {
        static float rows[8 * 80], cols[80 * 8];
        uint32_t n = 1 + rnd() % 80;
        for (uint32_t i = 0; i < 8 * n; i++) rows[i] = nk_bits_f32(rnd() ^ (rnd() << 16));
        nk_columns8(cols, rows, n);
        for (uint32_t k = 0; k < n * 8; k++)
            if (nk_f32_bits(cols[k]) != nk_f32_bits(rows[(k % 8) * n + k / 8])) {
                if (bad < 10) printf("columns8 n=%u: value %u differs\n", n, k);
                bad++;
                break;
            }
    }
#endif
    /* nk_fwht against the plain butterfly loop, every length 2..512, the awkward values too */
    for (int t = 0; t < 90; t++) {
        static float f0[512], f1[512];
        const uint32_t n = 2u << (t % 9), mode = (uint32_t)t / 9u % 7u;
        for (uint32_t i = 0; i < n; i++) f0[i] = f1[i] = rnd() % 4 ? rndf() : special((int)mode);
        for (uint32_t h = 1; h < n; h *= 2)
            for (uint32_t i = 0; i < n; i += 2 * h)
                for (uint32_t j = i; j < i + h; j++) {
                    const float a = f0[j], b = f0[j + h];
                    f0[j] = a + b;
                    f0[j + h] = a - b;
                }
        nk_fwht(f1, n);
        trials++;
        if (memcmp(f0, f1, n * sizeof(float))) {
            if (bad < 10) printf("fwht n=%u mode=%u: differs\n", n, mode);
            bad++;
        }
    }
#ifdef NK_DOT_I8N_OWN
    /* nk_dot_i8n: the family's own integer dot against the plain loop, lengths 1..72 (every
     * remainder of its four-byte words), unaligned rows, extreme codes */
    for (int t = 0; t < 200; t++, own++) {
        static int8_t da[80], db[80];
        const uint32_t n = 1 + (uint32_t)t % 72u, oa = rnd() % 4u, ob = rnd() % 4u;
        for (uint32_t i = 0; i < 80; i++) {
            da[i] = (int8_t)(t % 5 == 0 ? ((i & 1u) ? 127 : -127) : (int)(rnd() % 255u) - 127);
            db[i] = (int8_t)(t % 7 == 0 ? -127 : (int)(rnd() % 255u) - 127);
        }
        int32_t d = 0;
        for (uint32_t c = 0; c < n; c++) d += (int32_t)da[oa + c] * (int32_t)db[ob + c];
        if (nk_dot_i8n(da + oa, db + ob, n) != d) {
            if (bad < 10) printf("dot_i8n n=%u offsets=%u,%u: differs\n", n, oa, ob);
            bad++;
        }
    }
#endif
#ifdef NK_WS_RUNS
    /* nk_ws_i8n: a run of the weighted sum against the plain loop (exact int32 sums): lengths
     * 1..72 (every remainder of the 32-, 8- and 4-column blocks), unaligned rows, runs of
     * 1..128 positions, weights up to 2^16, extreme codes, lanes past n left alone */
    for (int t = 0; t < 300; t++, own++) {
        static int8_t codes[128][80];
        static int32_t u[128], a1[84], a2[84];
        static const int8_t *row[128];
        const uint32_t n = 1 + (uint32_t)t % 72u, count = 1 + rnd() % 128u, off = rnd() % 4u;
        for (uint32_t k = 0; k < 128; k++)
            for (uint32_t i = 0; i < 80; i++)
                codes[k][i] = (int8_t)(t % 5 == 0 ? ((k & 1u) ? 127 : -127) : (int)(rnd() % 255u) - 127);
        for (uint32_t k = 0; k < count; k++) {
            u[k] = k < 2 || t % 5 == 0 ? 65536 : (int32_t)(rnd() % 65537u);
            row[k] = codes[(k * 7u + (uint32_t)t) % 128u] + off;
        }
        for (uint32_t c = 0; c < 84; c++) a1[c] = a2[c] = (int32_t)rnd();
        for (uint32_t c = 0; c < n; c++) {
            a2[c] = 0;
            for (uint32_t k = 0; k < count; k++) a2[c] += u[k] * (int32_t)row[k][c];
        }
        nk_ws_i8n(a1, u, row, count, n);
        if (memcmp(a1, a2, sizeof a1)) {
            if (bad < 10) printf("ws_i8n n=%u count=%u offset=%u: differs\n", n, count, off);
            bad++;
        }
    }
#endif
    printf("{\"kernels\": \"%s\", \"trials\": %d, \"own\": %d, \"gemm\": %d, \"mismatches\": %d}\n", NK_KERNELS, trials, own, gemm, bad);
    return bad != 0;
}
"""

UNIT_BITMAP = "embedding=4,mhc=4,attn.v_proj=3,attn.gate_proj=1.58,default=2"


@pytest.fixture(scope="session")
def unit_gen(tmp_path_factory):
    """An archive with 2-, 3-, 4-bit and ternary matrices (and 3 groups per mHC row), and a CQ
    KV cache: decode attention transposes dequantised keys there (int8 KV is scored on its
    codes, docs/numerics.md §6)."""
    root = tmp_path_factory.mktemp("kernel-unit")
    archive = root / "widths.cact"
    archive.write_bytes(synth.synthesize("small", 1, bitmap=UNIT_BITMAP, kv_bits=4))   # CQ KV: nk_columns8
    return root, archive


@pytest.mark.parametrize("family,board_name", [*((f, NATIVE_BOARD[f]) for f in FAMILIES), ("scalar", "host"),
                                               ("scalar", "router-mt7621"), ("scalar", "router-ath79")])
def test_family_kernels_equal_scalar_on_random_inputs(unit_gen, family, board_name, tmp_path, board_runner):
    """scalar: its per-shape nk_gemv_a8 instances against the generic nk_gemv_a8_scalar, on the
    host and on both MIPS routers (their 4-bit pair dots accumulate in HI/LO in assembly, and
    their butterflies are the soft-float runtime's needle_sf_butterfly)."""
    why = unavailable(family, board_name)
    if why:
        pytest.skip(why)
    root, archive = unit_gen
    board = boards.load(board_name)
    gen = tmp_path / "gen"
    ctx = boards.generate_engine(board, str(archive), str(gen), incbin_path=str(archive), kernels=family)
    widths = sorted(cb.bits for cb in ctx.model.codebooks)
    assert widths == [2, 3, 4, 5]
    (tmp_path / "driver.c").write_text(DRIVER.replace("WIDTHS", ", ".join(map(str, widths))))
    exe = tmp_path / "driver"
    cc = boards.compiler_argv(board)
    runtime = runtime_paths(board)   # the soft-float routines on the routers
    proc = subprocess.run([*cc, *flags.compile_flags(board, family), f"-I{gen}", str(tmp_path / "driver.c"),
                           *runtime, *flags.link_flags(board), "-o", str(exe), "-lm"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out = board_runner(board, exe).run([], cwd=tmp_path, timeout=1800)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    src = (gen / "needle_kernels.c").read_text()
    runs = "#define NK_WS_RUNS 1" in (gen / "needle_kernels.h").read_text()
    dot = "#define NK_DOT_I8N_OWN 1" in (gen / "needle_kernels.h").read_text()
    own = 200 * ("#define NK_HAVE_COLUMNS8\n" in src) + 300 * runs + 200 * dot
    if family == "armv6":
        assert dot, "armv6's own nk_dot_i8n went untested"
    if family in boards.X86_FAMILIES:
        assert own == 500, "the x86 families' nk_columns8 or nk_ws_i8n went untested"
    batch = int(re.search(r"#define NK_MAX_BATCH\s+(\d+)u", (gen / "needle_kernels.h").read_text()).group(1))
    assert batch > 1 or board_name.startswith("watch"), "no batched product to check"
    assert result == {"kernels": family, "trials": 6090, "own": own, "gemm": 400 if batch > 1 else 0,
                      "mismatches": 0}, out.stdout


def test_per_shape_instances_follow_the_archive(tmp_path):
    """Issue 13 item 5: one nk_gemv_a8 instance per distinct (width, groups) of the archive's
    A8 products in the scalar family, the one-group ones only in x86 and x86-vnni (where
    they pay)."""
    archive = GOLDEN / "tiny-wrap-kv4" / "archive.cact"
    host = boards.load("host")
    want = {"scalar": {"2b_1g", "3b_1g", "4b_1g", "4b_2g", "5b_1g"}, "x86": {"2b_1g", "4b_1g", "5b_1g"},
            "x86-vnni": {"2b_1g", "4b_1g", "5b_1g"}}
    for family, suffixes in want.items():
        gen = tmp_path / family
        ctx = boards.generate_engine(host, str(archive), str(gen), incbin_path=str(archive), kernels=family)
        assert {s.suffix for s in ctx.model.a8_shapes} == want["scalar"]
        src = (gen / "needle_kernels.c").read_text()
        assert set(re.findall(r"^static void nk_gemv_a8_(\d+b_\d+g)\(", src, re.M)) == suffixes


# ---- the instruction-count benchmark ----------------------------------------------------

def test_instruction_counts_are_deterministic(family_builds, board_runner):
    fam = "neon64-dot"
    if (fam, "tiny") not in family_builds:
        pytest.skip(unavailable(fam, GOLDEN_BOARD[fam]))
    board = boards.load(GOLDEN_BOARD[fam])
    engine = board_runner(board, family_builds[fam, "tiny"])
    counts = [bench.count_instructions(engine, n) for n in (1, 2, 1, 2)]
    assert counts[0] == counts[2] and counts[1] == counts[3] and counts[1] > counts[0]


@pytest.mark.parametrize("bitmap", ["embedding=4,default=4", "embedding=4,default=2"],
                         ids=["cq4-only", "cq2-only"])
@pytest.mark.parametrize("board_name", ["host", "router-ipq40xx"])
def test_one_width_archives_build_on_clang_boards(board_name, bitmap, tmp_path):
    """A family's per-width helpers are emitted only for the widths the archive has: clang
    (the host, and zig on the ARMv7 routers) rejects an unused static function under -Werror,
    and the bundled demo archives are CQ4 only (`scons board=router-ipq40xx` once failed on
    them with 'unused function nk_neon32_dot2')."""
    board = boards.load(board_name)
    why = boards.missing_tools(board)
    if why:
        pytest.skip(why)
    archive = tmp_path / "one-width.cact"
    archive.write_bytes(synth.synthesize("tiny", 1, bitmap=bitmap))
    scons(f"board={board_name}", f"archive={archive}", f"build={tmp_path / 'build'}")


# ---- the int8 KV cache's store: f16 scales (docs/numerics.md §5.1, numerics version 4) ---

KV_DRIVER = r"""
#include "needle_kernels.c"
#include <stdio.h>

/* kv_in.bin: count, then per vector its group and 64 floats; kv_out.bin: per vector the
 * 64 codes and the (64 / group, rounded up) f16 scales nk_kv_store writes */
int main(void)
{
    FILE *in = fopen("kv_in.bin", "rb"), *out = fopen("kv_out.bin", "wb");
    uint32_t count, group;
    float x[64];
    int8_t code[64];
    uint16_t scale[64];
    if (!in || !out || fread(&count, 4, 1, in) != 1) return 2;
    for (uint32_t v = 0; v < count; v++) {
        if (fread(&group, 4, 1, in) != 1 || fread(x, 4, 64, in) != 64) return 3;
        nk_kv_store(code, scale, x, 64, group);
        fwrite(code, 1, 64, out);
        fwrite(scale, 2, (64 + group - 1) / group, out);
    }
    fclose(out);
    printf("%u\n", (unsigned)count);
    return 0;
}
"""


def _kv_vectors() -> list[tuple[int, np.ndarray]]:
    """Head vectors whose scales land everywhere the f16 rounding has a case: ordinary, exact
    ties (to even, in the normal and the subnormal range), subnormal, at or below 2^-25 (+0),
    at and past 65504 (saturated), all zero (an infinite value has no agreed code, scale aside); groups of 32 (Needle 2), 48 and 64
    (Needle 3's one group per head)."""
    rng = np.random.default_rng(46)
    amaxes = [127 * (1 + 2.0 ** -11), 127 * (1 + 3 * 2.0 ** -11), 127 * 3 * 2.0 ** -25, 127 * 2.0 ** -25,
              127 * 2.0 ** -20, 127 * 5 * 2.0 ** -24, 1e-3, 0.5, 7.0, 127 * 65504.0, 127 * 65519.0,
              127 * 65520.0, 1e30, 0.0]
    out = []
    for i in range(300):
        group = (32, 48, 64)[i % 3]
        x = rng.normal(size=64).astype(np.float32) * np.float32(10.0 ** rng.uniform(-6, 2))
        if i < 3 * len(amaxes):
            a = np.float32(amaxes[i // 3])
            x = (x / np.float32(np.abs(x).max()) * np.float32(min(a, 1.0))).astype(np.float32) if a else x * 0
            x[0::group] = a                     # every group's largest |value| is exactly a
        out.append((group, x.astype(np.float32)))
    return out


def test_kv_scale16_rounds_to_nearest_even_and_saturates():
    """The rule by hand: ties go to the even f16, 2^-25 (halfway to the least subnormal) to +0,
    3 * 2^-25 to 2^-23, and from 65520 (where f16 rounding overflows) up, infinity included,
    the scale is 65504."""
    from generator.model import numerics as nm
    got = nm.kv_scale16(np.array([1 + 2 ** -11, 1 + 3 * 2 ** -11, 2 ** -25, 3 * 2 ** -25, 2 ** -20,
                                  65519.0, 65520.0, 1e30, np.inf, 0.0], np.float32))
    assert got.tolist() == [1.0, 1 + 2 ** -9, 0.0, 2 ** -23, 2 ** -20, 65504.0, 65504.0, 65504.0, 65504.0, 0.0]


@pytest.mark.parametrize("board_name", ["host", "router-mt7621"])
def test_kv_store_is_the_references(board_name, tmp_path, board_runner):   # one store for every family
    """nk_kv_store's codes and f16 scales equal the reference's kv_int8_codes bit for bit on
    the host and on a soft-float MIPS router (nk_f32_to_f16 in integer operations)."""
    from generator.model import numerics as nm
    board = boards.load(board_name)
    why = boards.missing_tools(board, run=True)
    if why:
        pytest.skip(why)
    gen = tmp_path / "gen"
    archive = GOLDEN / "tiny" / "archive.cact"
    boards.generate_engine(board, str(archive), str(gen), incbin_path=str(archive), kernels="scalar")
    (tmp_path / "driver.c").write_text(KV_DRIVER)
    exe = tmp_path / "driver"
    proc = subprocess.run([*boards.compiler_argv(board), *flags.compile_flags(board, "scalar"), f"-I{gen}",
                           str(tmp_path / "driver.c"), *runtime_paths(board), *flags.link_flags(board),
                           "-o", str(exe), "-lm"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    vectors = _kv_vectors()
    with open(tmp_path / "kv_in.bin", "wb") as f:
        f.write(np.uint32(len(vectors)).tobytes())
        for group, x in vectors:
            f.write(np.uint32(group).tobytes() + x.tobytes())
    out = board_runner(board, exe).run([], cwd=tmp_path, timeout=600)
    assert out.stdout.strip() == str(len(vectors))
    data, at, saturated, zero_scale = (tmp_path / "kv_out.bin").read_bytes(), 0, 0, 0
    for group, x in vectors:
        codes, scales = nm.kv_int8_codes(x, group)
        n = -(-64 // group)
        assert np.frombuffer(data, np.int8, 64, at).tolist() == codes.tolist(), (group, x)
        c_scales = np.frombuffer(data, np.uint16, n, at + 64)
        assert c_scales.tolist() == scales.astype(np.float16).view(np.uint16).tolist(), (group, x)
        saturated += int((c_scales == 0x7BFF).sum())
        zero_scale += int((c_scales == 0).sum())
        at += 64 + 2 * n
    assert at == len(data) and saturated >= 4 and zero_scale >= 2
