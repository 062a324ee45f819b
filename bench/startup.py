"""Start-up cost of the whole-archive check (placement `file`: the routers; `partition`: watch-m7).

An engine whose archive is not linked into it hashes every byte of the archive (SHA-256)
before it runs: the file it maps at start, or the partition flashed beside the firmware.
This benchmark counts, under the board's emulator (the device's core), the instructions of
`needle --info` for two archives of different sizes (the `tiny` and `small` goldens) and
divides the difference by the difference in bytes: the check's instructions per archive
byte, exact and repeatable (instruction counting as in bench/host.py).  It then projects the
cost for an archive of `needle2-base`'s size (the synthetic preset, 13.7 MB) at the clock of
the board's SoC, assuming one instruction per cycle (in-order cores: an estimate, not a
measurement on a device).

    python -m bench.startup [--board router-mt7621 ...]

prints one line per board and a JSON object per board as the last lines.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.host import count_instructions_of
from generator.build import boards
from generator.build.runner import BoardRunner
from generator.errors import CactError

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "host_tests" / "golden"
BASE_BYTES = 13_731_733          # `python -m generator synth --preset needle2-base --seed 1`
# Nominal clock of each SoC (datasheets): MT7621A 880 MHz, QCA9563 (ath79) 775 MHz, IPQ4019
# 717 MHz; watch-m7 stands for a Cortex-M7 part at 480 MHz (STM32H7).
CLOCK_MHZ = {"router-mt7621": 880, "router-ath79": 775, "router-ipq40xx": 717, "watch-m7": 480}


def checked(board: dict) -> bool:
    return board["archive"]["placement"] in ("file", "partition")


def build(board: str, archive: Path, out: Path) -> Path:
    proc = subprocess.run([sys.executable, "-m", "SCons", "-Q", f"board={board}", f"archive={archive}",
                           f"build={out}"], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode:
        raise CactError(f"building {board} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return out / ("needle.elf" if boards.load(board)["os"] == "none" else "needle")


def measure(board_name: str) -> dict:
    board = boards.load(board_name)
    if not checked(board):
        raise CactError(f"board {board_name} links its archive (placement {board['archive']['placement']}): "
                        "only its header is checked at start")
    counts = {}
    with tempfile.TemporaryDirectory(prefix="needle-startup-") as tmp:
        for name in ("tiny", "small"):
            archive = GOLDEN / name / "archive.cact"
            exe = build(board_name, archive, Path(tmp) / name)
            run = BoardRunner(board, exe, archive)
            counts[name] = (archive.stat().st_size, [count_instructions_of(run, ["--info"]) for _ in range(2)])
    (b0, c0), (b1, c1) = counts["tiny"], counts["small"]
    per_byte = (c1[0] - c0[0]) / (b1 - b0)
    mhz = CLOCK_MHZ.get(board_name)
    base = per_byte * BASE_BYTES
    return {"board": board_name, "instructions_per_byte": round(per_byte, 2),
            "repeatable": c0[0] == c0[1] and c1[0] == c1[1],
            "start_instructions": {"tiny": c0[0], "small": c1[0]},
            "archive_bytes": {"tiny": b0, "small": b1},
            "needle2_base_bytes": BASE_BYTES, "needle2_base_check_instructions": round(base),
            "clock_mhz": mhz, "needle2_base_check_seconds_at_1ipc": round(base / (mhz * 1e6), 2) if mhz else None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__.splitlines()[0])
    p.add_argument("--board", action="append", help="a placement-file or partition board (default: every one)")
    args = p.parse_args(argv)
    names = args.board or [n for n in boards.names() if checked(boards.load(n))]
    try:
        results = [measure(n) for n in names]
    except CactError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for r in results:
        print(f"{r['board']:>15}: {r['instructions_per_byte']:.2f} instructions per archive byte; "
              f"needle2-base ({r['needle2_base_bytes']:,} bytes): {r['needle2_base_check_instructions']:,} "
              f"instructions, ~{r['needle2_base_check_seconds_at_1ipc']} s at {r['clock_mhz']} MHz and 1 IPC")
    for r in results:
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
