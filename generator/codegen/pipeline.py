"""The generator pipeline for one engine: read -> plan -> emit -> write.

`generate()` is what the SCons tool and `python -m generator emit` call.  Output is
byte-reproducible: no timestamps, no absolute paths except the archive path the assembly
file must `.incbin` (given by the caller, relative to the build directory when possible).
"""

from __future__ import annotations

import os
from pathlib import Path

from generator.codegen import render
from generator.codegen import plan as planner
from generator.codegen import tokenizer_plan
from generator.archive import reader
from generator.errors import CactError
from generator.files import refuse_output_is_input

ENGINE_FILES = {
    "needle_model.h": "needle_model.h.j2",
    "needle_model.c": "model/needle{generation}.c.j2",   # one template per model generation
    "needle_kernels.h": "needle_kernels.h.j2",
    "needle_kernels.c": "needle_kernels.c.j2",
    "needle_tokenizer.h": "needle_tokenizer.h.j2",
    "needle_tokenizer.c": "needle_tokenizer.c.j2",
    "needle_archive.S": "needle_archive.S.j2",
    "needle_archive_file.c": "needle_archive_file.c.j2",
}


def template(name: str, engine: planner.EnginePlan) -> str:
    """The template that renders engine file `name` for this plan: needle_model.c from its
    generation's template (templates/model/needle2.c.j2, needle3.c.j2), the rest shared."""
    return ENGINE_FILES[name].format(generation=engine.model.generation)


def outputs(board: dict | None = None) -> list[str]:
    """Files generate() writes for this board."""
    names = [n for n in ENGINE_FILES if n != "needle_archive_file.c"]
    placement = board.get("archive", {}).get("placement", "linked") if board else "linked"
    if board and board["os"] == "none":
        names.append("link.ld")
    if placement == "partition":        # the archive is flashed on its own
        names.remove("needle_archive.S")
    if placement == "file":
        names.append("needle_archive_file.c")
    return names


def _region(board: dict, use: str) -> dict:
    """The board's memory region of one use ("code", "data" or "archive")."""
    return next(r for r in board["memory"]["regions"] if r["use"] == use)


# The stack guard (firmware/baremetal/startup.c picks the mechanism from the core, the
# linker script reserves its memory).  Armv7-M cores (Cortex-M3/M4/M7) get an MPU region
# with no access below the stack; Armv8-M Mainline / Armv8.1-M cores (Cortex-M33, M55, ...)
# limit the stack with MSPLIM and need no memory for it; RV32 cores get a locked PMP entry
# with no permissions (startup_riscv.c: NAPOT, the same power-of-two size and alignment);
# other cores have no guard.
# 1 KiB: PMSAv7 wants a power of two >= 32 bytes, and an overflow can only step over the
# guard in a frame larger than it; the post-link check (generator/build/elfcheck.py)
# refuses an image with such a frame (the largest today: newlib's __kernel_rem_pio2, 656
# bytes on the Cortex-M7).
MPU_GUARD_CPUS = ("cortex-m3", "cortex-m4", "cortex-m7")
MSPLIM_CPUS = ("cortex-m33", "cortex-m35p", "cortex-m52", "cortex-m55", "cortex-m85", "star-mc1")
MPU_STACK_GUARD_BYTES = 1024
# The fault handler's own stack (startup.c: Fault_Handler switches to it); the post-link
# check compares it with fault_dump's deepest call path.
FAULT_STACK_BYTES = 512


def stack_guard_kind(board: dict) -> str:
    """"mpu", "msplim", "pmp" or "none": the guard the start-up code sets up on the board's core."""
    if board["os"] == "none" and any(f.startswith("-march=rv32") for f in board["arch_flags"]):
        return "pmp"
    cpu = next((f.split("=", 1)[1].split("+")[0] for f in board["arch_flags"] if f.startswith("-mcpu=")), "")
    return "mpu" if cpu in MPU_GUARD_CPUS else "msplim" if cpu in MSPLIM_CPUS else "none"


def stack_guard_bytes(board: dict) -> int:
    """Bytes of the stack guard region below the stack (an Armv7-M MPU or a RISC-V PMP
    region), else 0."""
    return MPU_STACK_GUARD_BYTES if stack_guard_kind(board) in ("mpu", "pmp") else 0


def linker_context(board: dict, archive_bytes: int) -> dict:
    """Data for templates/link.ld.j2, and the archive-fits check that runs before compiling."""
    from generator import __version__
    arch = _region(board, "archive")
    if archive_bytes > arch["length"]:
        raise CactError(f"archive is {archive_bytes:,} bytes but board {board['name']}'s "
                        f"{arch['name']} region holds {arch['length']:,} "
                        f"({archive_bytes - arch['length']:,} over): use a shallower ladder rung "
                        "or a board with more flash")
    return {"generator_version": __version__, "board": board["name"],
            "regions": board["memory"]["regions"], "stack_bytes": board["stack_bytes"],
            "stack_guard_bytes": stack_guard_bytes(board), "stack_guard": stack_guard_kind(board),
            "fault_stack_bytes": FAULT_STACK_BYTES,
            "heap_bytes": board.get("heap_bytes", 0),
            "placement": board["archive"]["placement"], "archive_bytes": archive_bytes,
            "archive_length": arch["length"], "code": _region(board, "code")["name"],
            "data": _region(board, "data")["name"], "archive": arch["name"]}


def contexts(archive_path: str, opts: planner.Options, incbin_path: str | None = None,
             gnu_stack: bool = True) -> tuple[planner.EnginePlan, tokenizer_plan.TokenizerPlan]:
    """(engine plan, tokenizer plan): the data the two families of templates render."""
    a = reader.read(archive_path)
    engine = planner.plan(a, opts, incbin_path=incbin_path or archive_path, gnu_stack=gnu_stack)
    return engine, tokenizer_plan.plan(a, max_text=opts.max_text)


def generate(archive_path: str, out_dir: str, opts: planner.Options | None = None,
             incbin_path: str | None = None, gnu_stack: bool = True) -> planner.EnginePlan:
    """Render every engine file into out_dir; returns the engine plan (for reports:
    `.warnings`, `.model.kv.cache_bytes`, ...)."""
    opts = opts or planner.Options()
    board = opts.board_data
    refuse_output_is_input([("the engine file", Path(out_dir) / n) for n in outputs(board)],
                           {"archive": archive_path})
    engine, tok = contexts(archive_path, opts, incbin_path, gnu_stack)
    bare_metal = bool(board) and board["os"] == "none"
    link = linker_context(board, engine.provenance.archive_bytes) if bare_metal else None
    texts = {}                    # render everything first: a template error writes nothing
    for name in outputs(board):
        if name == "link.ld":
            texts[name] = render.render("link.ld.j2", link)
        else:
            texts[name] = render.render(template(name, engine), tok if name.startswith("needle_tokenizer") else engine)
    try:
        os.makedirs(out_dir, exist_ok=True)
        for name, text in texts.items():
            path = Path(out_dir) / name
            if not path.exists() or path.read_text() != text:
                path.write_text(text)
    except OSError as exc:
        where = exc.filename or out_dir
        raise CactError(f"cannot write the engine into {out_dir}: {where}: {exc.strerror} "
                        "(pass -o a directory you can write)") from None
    return engine


__all__ = ["generate", "outputs", "contexts", "template", "ENGINE_FILES", "CactError"]
