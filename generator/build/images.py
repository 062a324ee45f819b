"""Flashable images of a bare-metal firmware: one file per loadable memory region.

`objcopy -O binary` writes one file from the lowest to the highest load address, filling
the gaps between regions (0x00000000 code and 0x21000000 PSRAM make half a gigabyte of
zeros).  Here every PT_LOAD segment with file contents goes, at its load address (p_paddr:
`.data`'s initial values load into the code region), to the board region that holds it, and
each region gets its own image `needle-<REGION>-0x<address>.bin` -- what a programmer
flashes at that address.  `images.json` lists every image file of the build (a partition
board's `archive.bin` too) with its region, load address, size and sha256.
"""

from __future__ import annotations

import hashlib
import json
import os

from elftools.elf.elffile import ELFFile

from generator.build import uf2
from generator.errors import CactError

MANIFEST = "images.json"
ERASED = 0xFF      # what flash holds between two segments of one region (none today)


def image_name(region: dict, address: int) -> str:
    return f"needle-{region['name']}-0x{address:08X}.bin"


def expected_images(board: dict) -> list[str]:
    """The image files a build of `board` writes: the code region (code, rodata, `.data`'s
    load image) and, when the archive is linked in, the archive region."""
    names = []
    for r in board["memory"]["regions"]:
        if r["use"] == "code" or (r["use"] == "archive" and board["archive"]["placement"] == "linked"):
            names.append(image_name(r, r["origin"]))
    if uf2.family(board):
        names.append(uf2.FILE_NAME)
    return names


def load_regions(elf: ELFFile, board: dict) -> list[tuple[dict, int, bytes]]:
    """(region, load address, bytes) for every board region that PT_LOAD segments put file
    contents in, by address.  A segment outside every region, or across a region's end, is
    an error."""
    found: dict[str, list[tuple[int, bytes]]] = {}
    regions = board["memory"]["regions"]
    for seg in elf.iter_segments():
        if seg["p_type"] != "PT_LOAD" or seg["p_filesz"] == 0:
            continue
        start, size = seg["p_paddr"], seg["p_filesz"]
        region = next((r for r in regions if r["origin"] <= start < r["origin"] + r["length"]), None)
        if region is None or start + size > region["origin"] + region["length"]:
            where = f"region {region['name']}" if region else "every region of the board"
            raise CactError(f"a loadable segment at 0x{start:08x} ({size:,} bytes) is outside {where} "
                            f"(boards/{board['name']}.toml [memory] regions)")
        found.setdefault(region["name"], []).append((start, seg.data()[:size]))
    out = []
    for r in regions:
        if r["name"] not in found:
            continue
        segs = sorted(found[r["name"]])
        base = segs[0][0]
        end = max(a + len(d) for a, d in segs)
        image = bytearray([ERASED]) * (end - base)
        for addr, data in segs:
            image[addr - base:addr - base + len(data)] = data
        out.append((r, base, bytes(image)))
    return out


def split_images(elf_path: str, board: dict, out_dir: str, archive_image: str | None = None) -> list[dict]:
    """Write one image per loadable region of `elf_path` into out_dir and the manifest
    (images.json); `archive_image` is a partition board's archive.bin, listed at its
    partition.  Returns the manifest's entries."""
    try:
        with open(elf_path, "rb") as fh:
            loads = load_regions(ELFFile(fh), board)
    except OSError as exc:
        raise CactError(f"cannot read {elf_path}: {exc.strerror}") from None
    entries = []
    for region, address, data in loads:
        name = image_name(region, address)
        with open(os.path.join(out_dir, name), "wb") as fh:
            fh.write(data)
        entries.append({"file": name, "region": region["name"], "address": f"0x{address:08X}",
                        "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    if archive_image:
        region = next(r for r in board["memory"]["regions"] if r["use"] == "archive")
        with open(archive_image, "rb") as fh:
            data = fh.read()
        entries.append({"file": os.path.basename(archive_image), "region": region["name"],
                        "address": f"0x{region['origin']:08X}", "size": len(data),
                        "sha256": hashlib.sha256(data).hexdigest()})
    manifest = {"board": board["name"], "images": entries}
    if uf2.family(board):
        data = uf2.for_board(board, loads)
        with open(os.path.join(out_dir, uf2.FILE_NAME), "wb") as fh:
            fh.write(data)
        family_id = uf2.FAMILIES[uf2.family(board)][0]
        manifest["uf2"] = {"file": uf2.FILE_NAME, "family": uf2.family(board), "family_id": f"0x{family_id:08X}",
                           "blocks": len(data) // uf2.BLOCK, "size": len(data),
                           "sha256": hashlib.sha256(data).hexdigest()}
    with open(os.path.join(out_dir, MANIFEST), "w", encoding="utf-8", newline="\n") as fh:
        json.dump(manifest, fh, indent=2)
        fh.write("\n")
    return entries
