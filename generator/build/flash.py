"""Programming a bare-metal board through a debug probe (`scons board=X flash=1|dry [probe=...]`).

The images are the build's own (images.json, generator/build/images.py): one file per
loadable region at its load address, and a partition board's archive.bin at its partition.
Two programmers, as the board's `[flash]` table offers them (boards/*.toml):

* pyOCD: `pyocd load --target T --base-address 0xADDR FILE` per image (pyOCD's documented
  form for raw binaries; it resets the target after programming);
* OpenOCD: `openocd -f CFG... -c "program FILE 0xADDR verify" -c shutdown` per image, the
  code image last with `-c "reset run"` before shutdown.  Which memories OpenOCD can write
  (internal flash, a QSPI flash bank) is its configuration files' business.

Boards without a `[flash]` table (the QEMU watch boards, whose MPS2/MPS3 FPGA images are
loaded from the board's SD card, not through a probe) and Linux boards are refused.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

from generator.build import images, uf2
from generator.errors import CactError

INSTALL = {"pyocd": "pip install pyocd", "openocd": "apt-get install openocd",
           "picotool": "build picotool 2.x from github.com/raspberrypi/picotool (Debian 12 has no package)"}


def probe_for(board: dict, probe: str | None = None) -> str:
    """The programmer for `board`: `probe` if given (pyocd or openocd), else the board's own."""
    return probe if probe and probe != "board" else board["flash"]["probe"]


def refusal(board: dict, probe: str | None = None, dry: bool = False) -> str | None:
    """Why `board` cannot be flashed with `probe` (one line), or None.  Unless `dry`, the
    programmer must be on PATH."""
    name = board["name"]
    if board["os"] != "none":
        return (f"board {name} runs Linux: copy the executable to it (flash= programs bare-metal "
                "boards through a debug probe)")
    if "flash" not in board:
        emu = board["emulator"]["command"]
        return (f"board {name} has no [flash] table: it models a board under {emu[0]} "
                f"(scons board={name} run=1); there is nothing to program through a probe")
    if board["flash"]["probe"] == "esp-idf":
        return (f"board {name} boots only images in ESP-IDF's format, which needle-fw does not build: "
                f"put the engine in an ESP-IDF project (docs/boards.md, \"RISC-V microcontrollers\")")
    probe = probe_for(board, probe)
    fl = board["flash"]
    if probe == "pyocd" and not fl.get("pyocd_target"):
        return (f"board {name} is not programmed with pyocd (no flash.pyocd_target in "
                f"boards/{name}.toml): use probe=openocd")
    if probe == "openocd" and not fl.get("openocd"):
        return (f"board {name} is not programmed with openocd (no flash.openocd in "
                f"boards/{name}.toml): use probe=pyocd")
    if probe == "picotool" and not uf2.family(board):
        return (f"board {name} is not an RP2350: picotool loads UF2 images (flash.uf2_family): "
                f"use probe={fl['probe'] if fl['probe'] != 'picotool' else 'openocd'}")
    if not dry and not shutil.which(probe):
        return f"flashing board {name} needs {probe}, which is not on PATH: {INSTALL[probe]}"
    return None


def image_list(board: dict, build_dir: str) -> list[tuple[str, int]]:
    """(file path, load address) of every image of the build in build_dir, the code region's
    last (the reset that runs the firmware follows it)."""
    path = os.path.join(build_dir, images.MANIFEST)
    try:
        with open(path, encoding="utf-8") as fh:
            entries = json.load(fh)["images"]
    except (OSError, ValueError, KeyError) as exc:
        raise CactError(f"cannot read {path}: {exc} (build the board first)") from None
    code = next(r["name"] for r in board["memory"]["regions"] if r["use"] == "code")
    entries = sorted(entries, key=lambda e: e["region"] == code)     # stable: code last
    out = [(os.path.join(build_dir, e["file"]), int(e["address"], 16)) for e in entries]
    if "slots" in board:          # MCUboot boots the signed image in its primary slot, not the raw code
        from generator.build import mcuboot
        signed = os.path.join(build_dir, mcuboot.signed_name(board))
        if not os.path.exists(signed):
            raise CactError(f"board {board['name']} boots through MCUboot: build with sign=KEY first, so "
                            "flash= programs the signed image at the primary slot (MCUboot itself is "
                            "flashed at the bootloader slot on its own)")
        out[-1] = (signed, board["slots"]["primary"]["origin"])
    return out


def commands(board: dict, build_dir: str, probe: str | None = None) -> list[list[str]]:
    """The commands that program every image of the build in build_dir, in order."""
    problem = refusal(board, probe, dry=True)
    if problem:
        raise CactError(problem)
    probe = probe_for(board, probe)
    fl = board["flash"]
    if probe == "picotool":          # every region in one UF2 file, over USB (BOOTSEL)
        return [["picotool", "load", "-x", os.path.join(build_dir, uf2.FILE_NAME)]]
    todo = image_list(board, build_dir)
    out = []
    for i, (path, address) in enumerate(todo):
        if probe == "pyocd":
            out.append(["pyocd", "load", "--target", fl["pyocd_target"], "--base-address",
                        f"0x{address:08X}", path])
            continue
        cmd = ["openocd"]
        for cfg in fl["openocd"]:
            cmd += ["-f", cfg]
        for c in fl.get("openocd_commands", []):
            cmd += ["-c", c]
        cmd += ["-c", f"program {path} 0x{address:08X} verify"]
        if i == len(todo) - 1:
            cmd += ["-c", "reset run"]
        out.append(cmd + ["-c", "shutdown"])
    return out


def run(board: dict, cmds: list[list[str]]) -> None:
    """Run the commands in order; the first failure raises CactError with the last line of
    the tool's output."""
    for cmd in cmds:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as exc:
            raise CactError(f"flashing board {board['name']} failed: {cmd[0]}: {exc.strerror}") from None
        if proc.returncode:
            lines = [ln.strip() for ln in (proc.stdout + "\n" + proc.stderr).splitlines() if ln.strip()]
            last = lines[-1] if lines else f"{cmd[0]} exited with status {proc.returncode}"
            raise CactError(f"flashing board {board['name']} failed: {last} (is a probe attached?)")
