"""The memory map of a build as a picture: `<build>/memory.svg`, beside `memory.txt`.

Every build draws it (generator.build.scons_tool's NeedleCheck), from the same Report the
post-link check (generator.build.elfcheck) fills and memory.txt prints, plus the board file's
memory regions: no figure here is measured again.

* Bare metal: one bar per region of the board file (`[memory] regions`), its full width the
  region's length; each section sits in the region holding its address (a `.data` load image
  in the code region, where the linker script puts it; the archive in the `archive` region,
  linked or flashed as a partition); what is left is free.
* Linux and the host: no fixed memory map, so the used sizes only (no free part), every bar
  to one scale: the executable (flash, or the OpenWrt package), the archive file when the
  engine maps it at start, and RAM.

RAM's data+bss is split as memory.txt splits it: the KV cache, the prefill pass's vectors,
the rest of the engine state, and everything else.  Segments too narrow for their label are
named in the list under each bar, which names every segment with its bytes.

Plain SVG text from the standard library: this runs in every build, so no plotting package.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

WIDTH = 960
MARGIN = 24
BAR_HEIGHT = 30
ROW = 17                      # legend row height
FONT = "DejaVu Sans Mono, Menlo, Consolas, monospace"
CHAR = 0.61                   # a monospace glyph's width, in font sizes
MIN_SEGMENT = 2.0             # pixels: a used segment never vanishes

# kind -> (fill, text colour inside the bar, legend name)
KINDS = {
    "archive": ("#807dba", "#ffffff", "archive (.cact)"),
    "archive-file": ("#bcbddc", "#000000", "archive file"),
    "code": ("#2b8cbe", "#ffffff", "code"),
    "rodata": ("#a6dba0", "#000000", "rodata"),
    "kv": ("#d94801", "#ffffff", "KV cache"),
    "prefill": ("#fdae6b", "#000000", "prefill pass"),
    "state": ("#f16913", "#ffffff", "engine state (rest)"),
    "data": ("#fee6ce", "#000000", "other data+bss"),
    "stack": ("#cb181d", "#ffffff", "stack"),
    "guard": ("#525252", "#ffffff", "stack guard"),
    "fault": ("#fc9272", "#000000", "fault stack"),
    "free": ("#f7f7f7", "#555555", "free"),
}


@dataclass
class Segment:
    kind: str
    label: str
    size: int


@dataclass
class Bar:
    name: str
    detail: str                     # address, length, use; or "no fixed size"
    capacity: int | None            # None: no fixed size (drawn to the used total)
    segments: list = field(default_factory=list)

    @property
    def used(self) -> int:
        return sum(s.size for s in self.segments if s.kind != "free")


def _ram_split(rep, data_bytes: int) -> list[Segment]:
    """data+bss as memory.txt splits it: KV cache, prefill pass, the rest of the engine
    state, other."""
    out = []
    state = rep.state_bytes or 0
    if state:
        rest = state - rep.kv_bytes - rep.prefill_bytes
        out += [Segment("kv", "KV cache", rep.kv_bytes), Segment("prefill", "prefill pass", rep.prefill_bytes),
                Segment("state", "engine state (rest)", rest)]
    out.append(Segment("data", "other data+bss", data_bytes - state))
    return [s for s in out if s.size > 0]


def _region_of(regions: list, address: int | None, fallback: dict) -> dict:
    for r in regions:
        if address is not None and r["origin"] <= address < r["origin"] + r["length"]:
            return r
    return fallback


def bare_metal_bars(rep, board: dict) -> list[Bar]:
    """One bar per region of the board file, the report's sections placed by address."""
    regions = board["memory"]["regions"]
    by_use = {r["use"]: r for r in regions}
    code_region, data_region = by_use["code"], by_use["data"]
    fill: dict = {r["name"]: {} for r in regions}        # region -> kind -> bytes

    def add(region: dict, kind: str, size: int) -> None:
        fill[region["name"]][kind] = fill[region["name"]].get(kind, 0) + size

    for name, size in rep.flash.items():
        if name.endswith(" (load image)"):       # link.ld: .data ... AT > code region
            add(code_region, "rodata", size)
        else:
            add(_region_of(regions, rep.addresses.get(name), code_region),
                "code" if rep.is_code(name) else "rodata", size)
    if rep.cact_bytes:
        add(by_use["archive"], "archive", rep.cact_bytes)
    stack_kinds = {".stack": "stack", ".stack_guard": "guard", ".fault_stack": "fault"}
    data_home = _region_of(regions, rep.addresses.get(".bss", rep.addresses.get(".data")), data_region)
    for name, size in rep.ram.items():
        region = _region_of(regions, rep.addresses.get(name), data_region)
        add(region, stack_kinds.get(name, "ram"), size)
    bars = []
    for r in regions:
        got = fill[r["name"]]
        segs = []
        if "archive" in got:
            where = "archive partition" if rep.partition else "archive (.cact)"
            segs.append(Segment("archive", where, got["archive"]))
        segs += [Segment(k, KINDS[k][2], got[k]) for k in ("code", "rodata") if got.get(k)]
        if got.get("ram"):
            if r is data_home:
                segs += _ram_split(rep, got["ram"])
            else:
                segs.append(Segment("data", "data+bss", got["ram"]))
        stack_labels = {"stack": "stack (reserved)", "guard": "stack guard", "fault": "fault stack"}
        segs += [Segment(k, stack_labels[k], got[k]) for k in ("fault", "guard", "stack") if got.get(k)]
        used = sum(s.size for s in segs)
        if r["length"] > used:
            segs.append(Segment("free", "free", r["length"] - used))
        bars.append(Bar(r["name"], f"0x{r['origin']:08X}, {r['length']:,} bytes, use = {r['use']}",
                        r["length"], segs))
    return bars


