"""Issue 41, the build's items: a tool list, a board file, a kernel family or an archive the
engine builds for each fails in one line naming the cause (or works), never deep in the
compiler, the linker or a benchmark step."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from generator.build import boards
from generator.errors import CactError
from host_tests.scons_run import scons

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "host_tests" / "golden"


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """The single stderr line of a refused scons run (exit 2)."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def emit(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "generator", "emit", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


# ---- 20: tools= naming a directory or a device ---------------------------------------

def test_tools_directory_and_non_regular_file_say_what_they_are(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    line = one_line_error(scons("board=host", f"tools={tmp_path}", f"build={tmp_path / 'b'}", check=False))
    assert line == (f"scons: error: tools={tmp_path} is a directory (pass a JSON tool list, "
                    f"e.g. tools=demo/tools.json)")
    line = one_line_error(scons("board=host", f"tools={fifo}", f"build={tmp_path / 'b'}", check=False))
    assert line == (f"scons: error: tools={fifo} is not a regular file (pass a JSON tool list, "
                    f"e.g. tools=demo/tools.json)")
    line = one_line_error(scons("board=host", f"tools={tmp_path / 'nope.json'}", f"build={tmp_path / 'b'}",
                                check=False))
    assert "nope.json does not exist" in line
    assert not (tmp_path / "b").exists()


# ---- 21 and 27c: board files ------------------------------------------------------------

@pytest.mark.parametrize("edit, message", [
    # 27c: type names a user reads, and true is not an integer
    (lambda t: t.replace("ram_bytes = 4194304", 'ram_bytes = "lots"'), "memory.ram_bytes must be an integer"),
    (lambda t: t.replace("ram_bytes = 4194304", "ram_bytes = true"), "memory.ram_bytes must be an integer"),
    (lambda t: t.replace("stack_bytes = 16384", "stack_bytes = 1.5"), "'stack_bytes' must be an integer"),
    (lambda t: t.replace('os = "none"', "os = 3"), "'os' must be a string"),
    (lambda t: re.sub(r"(?m)^arch_flags = .*$", 'arch_flags = "-mthumb"', t), "'arch_flags' must be a list"),
    (lambda t: t.replace("[archive]", "[archive]\nmap_address = []"), "archive.map_address must be an integer"),
    # 21: regions that overlap, or end past the 32-bit address space, are refused at load
    (lambda t: t.replace("origin = 0x20000000", "origin = 0x00200000"),
     "regions FLASH (0x00000000..0x00400000) and RAM (from 0x00200000) overlap: each byte belongs to one region"),
    (lambda t: t.replace("origin = 0x21000000, length = 0x01000000", "origin = 0xFF000000, length = 0x02000000"),
     "region ARCHIVE (origin 0xFF000000, length 0x2000000) must have a positive length and end within the "
     "32-bit address space (at most 0x100000000)"),
    (lambda t: t.replace("length = 0x00400000, use = \"data\"", "length = 0, use = \"data\""),
     "region RAM (origin 0x20000000, length 0x0) must have a positive length"),
    (lambda t: t.replace('name = "RAM"', 'name = "FLASH"'), "two regions are named FLASH"),
])
def test_board_file_values_are_refused_at_load_in_words(board_error, edit, message):
    assert message in board_error("watch-m4", edit)


def test_overlapping_regions_never_reach_the_images_step(board_error):
    """Before: accepted at load, then 'a loadable segment ... is outside region' at the
    images step, after a full build.  An inherited board's regions are checked too."""
    msg = board_error("watch-m4", lambda t: t.replace("origin = 0x21000000", "origin = 0x203F0000"))
    assert "regions RAM (0x20000000..0x20400000) and ARCHIVE (from 0x203F0000) overlap" in msg


# ---- 22: kernel families of another architecture ----------------------------------------

@pytest.mark.parametrize("board, family", [("host", "neon64"), ("host", "mdsp"), ("watch-m4", "x86"),
                                           ("rpi5", "armv6"), ("router-mt7621", "neon32")])
def test_emit_refuses_another_architectures_kernels(tmp_path, board, family):
    proc = emit(GOLDEN / "tiny" / "archive.cact", "-o", tmp_path / "gen", "--board", board, "--kernels", family)
    assert proc.returncode == 2, proc.stderr
    b = boards.load(board)
    assert proc.stderr == (f"error: --kernels {family} is {boards.FAMILY_ARCH[family]} code and board {board} is "
                           f"{boards.board_arch(b)}: choose one of {', '.join(boards.board_families(b))}\n")
    assert "scalar" in boards.board_families(b) and family not in boards.board_families(b)
    assert not (tmp_path / "gen").exists()


def test_scons_refuses_another_architectures_kernels(tmp_path):
    line = one_line_error(scons("board=watch-m4", "kernels=x86", f"build={tmp_path / 'b'}", check=False))
    assert line == ("scons: error: kernels=x86 is x86-64 code and board watch-m4 is Arm Cortex-M: "
                    "choose one of mdsp, mve, scalar")
    assert not (tmp_path / "b" / "needle.elf").exists()


def test_every_board_builds_its_own_family():
    for name in boards.names():
        b = boards.load(name)
        assert boards.kernel_family(b) in boards.board_families(b), name
        assert boards.kernels_refusal(b, "scalar") is None


def test_board_file_with_another_architectures_family_is_refused(board_error):
    msg = board_error("watch-m4", lambda t: t.replace('kernels = "mdsp"', 'kernels = "neon64"'))
    assert msg.endswith("kernels = neon64 is aarch64 code and board watch-m4 is Arm Cortex-M: "
                        "choose one of mdsp, mve, scalar")
