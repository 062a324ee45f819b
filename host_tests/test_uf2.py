"""UF2 for the RP2350 (issue 49 item 2): rp2350-pico-plus2's build writes needle.uf2 beside its
.bin and .hex images, every loadable region in one file for the boot ROM's USB drive
(generator/build/uf2.py), listed in images.json.  Checked here by readers that share no code
with the writer: one written from the UF2 specification in this file (magic numbers, block
numbering and count, the family ID flag and value, 256-byte payloads at 256-byte aligned
addresses, contiguous within each region, inside the XIP flash), and the adafruit-uf2
package's own reader and family table; both against the ELF's loadable segments, byte for
byte.  No RP2350 is attached here: the boot ROM's acceptance is not tested, and picotool
(not packaged for Debian 12) is only ever printed (flash=dry) or found missing."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import struct
import sys
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from generator.build import boards, flash
from host_tests.scons_run import ROOT, scons

ARCHIVE = ROOT / "host_tests" / "golden" / "tiny" / "archive.cact"
BOARD = "rp2350-pico-plus2"
# from the UF2 specification (github.com/microsoft/uf2, README "File format"), not from the writer
MAGIC = (0x0A324655, 0x9E5D5157)
MAGIC_END = 0x0AB16F30
FAMILY_PRESENT = 0x00002000
RP2350_ARM_S = 0xE48BFF59        # pico-sdk boot/uf2.h RP2350_ARM_S_FAMILY_ID; uf2families.json "RP2350_ARM_S"
XIP_BASE, FLASH_BYTES = 0x10000000, 16 * 1024 * 1024

pytestmark = pytest.mark.skipif(boards.missing_tools(boards.load("watch-m4")) is not None,
                                reason="needs arm-none-eabi-gcc")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("uf2") / BOARD
    scons(f"board={BOARD}", f"archive={ARCHIVE}", f"build={out}", "uf2=1")
    return out


def read_uf2(data: bytes) -> list[tuple[int, bytes]]:
    """(address, payload) of every block, checked against the specification."""
    assert len(data) % 512 == 0 and data, len(data)
    count = len(data) // 512
    out = []
    for i in range(count):
        block = data[i * 512:(i + 1) * 512]
        m0, m1, flags, address, size, number, total, family = struct.unpack_from("<8I", block)
        assert (m0, m1) == MAGIC and struct.unpack_from("<I", block, 508)[0] == MAGIC_END, i
        assert flags == FAMILY_PRESENT and family == RP2350_ARM_S, (i, hex(flags), hex(family))
        assert (number, total) == (i, count)
        assert size == 256 and address % 256 == 0
        assert XIP_BASE <= address and address + size <= XIP_BASE + FLASH_BYTES
        assert not any(block[32 + size:508])            # the rest of the data field is zero
        out.append((address, block[32:32 + size]))
    return out


def segments(elf_path: Path) -> list[tuple[int, bytes]]:
    with open(elf_path, "rb") as fh:
        elf = ELFFile(fh)
        return [(s["p_paddr"], s.data()[:s["p_filesz"]]) for s in elf.iter_segments()
                if s["p_type"] == "PT_LOAD" and s["p_filesz"]]


def test_uf2_holds_every_loadable_segment(built):
    data = (built / "needle.uf2").read_bytes()
    blocks = read_uf2(data)
    memory = {}
    runs = []                                   # contiguous runs of blocks
    for address, payload in blocks:
        assert address not in memory            # no page written twice
        for k, b in enumerate(payload):
            memory[address + k] = b
        if runs and runs[-1][1] == address:
            runs[-1][1] = address + 256
        else:
            runs.append([address, address + 256])
    segs = segments(built / "needle.elf")
    covered = set()
    for address, seg in segs:
        assert bytes(memory.get(address + k, -1) for k in range(len(seg))) == seg, hex(address)
        covered.update(range(address, address + len(seg)))
    # what no segment covers is erased flash: alignment gaps and a run's last block's tail
    assert all(memory[a] == 0xFF for a in memory.keys() - covered)
    assert len(memory) - len(covered) < 256 * len(runs) + 64 * len(segs)
    # one run per region image: the code region and the archive's own region, each starting at
    # its image's load address
    manifest = json.loads((built / "images.json").read_text())
    assert [r[0] for r in runs] == sorted(int(e["address"], 16) for e in manifest["images"])
    assert sorted(runs)[1][0] == 0x10100000     # the archive region is in the UF2 too
    entry = manifest["uf2"]
    assert entry == {"file": "needle.uf2", "family": "rp2350-arm-s", "family_id": "0xE48BFF59",
                     "blocks": len(blocks), "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    # beside the .bin images and the .hex, and not one more image for a probe to program
    assert (built / "needle.hex").is_file() and all(e["file"].endswith(".bin") for e in manifest["images"])


def test_adafruit_reader_agrees(built, capsys):
    """adafruit-uf2's uf2conv (its own parser: flattens the blocks from the first address, zero
    between runs) and its family table."""
    try:
        from adafruit_uf2 import uf2conv
    except ImportError:
        pytest.skip("adafruit-uf2 is not installed: pip install adafruit-uf2==1.0.0")
    assert uf2conv.load_families()["RP2350_ARM_S"] == RP2350_ARM_S
    uf2conv.familyid = 0
    flat = uf2conv.convert_from_uf2((built / "needle.uf2").read_bytes())
    assert f"hex value is 0x{RP2350_ARM_S:08x}" in capsys.readouterr().out
    assert uf2conv.appstartaddr == XIP_BASE
    for address, seg in segments(built / "needle.elf"):
        assert flat[address - XIP_BASE:address - XIP_BASE + len(seg)] == seg, hex(address)


def test_flash_dry_with_picotool_prints_its_load_command(built):
    proc = scons(f"board={BOARD}", f"archive={ARCHIVE}", f"build={built}", "flash=dry", "probe=picotool")
    lines = [shlex.split(ln) for ln in proc.stdout.splitlines() if ln.startswith("picotool ")]
    assert lines == [["picotool", "load", "-x", str((built / "needle.uf2").resolve())]]
    assert lines == flash.commands(boards.load(BOARD), str(built.resolve()), "picotool")


def test_missing_picotool_is_one_line(tmp_path):
    env = dict(os.environ, PATH=str(Path(sys.executable).parent))
    proc = scons(f"board={BOARD}", f"build={tmp_path / 'b'}", "flash=1", "probe=picotool", check=False, env=env)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.strip() == (f"scons: error: flashing board {BOARD} needs picotool, which is not on PATH: "
                                   "build picotool 2.x from github.com/raspberrypi/picotool (Debian 12 has no package)")
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("args, message", [
    (["board=stm32h750b-dk", "uf2=1"], "board stm32h750b-dk is not an RP2350: a UF2 image is for a boot ROM"),
    (["board=watch-m4", "uf2=1"], "board watch-m4 is not an RP2350"),
    (["board=rpi-zero", "uf2=1"], "board rpi-zero is not an RP2350"),
    (["board=stm32h750b-dk", "flash=dry", "probe=picotool"], "board stm32h750b-dk is not an RP2350: picotool loads UF2"),
])
def test_uf2_for_another_board_is_refused(tmp_path, args, message):
    proc = scons(*args, f"build={tmp_path / 'b'}", check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert message in proc.stderr
    assert not (tmp_path / "b").exists()


def test_other_boards_write_no_uf2(tmp_path):
    from generator.build import images
    for name in boards.names():
        board = boards.load(name)
        if board["os"] == "none":
            assert ("needle.uf2" in images.expected_images(board)) == (name == BOARD)


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace('uf2_family = "rp2350-arm-s"', 'uf2_family = "rp2040"'),
     "flash.uf2_family must be one of rp2350-arm-s"),
    (lambda t: t.replace('uf2_family = "rp2350-arm-s"', '').replace('probe = "openocd"', 'probe = "picotool"'),
     'flash.probe = "picotool" loads a UF2 image: it needs flash.uf2_family'),
])
def test_board_file_checks_uf2_keys(board_error, edit, message):
    assert message in board_error(BOARD, edit)