def linux_bars(rep, board: dict) -> list[Bar]:
    """The used sizes only: a Linux board's memory has no fixed map."""
    mem = board["memory"]
    if rep.flash_label == "package":
        name, budget = "package", f"package_flash_bytes {mem['package_flash_bytes']:,}"
    else:
        name, budget = "flash", f"flash_bytes {mem['flash_bytes']:,}"
    segs = [Segment("code", "code", rep.code_bytes), Segment("rodata", "rodata", rep.rodata_bytes)]
    if rep.cact_bytes:
        segs.append(Segment("archive", "archive (.cact)", rep.cact_bytes))
    bars = [Bar(name, f"the executable: no fixed size (budget: {budget})", None, segs)]
    if rep.archive_file:
        bars.append(Bar("archive file", "mapped at start (--archive): no fixed size", None,
                        [Segment("archive-file", "archive file", rep.archive_file)]))
    ram = _ram_split(rep, sum(rep.ram.values()))
    if ".stack" not in rep.ram and rep.stack_bytes:
        ram.append(Segment("stack", "stack (deepest own-code path)", rep.stack_bytes))
    bars.append(Bar("RAM", f"no fixed size (budget: ram_bytes {mem['ram_bytes']:,})", None, ram))
    return bars


def bars(rep, board: dict) -> list[Bar]:
    if board["os"] == "none" and board["memory"].get("regions"):
        return bare_metal_bars(rep, board)
    return linux_bars(rep, board)


def size_text(n: int) -> str:
    """Bytes for a reader: MiB or KiB with one decimal, or bytes (the picture's labels and
    board=all's summary table)."""
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):.1f} KiB"
    return f"{n} B"


def _share(part: int, whole: int) -> str:
    if not whole:
        return ""
    pct = 100 * part / whole
    return "<0.1 %" if 0 < pct < 0.1 else f"{pct:.1f} %"


def _widths(sizes: list[int], total: int, width: float) -> list[float]:
    """Pixel widths to scale, a used segment at least MIN_SEGMENT wide (taken from the widest)."""
    if total <= 0:
        return [0.0] * len(sizes)
    w = [width * s / total for s in sizes]
    w = [max(x, MIN_SEGMENT) if s > 0 else 0.0 for x, s in zip(w, sizes)]
    excess = sum(w) - width
    if excess > 0:
        i = max(range(len(w)), key=lambda k: w[k])
        w[i] = max(w[i] - excess, MIN_SEGMENT)
    return w


def _text(x: float, y: float, s: str, size: int = 12, fill: str = "#000000", anchor: str = "start",
          weight: str = "normal") -> str:
    bold = ' font-weight="bold"' if weight != "normal" else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{fill}" text-anchor="{anchor}"{bold}>'
            f"{escape(s)}</text>")


