"""The table `scons board=all` ends with: one row a board, its flash and RAM use (from its
memory report), the headroom its board file leaves, and whether it built.

SConstruct keeps going past a failing board (scons -k) and prints this at exit, from SCons'
own list of failures (SCons.Script.GetBuildFailures()): a board failed when a failure's node
lies in its build directory, was skipped when it was refused before building (a missing
toolchain: the reason is printed under the table).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from generator.build.memmap import size_text

_TOTAL = re.compile(r"^\s+(\S+)\s+([\d,]+) bytes")


@dataclass
class Row:
    board: str
    result: str                      # OK, FAILED or SKIPPED
    flash: int | None = None         # bytes used (the report's flash total)
    ram: int | None = None           # bytes used (the report's RAM total)
    flash_budget: int | None = None  # the board file's [memory] flash_bytes
    ram_budget: int | None = None    # the board file's [memory] ram_bytes
    why: str = ""                    # a skipped board's reason, a failed one's first error


def report_totals(path: str) -> tuple[int | None, int | None]:
    """(flash, RAM) bytes of a memory report (generator.build.elfcheck), (None, None) if absent."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None, None
    found = {}
    for line in lines[1:3]:
        m = _TOTAL.match(line)
        if m:
            found["ram" if m.group(1) == "RAM" else "flash"] = int(m.group(2).replace(",", ""))
    return found.get("flash"), found.get("ram")


def failed_under(failures, build_dir: str, alias: str) -> list:
    """The build failures (SCons BuildError) that belong to one board: a node in its build
    directory, or its alias."""
    top = os.path.abspath(build_dir) + os.sep
    mine = []
    for f in failures:
        node = getattr(f, "node", None)
        path = getattr(node, "abspath", None) or str(node)
        if str(node) == alias or (path and os.path.abspath(path).startswith(top)):
            mine.append(f)
    return mine


def _size(n: int | None) -> str:
    return "-" if n is None else size_text(n)


def _headroom(row: Row) -> str:
    """The smaller of flash and RAM left, as a share of the board's budget (and which one)."""
    parts = []
    for what, used, budget in (("flash", row.flash, row.flash_budget), ("RAM", row.ram, row.ram_budget)):
        if used is not None and budget:
            parts.append(((budget - used) / budget, what))
    if not parts:
        return "-"
    share, what = min(parts)
    return f"{int(share * 100)}% {what}"        # floored: 99.6 % left is not "100 %"


def table(rows: list[Row]) -> list[str]:
    """The summary's lines: a header, one line a board, the reasons of skipped or failed boards."""
    head = ("board", "flash used", "RAM used", "headroom", "result")
    body = [(r.board, _size(r.flash), _size(r.ram), _headroom(r), r.result) for r in rows]
    widths = [max(len(str(c[i])) for c in [head] + body) for i in range(len(head))]

    def fmt(cells):
        return "  ".join(str(c).ljust(w) if i in (0, 4) else str(c).rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    out = [fmt(head), fmt(["-" * w for w in widths])] + [fmt(c) for c in body]
    ok = sum(r.result == "OK" for r in rows)
    out.append(f"{ok} of {len(rows)} boards OK")
    out += [f"  {r.board}: {r.why}" for r in rows if r.result != "OK" and r.why]
    return out


def all_ok(rows: list[Row]) -> bool:
    return all(r.result == "OK" for r in rows)
