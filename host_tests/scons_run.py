"""One way for the tests to run SCons: `scons(*args)` runs `python -m SCons -Q -j2 ARGS` in the
repository (or `cwd`) and raises AssertionError with the end of its output when it fails
(`check=False`: returns the result whatever it is)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# set by conftest.py while a quick-tier test runs: the quick tier builds nothing
IN_QUICK_TEST: str | None = None


def scons(*args, cwd=ROOT, check: bool = True, env: dict | None = None,
          timeout: int = 1800) -> subprocess.CompletedProcess:
    args = [str(a) for a in args]
    if IN_QUICK_TEST and "-n" not in args and "-h" not in args:
        raise AssertionError(f"{IN_QUICK_TEST} is marked quick but runs scons {' '.join(args)}: "
                             "move it to the emulator tier, or leave it unmarked (a host build)")
    proc = subprocess.run([sys.executable, "-m", "SCons", "-Q", "-j2", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=env)
    if check and proc.returncode:
        raise AssertionError(f"scons {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr}")
    return proc


def env_with_boards(boards_dir: Path, work: Path) -> dict:
    """The environment of a child process (scons, python -m generator) whose board loader reads
    `boards_dir` instead of boards/: a sitecustomize.py in work/site points it there."""
    import os
    site = work / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(
        "from generator.build import boards\n"
        f"boards.BOARDS_DIR = __import__('pathlib').Path({str(boards_dir)!r})\n")
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]))


def build_each(names, archive, root: Path) -> dict:
    """Build every board of `names` for `archive` into root/<board>; {board: its build dir}."""
    for name in names:
        scons(f"board={name}", f"archive={archive}", f"build={root / name}")
    return {name: root / name for name in names}


def build_to_run(name: str, archive, build: Path) -> tuple[dict, Path]:
    """(board, its built image) for a test that runs it: skipped when the board's toolchain or
    emulator is missing."""
    import pytest
    from generator.build import boards
    board = boards.load(name)
    why = boards.missing_tools(board, run=True)
    if why:
        pytest.skip(why)
    scons(f"board={name}", f"archive={archive}", f"build={build}")
    return board, build / ("needle.elf" if board["os"] == "none" else "needle")


def sdk_probe(root: Path, source: str, *args) -> Path:
    """A host engine built as a library into root (`scons board=host lib=1 snapshot=0 ARGS`,
    the archive and tools among ARGS) and the C program `source` linked to its SDK through
    pkg-config; the program's path."""
    from generator.build import sdk
    scons("board=host", f"build={root}", "lib=1", "snapshot=0", *args)
    pc = root / sdk.SDK_DIR / "lib" / "pkgconfig"
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "needle"], env={"PKG_CONFIG_LIBDIR": str(pc)},
                           capture_output=True, text=True, check=True).stdout.split()
    src, exe = root / "probe.c", root / "probe"
    src.write_text(source)
    subprocess.run(["gcc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(exe), str(src)] + flags,
                   check=True)
    return exe
