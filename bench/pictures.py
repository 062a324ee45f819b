"""The documentation's pictures and tables that come from the build itself, not drawn by hand.

    python -m bench.pictures memory [--board B ...] [--out docs/img]
    python -m bench.pictures boards [--out docs/_snippets/boards-table.md] [--check]

* ``memory``: builds each board with the bundled demo archive (`scons board=B build=build/B`)
  and copies the memory map every build draws (<build>/memory.svg: generator/build/memmap.py,
  from the post-link check's figures) to docs/img/memory-<board>.svg.  Default boards: host,
  rpi-zero, watch-m4, stm32h750b-dk, and router-mt7621 when zig (the `ziglang` package) is
  installed.
* ``boards``: the boards table, rendered from boards/*.toml (generator/build/boardtable.py),
  into docs/_snippets/boards-table.md; ``--check`` only compares (exit 1 when it differs).

The benchmark plots are bench/plots.py's (matplotlib, from bench/results/*.json).
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

from generator.build import boardtable, boards
from generator.errors import CactError

ROOT = Path(__file__).resolve().parent.parent
MEMORY_BOARDS = ("host", "rpi-zero", "watch-m4", "stm32h750b-dk", "router-mt7621")


def default_memory_boards() -> list[str]:
    zig = importlib.util.find_spec("ziglang") is not None
    return [b for b in MEMORY_BOARDS if zig or boards.load(b).get("toolchain") != "zig"]


def memory(board: str, out_dir: Path, build_root: Path) -> Path:
    """Build `board` (the demo archive) and copy its memory.svg to out_dir/memory-<board>.svg."""
    build = build_root / board
    proc = subprocess.run([sys.executable, "-m", "SCons", "-Q", "-j2", f"board={board}", f"build={build}"],
                          cwd=ROOT, capture_output=True, text=True)
    if proc.returncode:
        tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:]
        raise CactError(f"building {board} failed: {' '.join(tail)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"memory-{board}.svg"
    shutil.copyfile(build / "memory.svg", target)
    return target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.pictures", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    m = sub.add_parser("memory", help="build boards and copy their memory maps into docs/img")
    m.add_argument("--board", action="append", help="a board (repeatable; default: "
                   f"{', '.join(MEMORY_BOARDS)}, the routers only with zig)")
    m.add_argument("--out", default=str(ROOT / "docs" / "img"), help="where memory-<board>.svg go")
    m.add_argument("--build", default=str(ROOT / "build"), help="build directories: BUILD/<board>")
    b = sub.add_parser("boards", help="render the boards table from boards/*.toml")
    b.add_argument("--out", default=str(ROOT / boardtable.SNIPPET))
    b.add_argument("--check", action="store_true", help="only compare with --out (exit 1 when it differs)")
    args = ap.parse_args(argv)
    try:
        if args.what == "memory":
            for name in args.board or default_memory_boards():
                boards.load(name)              # an unknown board: one line, before building
                print(memory(name, Path(args.out), Path(args.build)))
            return 0
        text = boardtable.markdown()
        out = Path(args.out)
        if args.check:
            if not out.is_file() or out.read_text(encoding="utf-8") != text:
                print(f"{out} is stale: run python -m bench.pictures boards", file=sys.stderr)
                return 1
            return 0
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        print(out)
        return 0
    except CactError as exc:
        print(f"bench.pictures: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
