"""One way for the tests to build a tiny bare-metal firmware: a test's own main.c around the
board's reference support (start-up, console HAL, formatting: generator.build.sdk's
board_support_sources, the same files libneedle_board.a holds), linked with the board's
linker-script template.  No engine: for the start-up, fault and console tests."""

from __future__ import annotations

import subprocess
from pathlib import Path

from generator.build import boards, flags, sdk
from generator.codegen import pipeline, render

FIRMWARE = Path(__file__).resolve().parent.parent / "firmware"


def runtime_paths(board: dict) -> list[str]:
    """The run-time support the engine links on `board` (boards.runtime_sources: the
    soft-float routines on the MIPS routers), for a test that links generated kernels itself."""
    return [str(FIRMWARE / s) for s in boards.runtime_sources(board)]


def build_tiny(board: dict, main_c: str, out: Path, name: str = "fw") -> Path:
    """Compile and link `main_c` for `board` into out/<name>.elf; returns the image."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}_main.c").write_text(main_c)
    (out / f"{name}.ld").write_text(render.render("link.ld.j2", pipeline.linker_context(board, 0)))
    sources = [out / f"{name}_main.c"] + [FIRMWARE / s for s in sdk.board_support_sources(board)]
    cmd = (boards.compiler_argv(board) + boards.hal_defines(board) + [f"-I{FIRMWARE / 'hal'}"]
           + [str(s) for s in sources]
           + flags.compile_and_link_flags(board, boards.kernel_family(board), str(out / f"{name}.ld"))
           + ["-o", str(out / f"{name}.elf")])
    cc = subprocess.run(cmd, capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    return out / f"{name}.elf"