def render(rep, board: dict, board_name: str | None = None) -> str:
    """The SVG text of the build's memory map."""
    name = board_name or board["name"]
    drawn = bars(rep, board)
    fixed = any(b.capacity for b in drawn)
    shared = max((b.used for b in drawn), default=0)    # no fixed size: one scale for every bar
    inner = WIDTH - 2 * MARGIN
    body, y = [], 40
    body.append(_text(MARGIN, y, name, 20, weight="bold"))
    y += 20
    body.append(_text(MARGIN, y, board.get("description", ""), 12, "#333333"))
    y += 17
    note = ("each bar is one memory region of the board file, drawn to its own length"
            if fixed else "no fixed size: the used bytes only, every bar to one scale")
    body.append(_text(MARGIN, y, f"archive placement: {board['archive']['placement']}; {note}", 12, "#333333"))
    y += 16
    for bar in drawn:
        y += 22
        body.append(_text(MARGIN, y, bar.name, 14, weight="bold"))
        body.append(_text(MARGIN + (len(bar.name) + 2) * 14 * CHAR, y, bar.detail, 12, "#333333"))
        if bar.capacity:
            summary = f"used {bar.used:,} of {bar.capacity:,} bytes ({100 * bar.used / bar.capacity:.1f} %)"
        else:
            summary = f"used {bar.used:,} bytes ({size_text(bar.used)})"
        y += 17
        body.append(_text(MARGIN, y, summary, 12, "#333333"))
        y += 8
        span = inner if bar.capacity else inner * (bar.used / shared if shared else 0)
        widths = _widths([s.size for s in bar.segments], bar.capacity or bar.used, span)
        x = float(MARGIN)
        body.append(f'<g><title>{escape(bar.name)}: {escape(bar.detail)}</title>')
        for seg, w in zip(bar.segments, widths):
            if w <= 0:
                continue
            colour, ink, _ = KINDS[seg.kind]
            stroke = ' stroke="#bdbdbd" stroke-width="1"' if seg.kind == "free" else ""
            body.append(f'<rect x="{x:.2f}" y="{y:.1f}" width="{w:.2f}" height="{BAR_HEIGHT}" fill="{colour}"{stroke}>'
                        f"<title>{escape(seg.label)}: {seg.size:,} bytes</title></rect>")
            inside = f"{seg.label} {size_text(seg.size)}"
            if len(inside) * 11 * CHAR + 8 <= w:
                body.append(_text(x + w / 2, y + BAR_HEIGHT / 2 + 4, inside, 11, ink, anchor="middle"))
            x += w
        body.append(f'<rect x="{MARGIN}" y="{y:.1f}" width="{span if span else 1:.2f}" height="{BAR_HEIGHT}" '
                    'fill="none" stroke="#000000" stroke-width="1"/></g>')
        y += BAR_HEIGHT
        # the list: every segment, its bytes and share of the bar
        base = bar.capacity or bar.used
        cols = 2 if len(bar.segments) > 3 else 1
        col_w = inner / 2
        rows = -(-len(bar.segments) // cols)
        for i, seg in enumerate(bar.segments):
            col, row = divmod(i, rows)
            lx, ly = MARGIN + col * col_w, y + 16 + row * ROW
            colour = KINDS[seg.kind][0]
            body.append(f'<rect x="{lx:.1f}" y="{ly - 10:.1f}" width="11" height="11" fill="{colour}" '
                        'stroke="#666666" stroke-width="0.5"/>')
            body.append(_text(lx + 17, ly, seg.label, 12))
            body.append(_text(lx + col_w - 92, ly, f"{seg.size:,} B", 12, anchor="end"))
            body.append(_text(lx + col_w - 24, ly, _share(seg.size, base), 12, "#333333", anchor="end"))
        y += 16 + rows * ROW
    y += 10
    body.append(_text(MARGIN, y, "needle-fw post-link check (memory.txt's figures, generator/build/memmap.py)",
                      10, "#777777"))
    height = int(y + 14)
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}" font-family="{FONT}">\n'
            f"<title>memory map: {escape(name)}</title>\n"
            f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#ffffff"/>\n')
    return head + "\n".join(body) + "\n</svg>\n"


def write(path: str, rep, board: dict, board_name: str | None = None) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(render(rep, board, board_name))
    os.replace(tmp, path)
