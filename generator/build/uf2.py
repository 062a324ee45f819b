"""UF2 images: what a boot ROM with a USB drive takes by drag and drop (the RP2350's BOOTSEL).

The format (Microsoft's UF2 specification, github.com/microsoft/uf2): a file of 512-byte
blocks, each on its own: little-endian words magic 0x0A324655, magic 0x9E5D5157, flags,
target address, payload size, block number, block count, and (flag 0x00002000, "family ID
present") the family ID in the word where a file size would otherwise be; 476 bytes of data
of which the first `payload size` count; a closing magic 0x0AB16F30.

The RP2350's boot ROM (RP2350 datasheet, "UF2 support"; the family IDs are the pico-sdk's
boot/uf2.h and the UF2 repository's uf2families.json): it takes blocks of exactly 256 bytes of
payload at 256-byte aligned addresses, with the family ID of the image kind (an Arm image
that runs in the secure state, as this firmware does: "rp2350-arm-s", 0xE48BFF59), each
address in the flash (XIP from 0x10000000; this board's flash_bytes of it).  A block's number
counts from 0 within the file and every block states the file's block count.

Here every loadable region of the ELF (generator.build.images.load_regions: the code region
with .data's load image, and a linked archive in its own region) goes into one UF2 file,
region after region, each as a run of 256-byte blocks from its load address; a region's
last block is padded with 0xFF (erased flash).  Nothing else (no gap fill between regions).
"""

from __future__ import annotations

import struct

from generator.errors import CactError

MAGIC_START0 = 0x0A324655       # "UF2\n"
MAGIC_START1 = 0x9E5D5157
MAGIC_END = 0x0AB16F30
FLAG_FAMILY_ID = 0x00002000
BLOCK = 512
PAYLOAD = 256
DATA_FIELD = 476
FILE_NAME = "needle.uf2"

# [flash] uf2_family in a board file -> (family ID, the chip, flash window of its boot ROM)
FAMILIES = {
    "rp2350-arm-s": (0xE48BFF59, "RP2350", 0x10000000, 0x11000000),
}


def family(board: dict) -> str | None:
    """The board's UF2 family (its [flash] uf2_family), or None."""
    return board.get("flash", {}).get("uf2_family")


def refusal(board: dict) -> str | None:
    """One line refusing a UF2 for `board` (uf2=1), or None when it has one."""
    if family(board):
        return None
    return (f"board {board['name']} is not an RP2350: a UF2 image is for a boot ROM that takes one "
            "by drag and drop (rp2350-pico-plus2); flash this board's images with flash=1")


def blocks(loads: list[tuple[int, bytes]], family_id: int, window: tuple[int, int]) -> bytes:
    """The UF2 file of `loads` ((load address, bytes) per region, in order)."""
    lo, hi = window
    pages = []
    for address, data in loads:
        if address % PAYLOAD:
            raise CactError(f"a UF2 image starts its blocks on {PAYLOAD}-byte boundaries: the region at "
                            f"0x{address:08X} does not")
        if address < lo or address + len(data) > hi:
            raise CactError(f"the image at 0x{address:08X} ({len(data):,} bytes) is outside the flash the "
                            f"boot ROM writes from a UF2 (0x{lo:08X}..0x{hi:08X})")
        for off in range(0, len(data), PAYLOAD):
            page = data[off:off + PAYLOAD]
            pages.append((address + off, page + b"\xff" * (PAYLOAD - len(page))))
    out = bytearray()
    for number, (address, page) in enumerate(pages):
        head = struct.pack("<8I", MAGIC_START0, MAGIC_START1, FLAG_FAMILY_ID, address, PAYLOAD, number,
                           len(pages), family_id)
        out += head + page + bytes(DATA_FIELD - PAYLOAD) + struct.pack("<I", MAGIC_END)
    return bytes(out)


def for_board(board: dict, loads: list[tuple[dict, int, bytes]]) -> bytes:
    """The UF2 file of a board's loadable regions (images.load_regions' triples)."""
    family_id, _, lo, hi = FAMILIES[family(board)]
    hi = min(hi, lo + board["memory"]["flash_bytes"])
    return blocks([(address, data) for _, address, data in loads], family_id, (lo, hi))
