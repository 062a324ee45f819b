"""Cortex-M benchmark: instructions per decoded token, a kernel family against scalar.

`scons board=watch-mX archive=PATH bench=1` builds the board's engine and a scalar twin
(`<build>/scalar`), then runs `python -m generator.bench_mcu`, which runs both images'
`--bench N` under `qemu-system-arm -icount shift=0`: QEMU then advances virtual time by
exactly 1 ns per guest instruction, and the firmware (firmware/baremetal/bench_mcu.c) reads
SysTick, clocked by the machine's CPU clock (`emulator.systick_hz` in the board file).  A
tick is therefore 1e9 / systick_hz instructions, and the counts are deterministic: the
same image gives the same count on every run and every host.

It prints a table and, as the last line, one JSON object: instructions per decoded token
(and prefill token) for both builds, MACs per token (every A8 GEMV of a step, padded to the
128-groups the kernels really multiply), MACs per instruction, and the engine's `.text`
(code and read-only tables of the generated engine objects, from the link map).

`kernel_driver()` builds the unit-level driver used by host_tests/test_kernels_mcu.py and by
the benchmark (unless `--no-gemv`): random matrices of every width and shape, the family's
nk_gemv_a8 / nk_a8_quantize against the scalar ones bit for bit (the benchmark fails on a
mismatch), and the instructions of one 256 x 512 GEMV per width and of one quantisation.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from generator.build import boards
from generator.errors import CactError

ROOT = Path(__file__).resolve().parent.parent
ICOUNT = ["-icount", "shift=0"]
ENGINE_OBJECTS = ("needle_model.o", "needle_kernels.o", "needle_tokenizer.o")


def emulator_command(board: dict, elf: str, args: list[str], image: str | None = None) -> list[str]:
    """The board's run command with deterministic instruction counting (-icount shift=0)."""
    cmd = boards.run_command(board, elf, [str(a) for a in args], image)
    return cmd[:1] + ICOUNT + cmd[1:]


def ns_per_tick(board: dict) -> float:
    hz = board["emulator"].get("systick_hz")
    if not isinstance(hz, int) or hz <= 0:
        raise CactError(f"board {board['name']}: emulator.systick_hz (QEMU's SysTick CPU clock) is "
                        "needed to turn SysTick ticks into instructions")
    return 1e9 / hz


def run_firmware(board: dict, build_dir: Path, args: list[str], timeout: int = 3600) -> str:
    image = build_dir / "archive.bin"
    cmd = emulator_command(board, str(build_dir / "needle.elf"), args, str(image) if image.exists() else None)
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except OSError as exc:
        raise CactError(f"cannot run {cmd[0]}: {exc.strerror}") from None
    if out.returncode:
        raise CactError(f"{build_dir / 'needle.elf'} {' '.join(args)} failed ({out.returncode}): "
                        f"{out.stderr.strip()}")
    return out.stdout


def last_json(text: str) -> dict:
    lines = [ln for ln in text.strip().splitlines() if ln.startswith("{")]
    if not lines:
        raise CactError(f"no JSON line in the firmware output: {text[-300:]!r}")
    return json.loads(lines[-1])


def run_bench(board: dict, build_dir: Path, tokens: int) -> dict:
    """One `--bench N` run: ticks converted to instructions."""
    raw = last_json(run_firmware(board, build_dir, ["--bench", str(tokens)]))
    k = ns_per_tick(board)
    n = raw["tokens"]
    return dict(raw, prefill_instructions_per_token=round(raw["prefill_ticks"] * k / n),
                instructions_per_token=round(raw["decode_ticks"] * k / n))


_INPUT = re.compile(r"^\s*(\S+)?\s+0x([0-9a-fA-F]+)\s+0x([0-9a-fA-F]+)\s+(\S+)\s*$")


