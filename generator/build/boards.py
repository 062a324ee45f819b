"""Board files (boards/*.toml): one file per target, validated against a small schema.

A board states its CPU, compiler flags, float ABI, endianness, kernel family, toolchain
and the Debian package that provides it, its memory budgets and (bare metal) memory
regions, where the archive goes (`linked` into the image, or a separately flashed
`partition`), and how to run a binary (emulator command).  Adding a board is adding one
file; `schema()` below is the whole contract.
"""

from __future__ import annotations

import shlex
import shutil
import tomllib
from pathlib import Path

from generator.errors import CactError
from generator.paths import BOARDS_DIR, KERNELS_DIR


SCHEMA = {
    "name": str, "description": str, "cpu": str, "arch": str, "arch_flags": list,
    "fpu": str, "float_abi": str, "endianness": str, "kernel": str,
    "toolchain_prefix": str, "toolchain_package": str, "kernels": str,
    "memory": dict, "archive": dict, "emulator": dict,
}
MEMORY_KEYS = {"ram_bytes": int, "kv_budget_bytes": int, "flash_bytes": int}


def families() -> list[str]:
    """Kernel families with a template (templates/kernels/<family>.c.j2)."""
    return sorted(p.name[:-len(".c.j2")] for p in KERNELS_DIR.glob("*.c.j2"))


def kernel_family(board: dict) -> str:
    """The board's kernel family; `auto` (the host) picks x86 on an x86-64 with AVX2."""
    fam = board["kernels"]
    if fam != "auto":
        return fam
    import platform
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        flags = ""
    if platform.machine() in ("x86_64", "AMD64") and " avx2" in flags and "x86" in families():
        return "x86"
    return "scalar"
REGION_USES = ("code", "data", "archive")


def names() -> list[str]:
    return sorted(p.stem for p in BOARDS_DIR.glob("*.toml"))


def load(name: str) -> dict:
    path = BOARDS_DIR / f"{name}.toml"
    if not path.is_file():
        raise CactError(f"unknown board {name!r}; choose one of {', '.join(names())}")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise CactError(f"board file {path.name}: {exc}") from None

    def bad(msg: str):
        raise CactError(f"board file {path.name}: {msg}")

    for key, typ in SCHEMA.items():
        if key not in data:
            bad(f"missing key {key!r}")
        if not isinstance(data[key], typ):
            bad(f"{key!r} must be a {typ.__name__}")
    if data["name"] != name:
        bad(f"name is {data['name']!r}, expected {name!r}")
    if data["endianness"] not in ("little", "big"):
        bad("endianness must be little or big")
    if data["kernel"] not in ("linux", "none"):
        bad("kernel must be linux or none")
    for key, typ in MEMORY_KEYS.items():
        if not isinstance(data["memory"].get(key), typ) or data["memory"][key] <= 0:
            bad(f"memory.{key} must be a positive integer")
    if data["kernels"] not in families() + ["auto"]:
        bad(f"kernels must be one of {', '.join(families())} (templates/kernels/), or auto")
    if data["archive"].get("placement") not in ("linked", "partition"):
        bad("archive.placement must be linked or partition")
    if not isinstance(data["emulator"].get("command"), list):
        bad("emulator.command must be a list")
    if not isinstance(data["emulator"].get("package"), str):
        bad("emulator.package must name the Debian package of the emulator ('' for none)")
    if data["kernel"] == "none":
        regions = data["memory"].get("regions")
        if not isinstance(regions, list) or not regions:
            bad("bare-metal boards need memory.regions")
        for r in regions:
            if not (isinstance(r.get("name"), str) and isinstance(r.get("origin"), int)
                    and isinstance(r.get("length"), int) and r.get("use") in REGION_USES):
                bad(f"region {r!r} needs name, origin, length and use ({', '.join(REGION_USES)})")
        for use in REGION_USES:
            if sum(r["use"] == use for r in regions) != 1:
                bad(f"exactly one region must have use = {use!r}")
        for key in ("stack_bytes", "max_text"):
            if not isinstance(data.get(key), int) or data[key] <= 0:
                bad(f"{key} must be a positive integer")
    elif data["archive"]["placement"] != "linked":
        bad("Linux boards link the archive into the executable (placement = linked)")
    data.setdefault("max_text", 16384)
    return data


def region(board: dict, use: str) -> dict:
    return next(r for r in board["memory"]["regions"] if r["use"] == use)


def compiler(board: dict, host_cc: str = "gcc") -> str:
    return f"{board['toolchain_prefix']}gcc" if board["toolchain_prefix"] else host_cc


def missing_tools(board: dict, host_cc: str = "gcc", run: bool = False) -> str | None:
    """One line naming what is missing and the apt command that installs it, or None."""
    cc = compiler(board, host_cc)
    if not shutil.which(cc):
        pkg = board["toolchain_package"] if board["toolchain_prefix"] else host_cc
        return f"board {board['name']} needs the compiler {cc}: apt-get install {pkg}"
    if run and board["emulator"]["command"] and not shutil.which(board["emulator"]["command"][0]):
        return (f"board {board['name']} runs under {board['emulator']['command'][0]}: "
                f"apt-get install {board['emulator']['package']}")
    return None


def run_command(board: dict, binary: str, args: list[str], archive_image: str | None = None) -> list[str]:
    """The command that runs `binary args...` on the board (natively or under its emulator)."""
    emu = list(board["emulator"]["command"])
    if board["kernel"] == "linux":
        return emu + [binary] + list(args)
    cmd = emu + ["-kernel", binary, "-append", " ".join(_quote(a) for a in args)]
    if board["archive"]["placement"] == "partition":
        if not archive_image:
            raise CactError(f"board {board['name']} keeps the archive in a partition: give its image")
        cmd += ["-device", f"loader,file={archive_image},addr=0x{region(board, 'archive')['origin']:x},force-raw=on"]
    return cmd


def _quote(arg: str) -> str:
    """Quote one argument for the bare-metal HAL's command-line splitter."""
    if arg and not any(c in arg for c in ' "\\'):
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def shell_line(cmd: list[str]) -> str:
    return " ".join(shlex.quote(c) for c in cmd)
