"""Bare-metal builds write flashable images: one file per loadable memory region at its load
address (never a gap-filled `objcopy -O binary` file), listed in images.json, and the memory
report says what each region's image holds (generator/build/images.py)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from generator.build import boards, images
from host_tests.scons_run import build_each

ROOT = Path(__file__).resolve().parent.parent
ARCHIVE = ROOT / "host_tests" / "golden" / "tiny" / "archive.cact"   # the demo's preset (tiny, seed 1)
WATCHES = [b for b in boards.names() if boards.load(b)["os"] == "none"]


@pytest.fixture(scope="module")
def watch_builds(tmp_path_factory):
    return build_each(WATCHES, ARCHIVE, tmp_path_factory.mktemp("flash"))


def loads(elf_path: Path) -> list[tuple[int, bytes]]:
    """(load address, file bytes) of every PT_LOAD segment with contents."""
    with open(elf_path, "rb") as fh:
        return [(s["p_paddr"], s.data()[:s["p_filesz"]]) for s in ELFFile(fh).iter_segments()
                if s["p_type"] == "PT_LOAD" and s["p_filesz"]]


def region_at(board: dict, address: int) -> dict:
    return next(r for r in board["memory"]["regions"] if r["origin"] <= address < r["origin"] + r["length"])


def parse_ihex(path: Path) -> dict[int, int]:
    """address -> byte of an Intel HEX file (objcopy -O ihex: records 00, 01, 02, 04, 03/05)."""
    mem, base = {}, 0
    for line in path.read_text().split():
        rec = bytes.fromhex(line[1:])
        n, addr, kind, data = rec[0], int.from_bytes(rec[1:3], "big"), rec[3], rec[4:4 + rec[0]]
        assert sum(rec) % 256 == 0 and len(data) == n
        if kind == 0:
            for i, b in enumerate(data):
                mem[base + addr + i] = b
        elif kind == 2:
            base = int.from_bytes(data, "big") << 4
        elif kind == 4:
            base = int.from_bytes(data, "big") << 16
    return mem


@pytest.mark.parametrize("name", WATCHES)
def test_image_set_is_one_file_per_region(watch_builds, name):
    board, out = boards.load(name), watch_builds[name]
    manifest = json.loads((out / "images.json").read_text())
    assert manifest["board"] == name
    entries = manifest["images"]
    assert not (out / "needle.bin").exists()
    # every image file of the build is in the manifest, and nothing else is
    assert {p.name for p in out.glob("*.bin")} == {e["file"] for e in entries}
    regions = {r["name"]: r for r in board["memory"]["regions"]}
    segs = loads(out / "needle.elf")
    elf_images = [e for e in entries if e["file"] != "archive.bin"]
    for e in entries:
        data = (out / e["file"]).read_bytes()
        region, address = regions[e["region"]], int(e["address"], 16)
        assert e["size"] == len(data) and 0 < len(data) < region["length"]
        assert hashlib.sha256(data).hexdigest() == e["sha256"]
        if e["file"] == "archive.bin":        # the partition, flashed at its region's origin
            assert region["use"] == "archive" and address == region["origin"]
            assert board["archive"]["placement"] == "partition" and data == ARCHIVE.read_bytes()
        else:
            assert e["file"] == f"needle-{e['region']}-0x{address:08X}.bin"
            assert address == min(a for a, _ in segs if region_at(board, a) is region)
    # the images hold the segments' bytes and nothing more: no fill between regions, and inside
    # a region only the alignment padding between its segments (less than 64 bytes each)
    spans: dict = {}
    for a, d in segs:
        lo, hi = spans.get(region_at(board, a)["name"], (a, a + len(d)))
        spans[region_at(board, a)["name"]] = (min(lo, a), max(hi, a + len(d)))
    assert sum(e["size"] for e in elf_images) == sum(hi - lo for lo, hi in spans.values())
    assert sum(hi - lo for lo, hi in spans.values()) - sum(len(d) for _, d in segs) < 64 * len(segs)
    assert sorted(e["region"] for e in elf_images) == sorted({region_at(board, a)["name"] for a, _ in segs})
    expected_regions = {"code"} | ({"archive"} if board["archive"]["placement"] == "linked" else set())
    assert {regions[e["region"]]["use"] for e in elf_images} == expected_regions


@pytest.mark.parametrize("name", WATCHES)
def test_images_load_back_to_the_elf(watch_builds, name):
    """Flash every image at its address into a model of the board's memory: the loaded bytes
    are the ELF's, and agree with objcopy's Intel HEX of the image."""
    board, out = boards.load(name), watch_builds[name]
    memory = {r["name"]: bytearray(r["length"]) for r in board["memory"]["regions"]}
    written = {r["name"]: bytearray(r["length"]) for r in board["memory"]["regions"]}
    for e in json.loads((out / "images.json").read_text())["images"]:
        address, data = int(e["address"], 16), (out / e["file"]).read_bytes()
        region = region_at(board, address)
        assert address + len(data) <= region["origin"] + region["length"]
        off = address - region["origin"]
        memory[region["name"]][off:off + len(data)] = data
        assert not any(written[region["name"]][off:off + len(data)])     # no two images overlap
        written[region["name"]][off:off + len(data)] = b"\x01" * len(data)
    for address, data in loads(out / "needle.elf"):
        region = region_at(board, address)
        off = address - region["origin"]
        assert memory[region["name"]][off:off + len(data)] == data, f"segment at 0x{address:x}"
    image_bytes = {}
    for e in json.loads((out / "images.json").read_text())["images"]:
        if e["file"] != "archive.bin":          # the partition is not in the firmware's HEX
            base = int(e["address"], 16)
            image_bytes.update((base + i, b) for i, b in enumerate((out / e["file"]).read_bytes()))
    # objcopy writes sections; a segment also holds the alignment padding between them (zeros)
    hex_bytes = parse_ihex(out / "needle.hex")
    assert all(image_bytes.get(a) == b for a, b in hex_bytes.items())
    # the rest is padding: zeros inside a segment, erased flash (never written) between two
    # segments of one region
    padding = [a for a in image_bytes if a not in hex_bytes]
    assert all(image_bytes[a] in (0, images.ERASED) for a in padding) and len(padding) < 256


@pytest.mark.parametrize("name", WATCHES)
def test_memory_report_names_each_region_image(watch_builds, name):
    out = watch_builds[name]
    report = (out / "memory.txt").read_text()
    got = re.findall(r"^  image (\S+) +at 0x([0-9A-F]{8}): ([\d,]+) bytes$", report, re.M)
    want = [(e["region"], e["address"][2:], f"{e['size']:,}")
            for e in json.loads((out / "images.json").read_text())["images"] if e["file"] != "archive.bin"]
    assert got == want
    assert report.startswith(f"memory report ({name}):\n  flash ")


def test_a_segment_outside_the_board_regions_is_refused(watch_builds, tmp_path):
    from generator.build import images
    from generator.errors import CactError
    board = boards.load("watch-m4")
    board["memory"]["regions"] = [r for r in board["memory"]["regions"] if r["use"] != "archive"]
    with pytest.raises(CactError, match=r"segment at 0x21000000 .* outside every region"):
        images.split_images(str(watch_builds["watch-m4"] / "needle.elf"), board, str(tmp_path))
