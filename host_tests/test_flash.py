"""`scons board=X flash=1|dry [probe=...]`: programming a bare-metal board through a debug probe
(generator/build/flash.py), and the two real development boards it is for (rp2350-pico-plus2,
stm32h750b-dk: no emulator, built and checked only).  No probe is attached here: the tools are
replaced by scripts on PATH where a test needs them to run."""

from __future__ import annotations

import json
import os
import shlex
import struct
import sys
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from generator.build import boards, flash
from generator.errors import CactError
from host_tests.scons_run import build_each, scons

ROOT = Path(__file__).resolve().parent.parent
ARCHIVE = ROOT / "host_tests" / "golden" / "tiny" / "archive.cact"
BARE = [b for b in boards.names() if boards.load(b)["os"] == "none"]
FLASHABLE = [b for b in BARE if "flash" in boards.load(b)]
NOT_FLASHABLE = [b for b in BARE if "flash" not in boards.load(b)]
# boards behind MCUboot ([slots]) flash the signed image: host_tests/test_mcuboot.py
# the ESP32 boards: their boot ROM takes ESP-IDF's image format, and flash= refuses them
ESP_IDF = [b for b in FLASHABLE if boards.load(b)["flash"]["probe"] == "esp-idf"]
UNSIGNED = [b for b in FLASHABLE if "slots" not in boards.load(b) and b not in ESP_IDF]
NO_EMULATOR = [b for b in BARE if not boards.load(b)["emulator"]["command"]]
TOOLS = ("pyocd", "openocd")

pytestmark = pytest.mark.skipif(boards.missing_tools(boards.load("watch-m4")) is not None,
                                reason="needs arm-none-eabi-gcc")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_each(FLASHABLE, ARCHIVE, tmp_path_factory.mktemp("flash-boards"))


def tool_lines(stdout: str) -> list[list[str]]:
    return [shlex.split(ln) for ln in stdout.splitlines() if ln.split(" ", 1)[0] in TOOLS]


def test_the_new_boards_have_no_emulator_and_a_flash_table():
    assert {"rp2350-pico-plus2", "stm32h750b-dk"} <= set(NO_EMULATOR)
    assert set(NO_EMULATOR) <= set(FLASHABLE)


@pytest.mark.parametrize("name", UNSIGNED)
def test_flash_dry_prints_one_command_per_image(built, name):
    board = boards.load(name)
    out = built[name]
    proc = scons(f"board={name}", f"archive={ARCHIVE}", f"build={out}", "flash=dry")
    got = tool_lines(proc.stdout)
    assert got == flash.commands(board, str(out.resolve()))
    manifest = json.loads((out / "images.json").read_text())["images"]
    assert len(got) == len(manifest)
    programmed = set()
    for cmd in got:
        if cmd[0] == "pyocd":
            assert cmd[:4] == ["pyocd", "load", "--target", board["flash"]["pyocd_target"]]
            addr, path = cmd[cmd.index("--base-address") + 1], cmd[-1]
        else:
            for cfg in board["flash"]["openocd"]:
                assert cfg in cmd[cmd.index("-f") + 1::2]
            program = next(c for c in cmd if c.startswith("program "))
            _, path, addr, verify = program.split(" ")
            assert verify == "verify" and cmd[-2:] == ["-c", "shutdown"]
        programmed.add((Path(path).name, int(addr, 16)))
        assert Path(path).is_file() and Path(path).parent == out.resolve()
    assert programmed == {(e["file"], int(e["address"], 16)) for e in manifest}
    # the firmware goes last, then the reset that starts it
    code = boards.region(board, "code")
    last = next(c for c in got[-1] if c.startswith("program ")) if got[-1][0] == "openocd" else got[-1][-1]
    assert f"{code['name']}-0x{code['origin']:08X}" in last
    if got[-1][0] == "openocd":
        assert "reset run" in got[-1] and all("reset run" not in c for c in got[:-1])
    if board["archive"]["placement"] == "partition":
        arch = boards.region(board, "archive")
        assert ("archive.bin", arch["origin"]) in programmed


@pytest.mark.parametrize("name", NOT_FLASHABLE)
def test_emulated_boards_are_not_flashed(name, tmp_path):
    proc = scons(f"board={name}", f"build={tmp_path / 'b'}", "flash=dry", check=False)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert f"board {name} has no [flash] table" in proc.stderr and f"scons board={name} run=1" in proc.stderr


