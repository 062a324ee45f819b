"""Cortex-M benchmark: instructions per decoded token, a kernel family against scalar.

`scons board=watch-mX archive=PATH bench=1` builds the board's engine and a scalar twin
(`<build>/scalar`), then runs `python -m bench.mcu`, which runs both images'
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
import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from generator.archive.format import CQ_GROUP
from generator.build import boards, flags, sdk
from generator.build.runner import BoardRunner
from generator.errors import CactError

ROOT = Path(__file__).resolve().parent.parent
ICOUNT = ["-icount", "shift=0"]     # the emulator flags of every run here: deterministic instruction counting
ENGINE_OBJECTS = ("needle_model.o", "needle_kernels.o", "needle_tokenizer.o")


def ns_per_tick(board: dict) -> float:
    """Instructions per tick of the firmware's counter, under -icount shift=0 (1 ns each):
    RISC-V reads minstret, one tick per instruction; Cortex-M reads SysTick, whose clock is
    the board file's emulator.systick_hz."""
    if boards.board_arch(board).startswith("riscv"):
        return 1.0
    hz = board["emulator"].get("systick_hz")
    if not isinstance(hz, int) or hz <= 0:
        raise CactError(f"board {board['name']}: emulator.systick_hz (QEMU's SysTick CPU clock) is "
                        "needed to turn SysTick ticks into instructions")
    return 1e9 / hz


def run_firmware(board: dict, build_dir: Path, args: list[str], timeout: int = 3600) -> str:
    image = build_dir / "archive.bin"
    run = BoardRunner(board, build_dir / "needle.elf", image if image.exists() else None)
    out = run.run(args, timeout=timeout, emulator_flags=ICOUNT)
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
DRIVER_BATCH = 8                # tokens of the driver's batched products (NK_MAX_BATCH)
BENCH_SHAPE = (256, 4)          # rows, groups of the per-width GEMV timing (256 x 512)


def _all_widths(engine, archive):
    """(plan, width codes): the engine plan with every width code's codebook (also those no
    archive of ours carries: binary) and room for DRIVER_MAX_GROUPS groups.  The one place
    that reads or changes plan values."""
    from generator.codegen import plan
    have = {cb.bits for cb in engine.model.codebooks}
    extra = tuple(plan.codebook(bits, archive.codebook) for bits in sorted({1, 2, 3, 4, 5} - have))
    books = tuple(sorted(engine.model.codebooks + extra, key=lambda cb: cb.bits))
    model = dataclasses.replace(engine.model, codebooks=books,
                                widest_a8_input=max(engine.model.widest_a8_input, CQ_GROUP * DRIVER_MAX_GROUPS))
    engine = dataclasses.replace(engine, model=model)
    return engine, [cb.bits for cb in books]


def kernel_driver(board_name: str, family: str, out_dir: Path) -> Path:
    """Generate the engine sources of an all-widths archive for `family`, add the driver
    (templates/bench/kernel_driver.c.j2), compile and link for the board; returns the ELF."""
    from generator.archive import reader
    from generator.codegen import pipeline, render
    from generator.commands import synth
    board = boards.load(board_name)
    out_dir = Path(out_dir).resolve()     # the compiler runs in out_dir: no relative paths
    out_dir.mkdir(parents=True, exist_ok=True)
    arch = out_dir / "widths.cact"
    if not arch.exists():
        arch.write_bytes(synth.synthesize("tiny", 1, bitmap=DRIVER_BITMAP))
    gen = out_dir / "gen"
    boards.generate_engine(board, str(arch), str(gen), kernels=family)
    engine, _ = pipeline.contexts(str(arch), boards.engine_options(board, kernels=family), gnu_stack=False)
    engine, widths = _all_widths(engine, reader.read(str(arch)))
    engine = dataclasses.replace(engine, target=dataclasses.replace(engine.target, prefill_chunk=DRIVER_BATCH))  # nk_gemm_a8 built and checked
    for name in ("needle_kernels.h", "needle_kernels.c"):
        (gen / name).write_text(render.render(pipeline.ENGINE_FILES[name], engine))
    (out_dir / "driver.c").write_text(render.render("bench/kernel_driver.c.j2", {
        "widths": widths, "shapes": GEMV_SHAPES, "lengths": QUANT_LENGTHS,
        "bench_rows": BENCH_SHAPE[0], "bench_groups": BENCH_SHAPE[1]}))
    cc = boards.compiler(board)
    fw = ROOT / "firmware"
    sources = [out_dir / "driver.c",
               *(fw / src for src in sdk.board_support_sources(board) + boards.runtime_sources(board))]
    if (gen / "needle_archive.S").exists():
        sources.append(gen / "needle_archive.S")
    elf = out_dir / "driver.elf"
    cmd = ([cc] + boards.hal_defines(board)
           + ["-Wno-unused-function", f"-I{gen}", f"-I{fw / 'hal'}", f"-I{fw / 'lib'}"]
           + [str(s) for s in sources]
           + flags.compile_and_link_flags(board, family, str(gen / "link.ld")) + ["-o", str(elf), "-lm"])
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=out_dir)
    if proc.returncode:
        raise CactError(f"kernel driver for {board_name}/{family} failed to build:\n{proc.stderr[-4000:]}")
    return elf


def run_kernel_driver(board_name: str, elf: Path, timeout: int = 600) -> tuple[str, dict]:
    board = boards.load(board_name)
    image = elf.parent / "widths.cact" if board["archive"]["placement"] == "partition" else None
    out = BoardRunner(board, elf, image).run(["driver"], timeout=timeout, emulator_flags=ICOUNT)
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
    ap = argparse.ArgumentParser(prog="python -m bench.mcu", description=__doc__.split("\n\n")[0])
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
        print(f"bench.mcu: error: {exc}", file=sys.stderr)
        return 2
    print_report(res)
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