def text_bytes(map_path: Path) -> dict:
    """Bytes of the image's .text output section (code + read-only data) per object file."""
    per: dict[str, int] = {}
    inside = False
    pending = None
    for line in map_path.read_text().splitlines():
        if line.startswith(".text"):
            inside = True
            continue
        if inside and line and not line[0].isspace():
            break                                  # the next output section
        if not inside:
            continue
        m = _INPUT.match(line)
        if m and (m.group(1) or pending):
            size, obj = int(m.group(3), 16), os.path.basename(m.group(4))
            if obj.endswith(".o") or ".a(" in obj or obj.endswith(")"):
                per[obj] = per.get(obj, 0) + size
            pending = None
        else:
            s = line.strip()
            pending = s if s.startswith(".") and " " not in s else None
    return per


def engine_text(build_dir: Path) -> dict:
    per = text_bytes(build_dir / "needle.map")
    return {"engine_text_bytes": sum(per.get(o, 0) for o in ENGINE_OBJECTS),
            "kernels_text_bytes": per.get("needle_kernels.o", 0),
            "image_text_bytes": sum(per.values())}


def compare(board: dict, fast_dir: Path, scalar_dir: Path, tokens: int) -> dict:
    fast = run_bench(board, fast_dir, tokens)
    slow = run_bench(board, scalar_dir, tokens)
    macs = fast["macs_per_token"]
    res = {
        "board": board["name"], "kernels": fast["kernels"], "tokens": fast["tokens"],
        "instructions_per_token": fast["instructions_per_token"],
        "instructions_per_token_scalar": slow["instructions_per_token"],
        "prefill_instructions_per_token": fast["prefill_instructions_per_token"],
        "prefill_instructions_per_token_scalar": slow["prefill_instructions_per_token"],
        "macs_per_token": macs,
        "macs_per_instruction": round(macs / fast["instructions_per_token"], 3),
        "macs_per_instruction_scalar": round(macs / slow["instructions_per_token"], 3),
        "speedup": round(slow["instructions_per_token"] / fast["instructions_per_token"], 2),
        "bytes_per_token": fast["bytes_per_token"],
    }
    et, es = engine_text(fast_dir), engine_text(scalar_dir)
    res.update(et)
    res["engine_text_bytes_scalar"] = es["engine_text_bytes"]
    return res


def print_report(r: dict) -> None:
    print(f"{r['board']}: {r['tokens']}-token prefill + {r['tokens']}-token decode under "
          f"qemu -icount shift=0 (1 instruction = 1 ns)")
    print(f"{'':30s} {r['kernels']:>14s} {'scalar':>14s} {'ratio':>7s}")
    print(f"{'instructions / decoded token':30s} {r['instructions_per_token']:14,d} "
          f"{r['instructions_per_token_scalar']:14,d} {r['speedup']:7.2f}")
    print(f"{'instructions / prefill token':30s} {r['prefill_instructions_per_token']:14,d} "
          f"{r['prefill_instructions_per_token_scalar']:14,d}")
    print(f"{'MACs / instruction':30s} {r['macs_per_instruction']:14.3f} {r['macs_per_instruction_scalar']:14.3f}")
    print(f"MACs per token {r['macs_per_token']:,}; engine .text {r['engine_text_bytes']:,} bytes "
          f"(scalar {r['engine_text_bytes_scalar']:,}; kernels {r['kernels_text_bytes']:,}; "
          f"whole image {r['image_text_bytes']:,})")
    if "gemv" in r:
        print(f"kernel driver: {r['kernel_check']['cases']} random cases bit-identical to scalar; "
              f"one {r['gemv'][0]['rows']} x {r['gemv'][0]['cols']} GEMV per width:")
        for g in r["gemv"]:
            print(f"  {g['kind']:8s} {g['macs_per_instruction']:6.2f} MACs/instruction "
                  f"({g['instructions']:,} instructions; scalar {g['macs_per_instruction_scalar']:.2f})")
        qz = r["quantize"]
        print(f"  quantise {qz['in']} values: {qz['instructions']:,} instructions (scalar {qz['instructions_scalar']:,})")


