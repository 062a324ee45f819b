"""Compiler and linker flags, stated once for SConstruct and the benchmark/test drivers.

What shapes the object code lives here: the C dialect and warnings, the numerics rule
(docs/numerics.md §1: no fused multiply-add), the board's `arch_flags`, what each kernel
family needs beyond them (its descriptor's compile_flags, generator/codegen/families.py),
and the bare-metal section/link rules.  Build-reporting flags (path prefix maps, GCC's
stack-usage files) are SConstruct's own.
"""

from __future__ import annotations

from generator.build import boards
from generator.codegen import families
from generator.tools import tables

WARNINGS = ["-std=c11", "-Wall", "-Wextra", "-Werror"]
NUMERICS = ["-O2", "-ffp-contract=off"]          # docs/numerics.md §1: no fused multiply-add

# zig cc keeps a frame pointer at every optimisation level (GCC drops it from -O1, and
# OpenWrt builds its packages without one); the routers' compiler runtime, which zig compiles
# with the program's flags, drops it too.  router-mt7621: 17.25 M -> 15.01 M instructions per
# token of the demo archive (README, "The portable family on cores without SIMD").
ZIG_FLAGS = ["-fomit-frame-pointer"]
# debug=1: debug information only; the code is the same as without it (NUMERICS unchanged).
DEBUG = ["-g"]
# bare metal: the hand-written glue and the tokenizer (not the model) are compiled for size
SIZE = ["-Os"]

# The C library of a bare-metal image, per instruction set (generator/build/boards.py
# board_arch): Arm's newlib-nano (gcc-arm-none-eabi's libnewlib-arm-none-eabi); on RISC-V
# picolibc (Debian's riscv64-unknown-elf gcc ships no C library of its own), whose specs file
# also gives the compiler its headers.  The engine takes string functions from it, nothing else.
BARE_LIBC = {"Arm Cortex-M": "--specs=nano.specs", "riscv32": "--specs=picolibc.specs"}
BARE_LIBC_COMPILE = {"riscv32": ("--specs=picolibc.specs",)}

# GCC only: per-function stack use and the call graph generator.build.elfcheck reads.
STACK_USAGE = ["-fstack-usage", "-fcallgraph-info=su"]


def compile_flags(board: dict, family: str) -> list[str]:
    """Flags that compile engine and firmware sources for `board` with kernel family `family`."""
    flags = WARNINGS + NUMERICS + board["arch_flags"] + list(families.get(family).compile_flags)
    # the call grammar's table bounds (board file [grammar]; docs/grammar.md, "Memory and cost")
    flags += tables.defines(board)
    if board.get("toolchain") == "zig":
        flags += ZIG_FLAGS
    if board["os"] == "none":
        flags += ["-ffunction-sections", "-fdata-sections"]   # --gc-sections drops the unused
        flags += list(BARE_LIBC_COMPILE.get(boards.board_arch(board), ()))
    return flags


def link_flags(board: dict, script: str | None = None, map_file: str | None = None) -> list[str]:
    """Flags that link an image for `board`; bare metal needs the rendered linker script."""
    flags = list(board["arch_flags"])
    if board["os"] == "none":
        if not script:
            raise ValueError(f"board {board['name']} is bare metal: give its linker script")
        # --emit-relocs: the image keeps its relocations (not loaded), so the post-link check
        # knows which words are function pointers (generator.build.elfcheck, worst stack)
        flags += ["-nostartfiles", BARE_LIBC[boards.board_arch(board)], "-Wl,--gc-sections", "-Wl,--emit-relocs",
                  f"-T{script}"]
        if "slots" in board:
            # the code region starts MCUboot's header into a slot: without --nmagic the first
            # segment would start at the page below and load the ELF headers into the header
            flags.append("-Wl,--nmagic")
        if map_file:
            flags.append(f"-Wl,-Map={map_file}")
    elif board["toolchain_prefix"] or board.get("toolchain") == "zig":
        flags.append("-static")       # cross-built Linux executables run as they are
    return flags


def compile_and_link_flags(board: dict, family: str, script: str | None = None) -> list[str]:
    """Flags of one command that compiles and links (the test and benchmark drivers): the
    compile flags, then the link flags they do not already hold (a specs file named twice is
    an error)."""
    cflags = compile_flags(board, family)
    return cflags + [f for f in link_flags(board, script) if f not in cflags]
