"""Board files (boards/*.toml): one file per target, validated against a small schema.

A board states its CPU, compiler flags, float ABI, endianness, kernel family, toolchain
and the Debian package that provides it, its memory budgets, where the archive goes, and
how to run a binary (emulator command).  Adding a board is adding one file.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from .errors import CactError

BOARDS_DIR = Path(__file__).resolve().parent.parent / "boards"

SCHEMA = {
    "name": str, "description": str, "cpu": str, "arch": str, "arch_flags": list,
    "fpu": str, "float_abi": str, "endianness": str, "kernel": str,
    "toolchain_prefix": str, "toolchain_package": str, "kernels": str,
    "memory": dict, "archive": dict, "emulator": dict,
}
MEMORY_KEYS = {"ram_bytes": int, "kv_budget_bytes": int, "flash_bytes": int}


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
    for key, typ in SCHEMA.items():
        if key not in data:
            raise CactError(f"board file {path.name}: missing key {key!r}")
        if not isinstance(data[key], typ):
            raise CactError(f"board file {path.name}: {key!r} must be a {typ.__name__}")
    if data["name"] != name:
        raise CactError(f"board file {path.name}: name is {data['name']!r}, expected {name!r}")
    if data["endianness"] not in ("little", "big"):
        raise CactError(f"board file {path.name}: endianness must be little or big")
    if data["kernel"] not in ("linux", "none"):
        raise CactError(f"board file {path.name}: kernel must be linux or none")
    for key, typ in MEMORY_KEYS.items():
        if not isinstance(data["memory"].get(key), typ) or data["memory"][key] <= 0:
            raise CactError(f"board file {path.name}: memory.{key} must be a positive integer")
    if data["archive"].get("placement") not in ("linked", "partition"):
        raise CactError(f"board file {path.name}: archive.placement must be linked or partition")
    if not isinstance(data["emulator"].get("command"), list):
        raise CactError(f"board file {path.name}: emulator.command must be a list")
    return data