def test_flash_on_a_linux_board_is_refused(tmp_path):
    proc = scons("board=rpi-zero", f"build={tmp_path / 'b'}", "flash=1", check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "board rpi-zero runs Linux" in proc.stderr
    assert not (tmp_path / "b").exists()


def test_flash_options_are_checked(tmp_path):
    for args, message in ((["board=all", "flash=dry"], "flash=dry programs one board: pass board=NAME"),
                          (["board=stm32h750b-dk", "probe=openocd"], "probe=openocd goes with flash=1"),
                          (["board=stm32h750b-dk", "flash=dry", "probe=pyocd"],
                           "board stm32h750b-dk is not programmed with pyocd")):
        proc = scons(*args, f"build={tmp_path / 'b'}", check=False)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert message in proc.stderr


@pytest.mark.parametrize("name", ESP_IDF)
@pytest.mark.parametrize("option", ["flash=dry", "flash=1", "run=1"])
def test_esp32_boards_name_the_esp_idf_route(name, option, tmp_path):
    """flash= and run= on a real ESP32 board: one line naming ESP-IDF (and the emulated twin)."""
    assert {"esp32-c6", "esp32-p4"} <= set(ESP_IDF)
    proc = scons(f"board={name}", f"build={tmp_path / 'b'}", option, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "put the engine in an ESP-IDF project (docs/boards.md" in proc.stderr
    if option == "run=1":
        assert f"scons board={name}-virt run=1" in proc.stderr
    else:
        assert f"board {name} boots only images in ESP-IDF's format" in proc.stderr


@pytest.mark.parametrize("name", [b for b in NO_EMULATOR if b not in ESP_IDF])
def test_missing_programmer_names_its_install_command(name, tmp_path):
    env = dict(os.environ, PATH=str(Path(sys.executable).parent))
    proc = scons(f"board={name}", f"build={tmp_path / 'b'}", "flash=1", check=False, env=env)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert proc.stderr.strip() == (f"scons: error: flashing board {name} needs openocd, which is not "
                                   "on PATH: apt-get install openocd")


def test_missing_pyocd_names_pip(monkeypatch):
    board = boards.load("rp2350-pico-plus2")
    board["flash"] = {"probe": "pyocd", "pyocd_target": "rp2350"}
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    assert flash.refusal(board) == ("flashing board rp2350-pico-plus2 needs pyocd, which is not on PATH: "
                                    "pip install pyocd")
    assert flash.refusal(board, dry=True) is None


def test_pyocd_commands_load_each_image_at_its_address(built):
    board = boards.load("stm32h750b-dk")
    board["flash"] = dict(board["flash"], pyocd_target="stm32h750xbhx")
    out = str(built["stm32h750b-dk"].resolve())
    cmds = flash.commands(board, out, "pyocd")
    assert cmds == [["pyocd", "load", "--target", "stm32h750xbhx", "--base-address", "0x90000000",
                     f"{out}/archive.bin"],
                    ["pyocd", "load", "--target", "stm32h750xbhx", "--base-address", "0x08000000",
                     f"{out}/needle-FLASH-0x08000000.bin"]]


def fake_tool(bin_dir: Path, name: str, status: int, log: Path) -> None:
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / name
    script.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" >> {shlex.quote(str(log))}\n"
                      f"echo 'Open On-Chip Debugger (fake)' >&2\n"
                      + ("echo 'Error: open failed' >&2\n" if status else "") + f"exit {status}\n")
    script.chmod(0o755)


def test_flash_runs_the_dry_commands(built, tmp_path):
    name, out = "stm32h750b-dk", built["stm32h750b-dk"]
    log = tmp_path / "calls.log"
    fake_tool(tmp_path / "bin", "openocd", 0, log)
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    proc = scons(f"board={name}", f"archive={ARCHIVE}", f"build={out}", "flash=1", env=env)
    assert proc.stderr == ""
    want = flash.commands(boards.load(name), str(out.resolve()))
    assert log.read_text().splitlines() == [" ".join(c[1:]) for c in want]


def test_a_failing_programmer_is_one_line_and_exit_2(built, tmp_path):
    name, out = "rp2350-pico-plus2", built["rp2350-pico-plus2"]
    log = tmp_path / "calls.log"
    fake_tool(tmp_path / "bin", "openocd", 1, log)
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    proc = scons(f"board={name}", f"archive={ARCHIVE}", f"build={out}", "flash=1", check=False, env=env)
    assert proc.returncode == 2
    assert proc.stderr == (f"scons: error: flashing board {name} failed: Error: open failed "
                           "(is a probe attached?)\n")
    assert len(log.read_text().splitlines()) == 1      # stopped at the first failure
    # SCons saved its state before the error: nothing is rebuilt
    again = scons(f"board={name}", f"archive={ARCHIVE}", f"build={out}")
    assert not [l for l in again.stdout.splitlines() if l.startswith(("GEN ", "CC ", "AS ", "LINK "))]


# ---- the boards themselves -----------------------------------------------------------------

@pytest.mark.parametrize("name", [b for b in NO_EMULATOR if b not in ESP_IDF])   # ESP32: above
def test_boards_without_emulator_refuse_to_run(name, tmp_path):
    board = boards.load(name)
    line = f"board {name} has no emulator: flash it (scons board={name} flash=1) or build only"
    assert boards.missing_tools(board, run=True) == line
    with pytest.raises(CactError, match=r"has no emulator"):
        boards.run_command(board, "needle.elf", [])
    proc = scons(f"board={name}", f"build={tmp_path / 'b'}", "run=1", check=False)
    assert proc.returncode == 2 and proc.stderr == f"scons: error: {line}\n"


# the boards whose .data/.bss live in external RAM (the ESP32-C6 keeps them in on-chip SRAM)
EXTERNAL_RAM = [b for b in NO_EMULATOR if any(r["use"] == "stack" for r in boards.load(b)["memory"]["regions"])]


@pytest.mark.parametrize("name", EXTERNAL_RAM)
def test_stack_works_before_the_bsp(built, name):
    """.data/.bss go to external RAM the BSP sets up (hal_board_init); the stack, used before
    that, is in the board's "stack" region (on-chip SRAM)."""
    board = boards.load(name)
    with open(built[name] / "needle.elf", "rb") as fh:
        elf = ELFFile(fh)
        sec = {s.name: s for s in elf.iter_sections()}
        stack, data = boards.region(board, "stack"), boards.region(board, "data")
        assert stack["origin"] <= sec[".stack"]["sh_addr"] < stack["origin"] + stack["length"]
        assert data["origin"] <= sec[".bss"]["sh_addr"] < data["origin"] + data["length"]
        syms = {s.name: s for s in elf.get_section_by_name(".symtab").iter_symbols()}
        assert "hal_board_init" in syms and syms["hal_board_init"]["st_info"]["bind"] == "STB_WEAK"


IMAGE_DEF = [0xFFFFDED3, 0x10210142, 0x000001FF, 0x00000000, 0xAB123579]


def test_rp2350_image_holds_its_image_def_in_the_first_4k(built):
    board = boards.load("rp2350-pico-plus2")
    flash_start = boards.region(board, "code")["origin"]
    with open(built["rp2350-pico-plus2"] / "needle.elf", "rb") as fh:
        elf = ELFFile(fh)
        sec = elf.get_section_by_name(".boot_block")
        offset = sec["sh_addr"] - flash_start
        words = list(struct.unpack("<5I", sec.data()))
        vectors = elf.get_section_by_name(".vectors")
        assert vectors["sh_addr"] == flash_start       # the ROM takes the vector table there
    assert 0 <= offset and offset + 20 <= 4096
    # start marker; IMAGE_TYPE item (0x42, 1 word): EXE | Secure | Arm | RP2350; LAST item
    # (0xff) counting one word of items; link to itself (0); end marker
    assert words == IMAGE_DEF
    image = (built["rp2350-pico-plus2"] / f"needle-FLASH-0x{flash_start:08X}.bin").read_bytes()
    assert list(struct.unpack_from("<5I", image, offset)) == IMAGE_DEF


def test_other_boards_carry_no_boot_block(built, tmp_path):
    scons("board=watch-m4", f"archive={ARCHIVE}", f"build={tmp_path / 'b'}")
    for elf_path in (built["stm32h750b-dk"] / "needle.elf", tmp_path / "b" / "needle.elf"):
        with open(elf_path, "rb") as fh:
            sec = ELFFile(fh).get_section_by_name(".boot_block")
            assert sec is None or sec["sh_size"] == 0


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace('boot_block = "rp2350-image-def"', 'boot_block = "rp2040-boot2"'),
     "boot_block must be one of rp2350-image-def"),
    (lambda t: t.replace('probe = "openocd"', 'probe = "jlink"'), "flash.probe must be pyocd or openocd"),
    (lambda t: t.replace('probe = "openocd"', 'probe = "pyocd"'), "flash.probe = \"pyocd\" needs flash.pyocd_target"),
    (lambda t: t.replace('use = "data" }', 'use = "stack" }'), "exactly one region must have use = 'data'"),
    (lambda t: t[:t.index("[flash]")], "a bare-metal board without an emulator (emulator.command = []) needs a [flash] table"),
])
def test_board_file_errors_for_the_new_keys(board_error, edit, message):
    assert message in board_error("rp2350-pico-plus2", edit)
