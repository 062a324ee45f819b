"""Routers as their users deploy them (issue 11): static musl executables with the devices'
ABI (soft-float MIPS32r2, checked after every link), the archive kept as a file and checked
in full at start, the package flash budget, the board-file rules, and the Pi boards' optional
musl build.  The routers' golden logits under their FPU-less cores are test_boards.py's."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import ARMAttributesSection

from generator.archive import reader
from generator.build import boards, elfcheck
from generator.commands import golden
from generator.errors import CactError
from host_tests import archive_edit
from host_tests.scons_run import scons

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "host_tests" / "golden"
TINY = GOLDEN / "tiny" / "archive.cact"
ROUTERS = ["router-mt7621", "router-ath79", "router-ipq40xx"]


@pytest.fixture(scope="module")
def router_builds(tmp_path_factory):
    root = tmp_path_factory.mktemp("routers")
    out = {}
    for name in ROUTERS:
        why = boards.missing_tools(boards.load(name), run=True)
        if why:
            pytest.skip(why)
        scons(f"board={name}", f"archive={TINY}", f"build={root / name}")
        out[name] = root / name / "needle"
    return out


# ---- the devices' ABI ------------------------------------------------------------------

@pytest.mark.parametrize("name", ["router-mt7621", "router-ath79"])
def test_mips_routers_are_static_soft_float_mips32r2(router_builds, name):
    with open(router_builds[name], "rb") as fh:
        elf = ELFFile(fh)
        assert elf["e_machine"] == "EM_MIPS"
        assert elf.little_endian == (name == "router-mt7621")
        assert not any(seg["p_type"] == "PT_INTERP" for seg in elf.iter_segments())    # static
        flags = elf.get_section_by_name(".MIPS.abiflags").data()
        version, isa_level, isa_rev, gpr, cpr1 = struct.unpack_from(elf.little_endian and "<HBBBB" or ">HBBBB", flags)
        assert (isa_level, isa_rev) == (32, 2) and cpr1 == 0
        assert flags[7] == elfcheck.MIPS_FP_ABI_SOFT
        elfcheck.check_soft_float(elf, name, boards.load(name))        # no FPU instruction


def test_ipq40xx_is_static_hard_float_armv7_neon(router_builds):
    with open(router_builds["router-ipq40xx"], "rb") as fh:
        elf = ELFFile(fh)
        assert elf["e_machine"] == "EM_ARM" and elf["e_flags"] & 0x400       # EF_ARM_ABI_FLOAT_HARD
        assert not any(seg["p_type"] == "PT_INTERP" for seg in elf.iter_segments())
        attrs = {}
        for sec in elf.iter_sections():
            if isinstance(sec, ARMAttributesSection):
                for sub in sec.iter_subsections():
                    for subsub in sub.iter_subsubsections():
                        for a in subsub.iter_attributes():
                            attrs[a.tag] = a.value
    assert attrs["TAG_CPU_ARCH"] == 10                # ARMv7
    assert attrs["TAG_ABI_VFP_ARGS"] == 1             # arguments in VFP registers: hard float
    assert attrs["TAG_ADVANCED_SIMD_ARCH"] >= 1       # NEON


def _zig(args: list[str], cwd: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "ziglang", "cc", *args], cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_hard_float_mips_code_is_refused(tmp_path):
    """The post-link check refuses a hard-float ABI tag and any FPU instruction."""
    board = boards.load("router-mt7621")
    (tmp_path / "f.c").write_text("float f(float x) { return x * x + 1.0f; }\n")
    _zig(["-target", "mipsel-linux-gnueabihf", "-mcpu=mips32r2", "-O2", "-c", "f.c", "-o", "hard.o"], tmp_path)
    with open(tmp_path / "hard.o", "rb") as fh:
        with pytest.raises(CactError, match=r"hard.o is built for double-precision hard float, but board "
                                            r"router-mt7621's core has no FPU: build it soft-float"):
            elfcheck.check_soft_float(ELFFile(fh), "hard.o", board)
    # a soft-float object with one FPU instruction in its code (lwc1 $f0, 0($sp))
    _zig(["-target", "mipsel-linux-musleabi", "-mcpu=mips32r2", "-O2", "-c", "f.c", "-o", "soft.o"], tmp_path)
    data = bytearray((tmp_path / "soft.o").read_bytes())
    with open(tmp_path / "soft.o", "rb") as fh:
        elf = ELFFile(fh)
        elfcheck.check_soft_float(elf, "soft.o", board)             # clean as built
        text = elf.get_section_by_name(".text")
        data[text["sh_offset"]:text["sh_offset"] + 4] = struct.pack("<I", 0xC7A00000)
    (tmp_path / "bad.o").write_bytes(bytes(data))
    with open(tmp_path / "bad.o", "rb") as fh:
        with pytest.raises(CactError, match=r"bad.o: FPU instruction LWC1 \(0xc7a00000\) at 0x0 in \.text; "
                                            r"board router-mt7621's core has no FPU"):
            elfcheck.check_soft_float(ELFFile(fh), "bad.o", board)


# ---- the archive as a file -------------------------------------------------------------

def _variants(tmp_path: Path) -> dict[str, Path]:
    data = TINY.read_bytes()
    a = reader.read(str(TINY))
    swapped = archive_edit.perturb_tensor(a, "final_norm", seed=3)
    assert len(swapped) == len(data) and swapped[:archive_edit.directory_end(data)] == \
        data[:archive_edit.directory_end(data)]       # same header and directory: the old boot check passed it
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x10
    out = {"truncated": data[:-4096], "swapped": swapped, "bit-flipped": bytes(flipped),
           "erased": b"\xff" * len(data), "other model": (GOLDEN / "small" / "archive.cact").read_bytes()}
    paths = {}
    for k, v in out.items():
        paths[k] = tmp_path / (k.replace(" ", "-") + ".cact")
        paths[k].write_bytes(v)
    return paths


@pytest.mark.parametrize("name", ROUTERS)
def test_archive_file_is_checked_in_full_at_start(router_builds, name, tmp_path, board_runner):
    exe = router_builds[name]

    def run(archive, *args):
        return board_runner(name, exe, archive).run(args, timeout=600)
    ok = run(TINY, "--info")
    assert ok.returncode == 0, ok.stderr
    assert f"archive   sha256 {reader.read(str(TINY)).sha256()}" in ok.stdout
    sha = reader.read(str(TINY)).sha256()[:16]
    expect = {"truncated": r"is 149,?978 bytes, not 154074: a truncated copy or another model",
              "swapped": r"has sha256 [0-9a-f]{16}\.\.\., not the archive this engine was built for: a damaged "
                         r"copy or another model",
              "bit-flipped": r"has sha256 [0-9a-f]{16}\.\.\., not the archive this engine was built for",
              "erased": r"is not a Needle 2 archive \(tag 0xFFFFFFFF, expected 0x05E12A83\)",
              "other model": r"is 1024533 bytes, not 154074"}
    for kind, path in _variants(tmp_path).items():
        proc = run(path, "--tokens", "2,5")
        assert proc.returncode == 3, (kind, proc.stderr)
        assert proc.stdout == "" and proc.stderr.count("\n") == 1, (kind, proc.stderr)
        assert proc.stderr.startswith(f"needle: error: archive {path} "), (kind, proc.stderr)
        assert __import__("re").search(expect[kind], proc.stderr), (kind, proc.stderr)
        assert f"copy the archive this engine was built for (sha256 {sha}...)" in proc.stderr
    missing = run(tmp_path / "nowhere.cact", "--info")
    assert missing.returncode == 3 and "cannot open archive" in missing.stderr \
        and "No such file or directory" in missing.stderr
    bare = run(None, "--info")
    assert bare.returncode == 2
    assert bare.stderr == "needle: error: this engine reads its archive from a file: pass --archive PATH\n"


def test_archive_file_logits_equal_the_goldens(router_builds, tmp_path, board_runner):
    """The mapped file gives the same logits as the linked archive: bit-identical goldens."""
    meta, logits = golden.load(GOLDEN / "tiny")
    proc = board_runner("router-mt7621", router_builds["router-mt7621"], TINY).run(
        ["--tokens", ",".join(map(str, meta["tokens"])), "--logits", tmp_path / "l.f32"], timeout=600)
    assert proc.returncode == 0, proc.stderr
    got = np.fromfile(tmp_path / "l.f32", dtype="<f4").reshape(logits["a8"].shape)
    assert np.array_equal(got, logits["a8"])


def test_router_images_hold_no_archive(router_builds):
    for name, exe in router_builds.items():
        with open(exe, "rb") as fh:
            elf = ELFFile(fh)
            assert elf.get_section_by_name(".cact") is None
            sym = elf.get_section_by_name(".symtab").get_symbol_by_name("needle_cact")[0]
            assert sym["st_shndx"] == "SHN_ABS" and sym["st_value"] == 0x50000000
        report = (exe.parent / "memory.txt").read_text()
        assert "archive file 154,074 bytes (--archive, mapped at start)" in report
        assert report.splitlines()[1].lstrip().startswith("package ")


def test_package_flash_budget_is_checked(router_builds):
    board = boards.load("router-ath79")
    board["memory"]["package_flash_bytes"] = 100_000
    with pytest.raises(CactError, match=r"package over budget on board router-ath79: [\d,]+ bytes .* > "
                                        r"package_flash_bytes 100,000 \(the flash OpenWrt leaves to it\)"):
        exe = router_builds["router-ath79"]
        elfcheck.check(str(exe), str(TINY), board, objects=[str(o) for o in (exe.parent / "obj").glob("*.o")])


# ---- board files and options -------------------------------------------------------------

@pytest.mark.parametrize("board, edit, message", [
    ("router-mt7621", lambda t: t.replace('toolchain = "zig"', 'toolchain = "zig"\ntoolchain_prefix = "mipsel-"'),
     'toolchain_prefix goes with toolchain = "gnu"'),
    ("router-mt7621", lambda t: t.replace('zig_target = "mipsel-linux-musleabi"\n', ''),
     'toolchain = "zig" needs zig_target'),
    ("router-mt7621", lambda t: t.replace('toolchain = "zig"', 'toolchain = "llvm"'), "toolchain must be one of gnu, zig"),
    ("router-mt7621", lambda t: t.replace('placement = "file"', 'placement = "partition"'),
     "archive.placement must be linked or file on Linux boards"),
    ("watch-m4", lambda t: t.replace('placement = "linked"', 'placement = "file"'),
     "archive.placement must be linked or partition on bare-metal boards"),
    ("rpi-zero", lambda t: t.replace('placement = "linked"', 'placement = "linked"\nmap_address = 0x50000000'),
     'archive.map_address goes with placement = "file"'),
    ("rpi-zero", lambda t: t.replace("ram_bytes", "package_flash_bytes = 0\nram_bytes"),
     "memory.package_flash_bytes is a positive integer"),
    ("router-ath79", lambda t: t.replace('openwrt_arch = "mips_24kc"', 'arch = "mips_24kc"'),
     "unknown key package.arch"),
])
def test_board_file_rules(board_error, board, edit, message):
    assert message in board_error(board, edit)


def test_musl_option_is_refused_where_not_offered(tmp_path):
    proc = scons("board=watch-m4", "libc=musl", f"build={tmp_path / 'b'}", check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("scons: error: board watch-m4 offers no musl build (no [musl] table); "
                                   "drop libc=musl")
    proc = scons("board=rpi-zero", "package=ipk", f"build={tmp_path / 'c'}", check=False)
    assert proc.returncode == 2 and "board rpi-zero is not an OpenWrt board" in proc.stderr


MUSL_BOARDS = [b for b in boards.names() if "musl" in boards.load(b)]


@pytest.mark.parametrize("board_name", MUSL_BOARDS)
def test_musl_build_of_the_default_archive(board_name, tmp_path):
    """`scons board=B libc=musl` with the bundled demo builds on every board offering it: zig's
    clang warns about a static kernel helper that the archive's widths leave unused (the demo
    has 4-bit matrices only), and -Werror made that a failed build on rpi-zero, rpi-zero2 and
    rpi5 until the width helpers were marked NK_UNUSED."""
    board = boards.with_musl(boards.load(board_name))
    why = boards.missing_tools(board)
    if why:
        pytest.skip(why)
    scons(f"board={board_name}", "libc=musl", f"build={tmp_path / 'b'}")
    assert (tmp_path / "b" / "needle").is_file()


@pytest.mark.parametrize("name", ["tiny", "n3-tiny"])
def test_pi_zero_musl_build_matches_the_goldens(name, tmp_path, board_runner):
    board = boards.with_musl(boards.load("rpi-zero"))
    why = boards.missing_tools(board, run=True)
    if why:
        pytest.skip(why)
    scons("board=rpi-zero", "libc=musl", f"archive={GOLDEN / name / 'archive.cact'}", f"build={tmp_path / 'b'}")
    exe = tmp_path / "b" / "needle"
    with open(exe, "rb") as fh:
        assert ELFFile(fh)["e_flags"] & 0x400                    # hard-float EABI, musl
    meta, logits = golden.load(GOLDEN / name)
    proc = board_runner(board, exe).run(["--tokens", ",".join(map(str, meta["tokens"])),
                                         "--logits", tmp_path / "l.f32"], timeout=600)
    assert proc.returncode == 0, proc.stderr
    got = np.fromfile(tmp_path / "l.f32", dtype="<f4").reshape(logits["a8"].shape)
    assert np.array_equal(got, logits["a8"])