# ---- the unit-level kernel driver ------------------------------------------------------
# An archive with every width (binary, 2, 3, 4 bits, ternary) provides the codebooks.
DRIVER_BITMAP = "embedding=4,mhc=3,attn.gate_proj=1.58,default=2"
GEMV_SHAPES = [(1, 1), (2, 1), (3, 2), (4, 1), (5, 3), (7, 2), (8, 4), (9, 1), (13, 5)]   # (rows, groups)
QUANT_LENGTHS = [1, 17, 64, 96, 128, 200, 256, 384, 640]
DRIVER_MAX_GROUPS = 5
BENCH_SHAPE = (256, 4)          # rows, groups of the per-width GEMV timing (256 x 512)

DRIVER_C = r"""
/* Unit-level driver of the A8 kernels: the family against the scalar reference, bit for bit,
 * on random inputs of every width and shape; then per-width GEMV instruction counts. */
#include "needle_kernels.c"
#include "hal.h"

#define SYST_CSR (*(volatile uint32_t *)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t *)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t *)0xE000E018u)

static uint32_t rng = 0x9E3779B9u;
static uint32_t rnd(void) { rng ^= rng << 13; rng ^= rng >> 17; rng ^= rng << 5; return rng; }

#define MAXG 5u
_Static_assert(MAXG <= NK_MAX_GROUPS, "the driver's widest activation");
#define MAXR 256u
static uint8_t packed[MAXR * MAXG * 64u + 64u];     /* + slack: 3-bit gathers read 1 byte past */
static uint8_t norms[MAXR * MAXG * 2u + 16u];
static int8_t q[MAXG * NK_GROUP];
static float gs[MAXG], yr[MAXR], yf[MAXR], x[MAXG * NK_GROUP];
static int8_t q0[MAXG * NK_GROUP], q1[MAXG * NK_GROUP];
static float gs0[MAXG], gs1[MAXG];
static uint32_t failures;

static uint32_t odd_norms;          /* 1: also zero, subnormal, negative, infinite norms */
static uint16_t rnd_f16(void)      /* f16 norms: positive normal, moderate, or odd ones */
{
    uint32_t r = rnd(), sign = (r & 1u) << 15, kind = (r >> 1) % 16u, man = (r >> 8) & 0x3FFu;
    if (!odd_norms) kind = 2u;
    if (kind == 0u) return (uint16_t)(sign | man);                   /* subnormal or zero */
    if (kind == 15u) return (uint16_t)(sign | 0x7C00u);             /* infinite */
    if (kind == 14u) return (uint16_t)(0x7C01u | man);               /* NaN */
    if (kind == 1u) return (uint16_t)(sign | ((1u + (r >> 20) % 30u) << 10) | man);   /* any normal */
    return (uint16_t)(((8u + (r >> 20) % 8u) << 10) | man);          /* 2^-7 .. 2^0, positive */
}

static float rnd_float(uint32_t kind)
{
    uint32_t r = rnd();
    float v = (float)(int32_t)(r % 20001u) / 1000.0f - 10.0f;
    switch (kind) {
    case 1: return v * 1e-30f;                                       /* tiny: scalar fallback */
    case 2: return nk_bits_f32(r & 0x807FFFFFu);                     /* subnormal */
    case 3: return (r & 7u) ? 0.0f : v;                              /* sparse */
    case 4: return v * 1e30f;                                        /* huge */
    case 5: return (float)(int32_t)(r % 5u) - 2.0f;                  /* ties for rne */
    case 8: return (r % 61u) == 0u ? nk_bits_f32(0x7FC00001u | (r & 0x80000000u))
                   : (r % 67u) == 0u ? nk_bits_f32(0x7F800000u | (r & 0x80000000u)) : v;   /* NaN, inf */
    default: return v;
    }
}

static void fill_gemv(uint32_t bits, uint32_t rows, uint32_t ng, uint32_t row_bytes)
{
    for (uint32_t i = 0; i < rows * row_bytes + 64u; i++) packed[i] = (uint8_t)rnd();
    for (uint32_t i = 0; i < rows * ng; i++) { uint16_t h = rnd_f16(); norms[2 * i] = (uint8_t)h; norms[2 * i + 1] = (uint8_t)(h >> 8); }
    for (uint32_t i = 0; i < ng * NK_GROUP; i++) {
        int32_t v = (int32_t)(rnd() % 255u) - 127;
        q[i] = (int8_t)((rnd() & 15u) ? v : (rnd() & 1u) ? 127 : -127);
    }
    for (uint32_t j = 0; j < ng; j++) gs[j] = (j == 1u) ? 0.0f : (float)(rnd() % 100000u + 1u) * 1e-7f;
    if (odd_norms && (rnd() & 1u)) gs[0] = 1e-25f;                  /* a tiny activation scale */
    (void)bits;
}

static void check_gemv(uint32_t bits, uint32_t rows, uint32_t ng, uint32_t row0)
{
    uint32_t w = bits == 5u ? 2u : bits, rb = ng * NK_GROUP * w / 8u;
    fill_gemv(bits, rows + row0, ng, rb);
    nk_cq m = { packed, norms, rb, (uint16_t)ng, (uint8_t)bits };
    nk_gemv_a8_scalar(yr, &m, row0, rows, q, gs);
    nk_gemv_a8(yf, &m, row0, rows, q, gs);
    if (memcmp(yr, yf, rows * sizeof(float))) {
        failures++;
        for (uint32_t r = 0; r < rows; r++)
            if (nk_f32_bits(yr[r]) != nk_f32_bits(yf[r])) {
                hal_printf("MISMATCH gemv bits %u rows %u ng %u row0 %u: row %u scalar %x family %x\n",
                           bits, rows, ng, row0, r, nk_f32_bits(yr[r]), nk_f32_bits(yf[r]));
                break;
            }
    }
}

static void check_quantize(uint32_t in, uint32_t kind)
{
    uint32_t in_pad = (in + NK_GROUP - 1u) / NK_GROUP * NK_GROUP;
    for (uint32_t i = 0; i < in; i++) x[i] = rnd_float(i % 97u == 0u && kind == 6u ? (rnd() % 5u) : kind);
    if (kind == 7u) for (uint32_t i = 0; i < in; i++) x[i] = 0.0f;
    memset(q0, 0x55, sizeof q0); memset(q1, 0x55, sizeof q1);
    nk_a8_quantize_scalar(x, in, in_pad, q0, gs0);
    nk_a8_quantize(x, in, in_pad, q1, gs1);
    if (memcmp(q0, q1, in_pad) || memcmp(gs0, gs1, in_pad / NK_GROUP * sizeof(float))) {
        failures++;
        hal_printf("MISMATCH quantize in %u kind %u\n", in, kind);
    }
}

static uint64_t now(void) { return (uint64_t)(0xFFFFFFu - SYST_CVR); }

int needle_cli(int argc, char **argv)
{
    (void)argc; (void)argv;
    static const uint8_t widths[] = { @WIDTHS@ };
    static const uint32_t shapes[][2] = { @SHAPES@ };
    static const uint32_t lengths[] = { @LENGTHS@ };
    uint32_t cases = 0;
    for (uint32_t w = 0; w < sizeof widths; w++)
        for (uint32_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (uint32_t rep = 0; rep < 4u; rep++, cases++) {
                odd_norms = rep & 1u;                /* the fast path, then the fallback */
                check_gemv(widths[w], shapes[s][0], shapes[s][1], rep >= 2u ? 3u : 0u);
            }
    odd_norms = 0;
    for (uint32_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++)
        for (uint32_t kind = 0; kind < 9u; kind++, cases++) check_quantize(lengths[l], kind);
    hal_printf("checked %u cases, %u mismatches\n", cases, failures);

    /* timing: one GEMV of each width, then one quantisation (SysTick, processor clock) */
    SYST_RVR = 0xFFFFFFu; SYST_CVR = 0; SYST_CSR = 5u;
    hal_printf("{\"kernels\": \"%s\", \"mismatches\": %u, \"cases\": %u, \"gemv\": [", NK_KERNELS, failures, cases);
    const uint32_t rows = @BROWS@u, ng = @BGROUPS@u;
    for (uint32_t i = 0; i < sizeof widths; i++) {
        uint32_t bits = widths[i], wd = bits == 5u ? 2u : bits, rb = ng * NK_GROUP * wd / 8u;
        fill_gemv(bits, rows, ng, rb);
        nk_cq m = { packed, norms, rb, (uint16_t)ng, (uint8_t)bits };
        uint64_t a = now();
        nk_gemv_a8(yf, &m, 0, rows, q, gs);
        uint64_t b = now();
        nk_gemv_a8_scalar(yr, &m, 0, rows, q, gs);
        uint64_t c = now();
        hal_printf("%s{\"bits\": %u, \"ticks\": %u, \"ticks_scalar\": %u}", i ? ", " : "", bits,
                   (uint32_t)(b - a), (uint32_t)(c - b));
    }
    for (uint32_t i = 0; i < ng * NK_GROUP; i++) x[i] = rnd_float(0);
    uint64_t a = now();
    nk_a8_quantize(x, ng * NK_GROUP, ng * NK_GROUP, q1, gs1);
    uint64_t b = now();
    nk_a8_quantize_scalar(x, ng * NK_GROUP, ng * NK_GROUP, q0, gs0);
    uint64_t c = now();
    hal_printf("], \"quantize\": {\"in\": %u, \"ticks\": %u, \"ticks_scalar\": %u}}\n", ng * NK_GROUP,
               (uint32_t)(b - a), (uint32_t)(c - b));
    return failures ? 1 : 0;
}
"""

WARNINGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-ffp-contract=off"]


def kernel_driver(board_name: str, family: str, out_dir: Path) -> Path:
    """Generate the engine sources of an all-widths archive for `family`, add the driver,
    compile and link for the board; returns the ELF."""
    from generator.codegen import render
    from generator.codegen import pipeline
    from generator.codegen import plan
    from generator.archive import quant
    from generator.archive import reader
    from generator.commands import synth
    from generator.model import numerics as nm
    board = boards.load(board_name)
    out_dir.mkdir(parents=True, exist_ok=True)
    arch = out_dir / "widths.cact"
    if not arch.exists():
        arch.write_bytes(synth.synthesize("tiny", 1, bitmap=DRIVER_BITMAP))
    gen = out_dir / "gen"
    opts = plan.Options.for_board(board, kernels=family)
    pipeline.generate(str(arch), str(gen), opts, gnu_stack=False)
    # every width code, also those no archive of ours carries (binary): re-render the kernels
    ctx, _ = pipeline.contexts(str(arch), opts, gnu_stack=False)
    a = reader.read(str(arch))
    have = {cb["bits"] for cb in ctx["codebooks"]}
    for bits in sorted({1, 2, 3, 4, 5} - have):
        table, s_c = nm.int8_levels(bits, a.codebook)
        ctx["codebooks"].append({"bits": bits, "kind": "ternary" if bits == 5 else f"cq{bits}",
                                 "int8": [int(x) for x in table], "s_c": float(s_c),
                                 "levels": [0.0 if x != x else float(x) for x in quant.level_table(bits, a.codebook)]})
    ctx["codebooks"].sort(key=lambda cb: cb["bits"])
    ctx["max_in_pad"] = max(ctx["max_in_pad"], 128 * DRIVER_MAX_GROUPS)   # NK_MAX_GROUPS
    for name in ("needle_kernels.h", "needle_kernels.c"):
        (gen / name).write_text(render.render(pipeline.ENGINE_FILES[name], ctx))
    widths = [cb["bits"] for cb in ctx["codebooks"]]
    src = (DRIVER_C.replace("@WIDTHS@", ", ".join(map(str, widths)))
           .replace("@SHAPES@", ", ".join(f"{{ {r}, {g} }}" for r, g in GEMV_SHAPES))
           .replace("@LENGTHS@", ", ".join(map(str, QUANT_LENGTHS)))
           .replace("@BROWS@", str(BENCH_SHAPE[0])).replace("@BGROUPS@", str(BENCH_SHAPE[1])))
    (out_dir / "driver.c").write_text(src)
    cc = boards.compiler(board)
    fw = ROOT / "firmware"
    sources = [out_dir / "driver.c", fw / "baremetal" / "startup.c", fw / "hal" / "semihost" / "hal_semihost.c",
               fw / "hal" / "format.c"]
    if (gen / "needle_archive.S").exists():
        sources.append(gen / "needle_archive.S")
    elf = out_dir / "driver.elf"
    cmd = ([cc] + WARNINGS + board["arch_flags"] + ["-ffunction-sections", "-fdata-sections",
           "-Wno-unused-function", f"-I{gen}", f"-I{fw / 'hal'}", f"-I{fw / 'cli'}"]
           + [str(s) for s in sources]
           + ["-nostartfiles", "--specs=nano.specs", "-Wl,--gc-sections", f"-T{gen / 'link.ld'}",
              "-o", str(elf), "-lm"])
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=out_dir)
    if proc.returncode:
        raise CactError(f"kernel driver for {board_name}/{family} failed to build:\n{proc.stderr[-4000:]}")
    return elf


