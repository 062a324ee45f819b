"""The memory map every build draws (<build>/memory.svg, generator/build/memmap.py).

The quick tests draw made-up reports; the build tests check that a real build writes the
picture beside memory.txt, from memory.txt's figures, and that `scons -c` removes it."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from generator.build import boards, elfcheck, memmap
from host_tests.scons_run import scons

SVG = "{http://www.w3.org/2000/svg}"


def parse(text: str) -> ET.Element:
    root = ET.fromstring(text)
    assert root.tag == f"{SVG}svg"
    for key in ("width", "height", "viewBox"):
        assert root.get(key), key
    w, h = int(root.get("width")), int(root.get("height"))
    assert root.get("viewBox") == f"0 0 {w} {h}"
    return root


def texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(f"{SVG}text")]


def bare_report() -> elfcheck.Report:
    rep = elfcheck.Report(flash={".vectors": 64, ".text": 70_000, ".rodata": 20_000, ".data (load image)": 500},
                          ram={".data": 500, ".bss": 400_000, ".fault_stack": 512, ".stack_guard": 1024,
                               ".stack": 16_384},
                          cact_bytes=379_226, state_bytes=250_000, kv_bytes=165_888, prefill_bytes=60_000)
    rep.addresses = {".vectors": 0, ".text": 0x100, ".rodata": 0x20000, ".data": 0x20000000,
                     ".bss": 0x20001000, ".fault_stack": 0x20080000, ".stack_guard": 0x20080400,
                     ".stack": 0x20080800}
    return rep


@pytest.mark.quick
def test_bare_metal_regions_hold_the_reports_figures():
    board = boards.load("watch-m4")
    rep = bare_report()
    drawn = memmap.bars(rep, board)
    assert [b.name for b in drawn] == [r["name"] for r in board["memory"]["regions"]]
    assert all(b.capacity and sum(s.size for s in b.segments) == b.capacity for b in drawn)
    flash = sum(s.size for b in drawn for s in b.segments if s.kind in ("code", "rodata", "archive"))
    ram = sum(s.size for b in drawn for s in b.segments if s.kind in ("kv", "prefill", "state", "data", "stack",
                                                                      "guard", "fault"))
    assert flash == rep.flash_total and ram == rep.ram_total
    by = {b.name: {s.kind: s.size for s in b.segments} for b in drawn}
    assert by["ARCHIVE"]["archive"] == 379_226
    assert by["FLASH"]["code"] == rep.code_bytes
    assert by["RAM"]["kv"] == 165_888 and by["RAM"]["stack"] == 16_384
    root = parse(memmap.render(rep, board))
    words = texts(root)
    assert words[0] == "watch-m4"                         # the title: the board's name
    assert "KV cache" in words and "165,888 B" in words and "free" in words


@pytest.mark.quick
def test_linux_board_has_no_free_part():
    board = boards.load("router-mt7621")
    rep = elfcheck.Report(flash={".text": 600_000, ".rodata": 100_000}, ram={".bss": 1_500_000},
                          archive_file=379_226, state_bytes=700_000, kv_bytes=165_888, prefill_bytes=483_456,
                          flash_label="package")
    drawn = memmap.bars(rep, board)
    assert [b.name for b in drawn] == ["package", "archive file", "RAM"]
    assert all(b.capacity is None for b in drawn)
    assert not any(s.kind == "free" for b in drawn for s in b.segments)
    assert sum(s.size for s in drawn[-1].segments) == rep.ram_total
    svg = memmap.render(rep, board)
    parse(svg)
    assert "no fixed size" in svg and ">free<" not in svg


@pytest.mark.quick
def test_small_segments_are_listed_not_labelled_in_the_bar():
    """A segment too narrow for its label is named in the list only: no text overlaps."""
    root = parse(memmap.render(bare_report(), boards.load("watch-m4")))
    spans = []                                 # (y, x0, x1) of every text, width estimated
    for t in root.iter(f"{SVG}text"):
        size, x = float(t.get("font-size")), float(t.get("x"))
        w = len(t.text or "") * size * memmap.CHAR
        x0 = {"start": x, "middle": x - w / 2, "end": x - w}[t.get("text-anchor")]
        spans.append((float(t.get("y")), x0, x0 + w, size))
    for i, (y, a0, a1, s) in enumerate(spans):
        for y2, b0, b1, s2 in spans[i + 1:]:
            if abs(y - y2) < max(s, s2):
                assert a1 <= b0 or b1 <= a0, f"texts overlap at y={y}"
    width = float(root.get("width"))
    assert all(0 <= x0 and x1 <= width for _, x0, x1, _ in spans)
    # the 512-byte fault stack of a 4 MiB region is drawn (at least a sliver) and listed
    rects = [r for r in root.iter(f"{SVG}rect") if "fault stack" in (r.findtext(f"{SVG}title") or "")]
    assert rects and float(rects[0].get("width")) >= memmap.MIN_SEGMENT


@pytest.mark.quick
def test_same_report_same_picture():
    board = boards.load("watch-m4")
    assert memmap.render(bare_report(), board) == memmap.render(bare_report(), board)


def figures(report: str) -> tuple[int, int]:
    flash = int(re.search(r"^  (?:flash|package)\s+([\d,]+) bytes", report, re.M).group(1).replace(",", ""))
    ram = int(re.search(r"^  RAM\s+([\d,]+) bytes", report, re.M).group(1).replace(",", ""))
    return flash, ram


def test_host_build_writes_memory_svg_and_clean_removes_it(tmp_path):
    build = tmp_path / "host"
    scons("board=host", f"build={build}")
    svg = (build / "memory.svg").read_text()
    root = parse(svg)
    assert texts(root)[0] == "host" and "no fixed size" in svg
    flash, ram = figures((build / "memory.txt").read_text())
    words = "\n".join(texts(root))
    assert f"used {flash:,} bytes" in words and f"used {ram:,} bytes" in words
    scons("board=host", f"build={build}", "-c")
    assert not (build / "memory.svg").exists() and not (build / "memory.txt").exists()


@pytest.mark.emulator
def test_bare_metal_build_draws_its_regions(tmp_path):
    """watch-m4: FLASH, RAM and ARCHIVE drawn; what they hold adds up to memory.txt's figures."""
    build = tmp_path / "watch-m4"
    scons("board=watch-m4", f"build={build}")
    root = parse((build / "memory.svg").read_text())
    words = texts(root)
    assert words[0] == "watch-m4" and {"FLASH", "RAM", "ARCHIVE"} <= set(words)
    flash, ram = figures((build / "memory.txt").read_text())
    used = [int(m.group(1).replace(",", "")) for m in (re.match(r"used ([\d,]+) of", w) for w in words) if m]
    assert sum(used) == flash + ram
