"""Print the pytest -k expression of one board's shard of the emulator tier (.github/workflows/ci.yml).

Test ids name boards in their parameters (test_x[rpi-zero], test_y[rpi-zero-tiny]); -k
matches substrings, so a board's shard leaves out the boards whose names contain its own
(rpi-zero leaves out rpi-zero2).  The shard "host" (no emulator) takes the emulator-tier tests
that name no other board, so every test runs in some shard.

    python .ci/board_k.py BOARD
"""

from __future__ import annotations

import sys
from pathlib import Path

BOARDS = sorted(p.stem for p in (Path(__file__).resolve().parent.parent / "boards").glob("*.toml"))


def expression(board: str, boards: list[str] = BOARDS) -> str:
    """The -k expression of `board`'s shard."""
    if board not in boards:
        raise ValueError(f"no board {board!r} in boards/ (one of: {', '.join(boards)})")
    if board == "host":
        return "not (" + " or ".join(b for b in boards if b != "host") + ")"
    longer = [b for b in boards if b != board and board in b]
    return board + (" and not (" + " or ".join(longer) + ")" if longer else "")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python .ci/board_k.py BOARD")
    try:
        print(expression(sys.argv[1]))
    except ValueError as exc:
        sys.exit(f"error: {exc}")