def run_kernel_driver(board_name: str, elf: Path, timeout: int = 600) -> tuple[str, dict]:
    board = boards.load(board_name)
    image = elf.parent / "widths.cact" if board["archive"]["placement"] == "partition" else None
    cmd = emulator_command(board, str(elf), ["driver"], str(image) if image else None)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    res = last_json(out.stdout)
    res["returncode"] = out.returncode
    k = ns_per_tick(board)
    rows, ng = BENCH_SHAPE
    kinds = {1: "binary", 2: "cq2", 3: "cq3", 4: "cq4", 5: "ternary"}
    for g in res["gemv"]:
        macs = rows * ng * 128
        g.update(kind=kinds[g["bits"]], rows=rows, cols=ng * 128, instructions=round(g["ticks"] * k),
                 instructions_scalar=round(g["ticks_scalar"] * k),
                 macs_per_instruction=round(macs / (g["ticks"] * k), 3),
                 macs_per_instruction_scalar=round(macs / (g["ticks_scalar"] * k), 3))
    qz = res["quantize"]
    qz.update(instructions=round(qz["ticks"] * k), instructions_scalar=round(qz["ticks_scalar"] * k))
    return out.stdout, res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m generator.bench_mcu", description=__doc__.split("\n\n")[0])
    ap.add_argument("--board", required=True)
    ap.add_argument("--fast", required=True, help="build directory of the board's family")
    ap.add_argument("--scalar", required=True, help="build directory of the scalar twin")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--no-gemv", dest="gemv", action="store_false",
                    help="skip the per-width GEMV timing of the kernel driver")
    args = ap.parse_args(argv)
    try:
        board = boards.load(args.board)
        res = compare(board, Path(args.fast), Path(args.scalar), args.tokens)
        if args.gemv:
            elf = kernel_driver(args.board, res["kernels"], Path(args.fast) / "kernel-driver")
            text, drv = run_kernel_driver(args.board, elf)
            if drv["mismatches"] or drv["returncode"]:
                raise CactError("the kernel driver found the family and the scalar kernels differ:\n"
                                + "\n".join(ln for ln in text.splitlines() if ln.startswith("MISMATCH"))[:2000])
            res["kernel_check"] = {"cases": drv["cases"], "mismatches": drv["mismatches"]}
            res["gemv"] = drv["gemv"]
            res["quantize"] = drv["quantize"]
    except CactError as exc:
        print(f"bench_mcu: error: {exc}", file=sys.stderr)
        return 2
    print_report(res)
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
