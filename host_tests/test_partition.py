"""A partition board (watch-m7: the archive flashed on its own at 0x60000000) checks every
byte of the partition at boot (SHA-256 over the archive's size): erased, truncated, damaged
and swapped partitions are refused with exit 3 and one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from generator.archive import reader
from generator.build import boards
from host_tests import archive_edit
from host_tests.scons_run import scons

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "host_tests" / "golden" / "tiny" / "archive.cact"


@pytest.fixture(scope="module")
def m7(tmp_path_factory):
    board = boards.load("watch-m7")
    why = boards.missing_tools(board, run=True)
    if why:
        pytest.skip(why)
    out = tmp_path_factory.mktemp("m7")
    scons("board=watch-m7", f"archive={TINY}", f"build={out}")
    return board, out / "needle.elf"


def test_the_matching_partition_boots(m7, tmp_path, board_runner):
    proc = board_runner(*m7, TINY).run(["--info"], timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert reader.read(str(TINY)).sha256() in proc.stdout


@pytest.mark.parametrize("kind", ["erased", "truncated", "bit-flipped", "swapped"])
def test_a_bad_partition_is_refused(m7, kind, tmp_path, board_runner):
    data = TINY.read_bytes()
    if kind == "erased":                  # a partition never written: NOR flash reads 0xFF
        image = b"\xff" * len(data)
    elif kind == "truncated":             # the tail of the partition is still erased
        image = data[:-4096] + b"\xff" * 4096
    elif kind == "bit-flipped":
        flipped = bytearray(data)
        flipped[len(data) - 100] ^= 0x04
        image = bytes(flipped)
    else:                                 # same header and directory, other weights
        image = archive_edit.perturb_tensor(reader.read(str(TINY)), "final_norm", seed=5)
        end = archive_edit.directory_end(data)
        assert len(image) == len(data) and image[:end] == data[:end]
    path = tmp_path / "archive.bin"
    path.write_bytes(image)
    proc = board_runner(*m7, path).run(["--info"], timeout=600)
    assert proc.returncode == 3, (kind, proc.stdout, proc.stderr)
    assert proc.stderr.count("\n") == 1, proc.stderr
    if kind == "erased":
        assert "the archive's tag differs from the one this engine was generated for" in proc.stderr
    else:
        sha = reader.read(str(TINY)).sha256()[:16]
        assert (f"the archive partition is not the archive this engine was generated for (its SHA-256 over "
                f"{len(data)} bytes differs from {sha}...): flash the matching archive.bin again") in proc.stderr
