"""Board files (boards/*.toml): one file per target, validated against a small schema.

A board states its compiler flags (`arch_flags`: CPU, FPU, float ABI), endianness, operating
system (`os`: linux or none), kernel family, toolchain and the package that provides it, its
memory budgets and (bare metal) memory regions, where the archive goes (`linked` into the
image, a separately flashed `partition`, or on Linux a `file` mapped at start), and how to
run a binary (emulator command).

Two toolchains: `gnu` (the default) is Debian's cross gcc `<toolchain_prefix>gcc` against
glibc or newlib; `zig` is `zig cc -target <zig_target>` from the `ziglang` Python package,
which carries musl for every Linux target: the OpenWrt routers need static musl soft-float
(MIPS) binaries that no Debian package builds.  A gnu Linux board may offer the musl build
as well (`[musl]`: zig_target and arch_flags; `scons libc=musl`).  OpenWrt boards name their
package architecture (`[package] openwrt_arch`) for `scons package=ipk|feed`; Debian-family
boards their dpkg architecture (`[deb] architecture`) for `scons package=deb`.  A bare-metal board's
console is `semihost` (the default: console, host files, command line and exit status through
a debugger or QEMU) or `uart` (a UART of `[uart] kind`, `cmsdk` (the default) or `pl011`, at
`base`, clocked at `clock_hz`, the processor at `cpu_clock_hz` when it differs; no file system;
`semihost_exit = true` only for QEMU, to get an exit status).  Real development boards
have no emulator (`emulator.command = []`: built and checked, never run; running them is
refused with one line) and a `[flash]` table (`probe`, `pyocd_target`, `openocd` config files,
`openocd_commands`: generator/build/flash.py); a region of `use = "stack"` gives the stack its
own (on-chip) RAM, usable before the BSP's hal_board_init() brings up external RAM; and
`boot_block` names a block the chip's boot ROM needs (startup.c emits it after the vector
table: "rp2350-image-def").  A board may start from another (`inherits = "watch-m4"`): tables are merged key
by key, anything else (lists included) is replaced; `name` and `description` are never
inherited.  Adding a board is adding one file; the tables below are the whole contract and
any other key is an error.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import shlex
import shutil
import sys
import tomllib
from pathlib import Path

from generator.build import sources
from generator.codegen import families as kernel_families
from generator.errors import CactError
from generator.paths import BOARDS_DIR, CHECKOUT, ROOT
from generator.tools import tables

# key -> (type, required).  Bare-metal boards also need stack_bytes, max_text and
# memory.regions (checked in load()).
TOP_KEYS = {
    "name": (str, True), "description": (str, True), "inherits": (str, False),
    "arch_flags": (list, True), "endianness": (str, True), "os": (str, True),
    "toolchain": (str, False), "toolchain_prefix": (str, False), "zig_target": (str, False),
    "toolchain_package": (str, True), "kernels": (str, True), "musl": (dict, False),
    "package": (dict, False), "deb": (dict, False),
    "stack_bytes": (int, False), "vlen": (int, False), "max_text": (int, False), "cores": (int, False), "heap_bytes": (int, False),
    "prefill_chunk": (int, False),
    "memory": (dict, True), "archive": (dict, True), "emulator": (dict, True),
    "console": (str, False), "uart": (dict, False), "boot_block": (str, False), "flash": (dict, False),
    "grammar": (dict, False), "slots": (dict, False), "sha256": (str, False),
}
TABLE_KEYS = {
    "memory": {"ram_bytes": (int, True), "kv_budget_bytes": (int, True), "flash_bytes": (int, True),
               "package_flash_bytes": (int, False), "regions": (list, False)},
    "archive": {"placement": (str, True), "map_address": (int, False)},
    "emulator": {"command": (list, True), "package": (str, True), "systick_hz": (int, False)},
    "musl": {"zig_target": (str, True), "arch_flags": (list, True)},
    "package": {"openwrt_arch": (str, True)},
    "deb": {"architecture": (str, True)},
    "uart": {"kind": (str, False), "base": (int, True), "clock_hz": (int, True), "cpu_clock_hz": (int, False),
             "semihost_exit": (bool, False)},
    "flash": {"probe": (str, True), "pyocd_target": (str, False), "openocd": (list, False),
              "openocd_commands": (list, False), "uf2_family": (str, False)},
}
TOOLCHAINS = ("gnu", "zig")
PLACEMENTS = {"none": ("linked", "partition"), "linux": ("linked", "file")}
REGION_KEYS = ("name", "origin", "length", "use")
REGION_USES = ("code", "data", "archive")
OPTIONAL_REGION_USES = ("stack",)       # a stack of its own (internal SRAM, usable before the BSP
                                        # brings up external RAM); otherwise the stack follows .bss
# [flash] probe: how `scons flash=1` programs the board; "esp-idf": not by needle-fw at all (the
# chip's boot ROM takes ESP-IDF's image format: the engine goes into an ESP-IDF project, and
# flash= is refused naming that route, generator/build/flash.py)
PROBES = ("pyocd", "openocd", "picotool", "esp-idf")
# boot_block: a block the board's boot ROM needs in the image (startup.c emits it, link.ld
# places it right after the vector table and checks where it lands)
BOOT_BLOCKS = {"rp2350-image-def": "-DNEEDLE_BOOT_BLOCK_RP2350_IMAGE_DEF=1"}
CONSOLES = ("semihost", "uart")         # bare metal: the HAL behind hal.h (firmware/hal/<console>/)
# console = "uart": the UART's IP, one register-level driver each (firmware/hal/uart/uart_<kind>.c)
# under the shared console logic (hal_uart.c); the first is the default
UART_KINDS = ("cmsdk", "pl011")
# sha256 = KIND: the board's hash accelerator computes the boot-time archive SHA-256
# (firmware/hal/sha256/sha256_<kind>.c, overriding the engine's weak software hal_sha256)
SHA256_KINDS = ("rp2350", "stm32h7")
OWN_KEYS = ("name", "description")      # every file states these itself
DEFAULT_MAX_TEXT = 16384                # prompt bytes the tokenizer accepts (Linux boards)
ADDRESS_SPACE = 1 << 32                 # bare-metal boards are 32-bit: every region ends below 4 GiB


# a board file's value types, as its errors name them
TYPE_NAMES = {str: "a string", int: "an integer", bool: "true or false", list: "a list", dict: "a table"}


def _is(value, typ: type) -> bool:
    """isinstance, except that true/false is not an integer (bool subclasses int)."""
    return isinstance(value, typ) and not (typ is int and isinstance(value, bool))


def families() -> list[str]:
    """Kernel families (one descriptor each: generator/codegen/families.py)."""
    return kernel_families.names()


# x86-64 families and the CPU flags (/proc/cpuinfo) each needs, slowest first: a view of the
# descriptors' host_features, for SConstruct's run= check
X86_FAMILIES = {f.name: f.host_features for f in kernel_families.FAMILIES.values() if f.host_features}

# the host's machine (platform.machine()) -> a descriptor's name for its instruction set (arch)
HOST_ARCH = {"x86_64": "x86-64", "amd64": "x86-64", "aarch64": "aarch64", "arm64": "aarch64"}


def board_arch(board: dict) -> str:
    """The instruction set a board's compiler targets, in the family descriptors' words (the cross
    prefix or zig target; the host: this machine), e.g. "aarch64", "mips"."""
    if board.get("toolchain") == "zig":
        target = board["zig_target"]
    elif board.get("toolchain_prefix"):
        target = board["toolchain_prefix"]
    else:
        machine = platform.machine().lower()
        return HOST_ARCH.get(machine, "32-bit Arm (A profile)" if machine.startswith("arm") else machine)
    cpu = os.path.basename(target).split("-", 1)[0]      # a prefix may be a path (an OpenWrt SDK's gcc)
    if cpu.startswith("riscv"):          # one GNU toolchain builds both widths: -march says which
        march = _flag(board["arch_flags"], "-march=")
        return "riscv32" if march.startswith("rv32") else "riscv64" if march.startswith("rv64") else cpu
    if cpu in ("aarch64", "arm64"):
        return "aarch64"
    if cpu in ("x86_64", "amd64"):
        return "x86-64"
    if cpu.startswith(("arm", "thumb")):
        return "Arm Cortex-M" if board["os"] == "none" else "32-bit Arm (A profile)"
    return "MIPS" if cpu.startswith("mips") else cpu


def _flag(flags: list[str], prefix: str) -> str:
    """The value of the last `prefix` flag (e.g. "-march=") in a flag list, "" when absent."""
    return next((f[len(prefix):] for f in reversed(flags) if f.startswith(prefix)), "")


def riscv_float_abi(board: dict) -> tuple[str, str] | None:
    """A RISC-V board's (floating-point extensions of -march, float ABI of -mabi): ("", "soft"),
    ("f", "single"), ("fd", "double"); None off RISC-V or without -mabi (a zig board: its
    target's default ABI).  "g" in -march stands for imafd."""
    abi = _flag(board["arch_flags"], "-mabi=")
    if not abi or not board_arch(board).startswith("riscv"):
        return None
    base = _flag(board["arch_flags"], "-march=")[4:].split("_")[0]
    fext = "".join(x for x in "fd" if x in base or "g" in base)
    return fext, {"d": "double", "f": "single"}.get(abi[-1:] if abi[-1:] in "fd" else "", "soft")


def board_families(board: dict) -> list[str]:
    """The kernel families whose code the board's compiler can build: scalar, and those of
    its instruction set."""
    arch = board_arch(board)
    return [f for f in families() if kernel_families.FAMILIES[f].arch in (None, arch)]


def kernels_refusal(board: dict, family: str, option: str = "kernels=") -> str | None:
    """One line refusing kernel family `family` for `board` (unknown, or another
    architecture's), naming the families that fit; None when it fits."""
    if family not in families():
        return f"{option}{family}: choose one of {', '.join(families())}"
    if family in board_families(board):
        return None
    return (f"{option}{family} is {kernel_families.FAMILIES[family].arch} code and board {board['name']} is "
            f"{board_arch(board)}: choose one of {', '.join(board_families(board))}")


def cpu_flags() -> set[str]:
    """The build machine's CPU flags (/proc/cpuinfo; empty off x86-64 or without the file).
    NEEDLE_CPUINFO names another file in that format (the tests' stand-in for an older CPU)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return set()
    try:
        cpu = open(os.environ.get("NEEDLE_CPUINFO") or "/proc/cpuinfo").read()
    except OSError:
        return set()
    return set(next((ln.split(":", 1)[1].split() for ln in cpu.splitlines() if ln.startswith("flags")), []))


def native_x86_families() -> list[str]:
    """The x86 kernel families the build machine can run, slowest first (empty off x86-64)."""
    have = cpu_flags()
    return [f for f, need in X86_FAMILIES.items() if have and set(need) <= have]


def kernel_family(board: dict) -> str:
    """The board's kernel family; `auto` (the host) picks the fastest x86 family the build
    machine runs (x86-vnni with AVX512-VNNI, else x86 with AVX2), else scalar."""
    fam = board["kernels"]
    if fam != "auto":
        return fam
    native = native_x86_families()
    return native[-1] if native else "scalar"


def names() -> list[str]:
    return sorted(p.stem for p in BOARDS_DIR.glob("*.toml"))


def _path(name: str) -> Path:
    return BOARDS_DIR / f"{name}.toml"


def _read(name: str) -> dict:
    """One board file, parsed, its keys checked against the schema (not yet its values)."""
    path = _path(name)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise CactError(f"board file {path.name}: {exc}") from None
    for key in data:
        if key not in TOP_KEYS:
            raise CactError(f"board file {path.name}: unknown key {key!r}")
    for table, keys in TABLE_KEYS.items():
        if isinstance(data.get(table), dict):
            for key in data[table]:
                if key not in keys:
                    raise CactError(f"board file {path.name}: unknown key {table}.{key}")
    for key in OWN_KEYS:
        if key not in data:
            raise CactError(f"board file {path.name}: missing key {key!r} (every file states its own)")
    return data


def _merge(base: dict, over: dict) -> dict:
    """Tables merged key by key; anything else (lists included) replaced."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _resolve(name: str) -> tuple[dict, list[Path]]:
    """The board file with its parents merged in, and the files it came from (child first)."""
    chain, data, first = [], {}, None
    while True:
        path = _path(name)
        if name in chain:
            raise CactError(f"board file {_path(chain[0]).name}: inherits cycle "
                            f"{' -> '.join(chain + [name])}")
        if not path.is_file():
            if not chain:
                raise CactError(f"unknown board {name!r}; choose one of {', '.join(names())}")
            raise CactError(f"board file {_path(chain[-1]).name}: inherits unknown board {name!r}")
        chain.append(name)
        own = _read(name)
        first = first or own
        data = _merge(own, data) if data else own
        if "inherits" not in own:
            break
        if not isinstance(own["inherits"], str):
            raise CactError(f"board file {path.name}: 'inherits' must be a string (a board's name)")
        name = own["inherits"]
    for key in OWN_KEYS:                 # the child's, never a parent's
        data[key] = first[key]
    data.pop("inherits", None)
    return data, [_path(n) for n in chain]


def files(name: str) -> list[Path]:
    """The board file and every file it inherits from (all of them shape the board)."""
    return _resolve(name)[1]


def load(name: str) -> dict:
    """The board as a plain dict, inheritance resolved and every value checked."""
    data, paths = _resolve(name)
    fname = paths[0].name

    def bad(msg: str):
        raise CactError(f"board file {fname}: {msg}")

    for key, (typ, required) in TOP_KEYS.items():
        if key in data and not _is(data[key], typ):
            bad(f"{key!r} must be {TYPE_NAMES[typ]}")
        if required and key not in data:
            bad(f"missing key {key!r}")
    for table, keys in TABLE_KEYS.items():
        if table not in data:
            continue
        for key, (typ, required) in keys.items():
            if key in data[table] and not _is(data[table][key], typ):
                bad(f"{table}.{key} must be {TYPE_NAMES[typ]}")
            if required and key not in data[table]:
                bad(f"missing key {table}.{key}")
    if data["name"] != name:
        bad(f"name is {data['name']!r}, expected {name!r}")
    if not all(isinstance(f, str) for f in data["arch_flags"]):
        bad("arch_flags must be a list of strings")
    if data["endianness"] not in ("little", "big"):
        bad("endianness must be little or big")
    if data["os"] not in ("linux", "none"):
        bad("os must be linux or none")
    for key in ("ram_bytes", "kv_budget_bytes", "flash_bytes"):
        if data["memory"][key] <= 0:
            bad(f"memory.{key} must be a positive integer")
    if data["kernels"] not in families() + ["auto"]:
        bad(f"kernels must be one of {', '.join(families())} (generator/codegen/families.py), or auto")
    data.setdefault("toolchain", "gnu")
    if data["toolchain"] not in TOOLCHAINS:
        bad(f"toolchain must be one of {', '.join(TOOLCHAINS)}")
    if data["toolchain"] == "gnu":
        if "toolchain_prefix" not in data:
            bad("missing key 'toolchain_prefix' (gnu toolchain: the cross gcc's prefix, \"\" for the host)")
        if "zig_target" in data:
            bad("zig_target goes with toolchain = \"zig\"")
    else:
        if "zig_target" not in data:
            bad("toolchain = \"zig\" needs zig_target (e.g. \"mipsel-linux-musleabi\")")
        if "toolchain_prefix" in data:
            bad("toolchain_prefix goes with toolchain = \"gnu\"")
        if data["os"] != "linux":
            bad("toolchain = \"zig\" builds Linux executables (os = linux)")
        if "musl" in data:
            bad("[musl] offers a musl build to gnu boards; this board is built with zig already")
    data.setdefault("toolchain_prefix", "")
    if "musl" in data and not all(isinstance(f, str) for f in data["musl"]["arch_flags"]):
        bad("musl.arch_flags must be a list of strings")
    if ("musl" in data or "package" in data or "deb" in data) and data["os"] != "linux":
        bad("[musl], [package] and [deb] are for Linux boards (os = linux)")
    placements = PLACEMENTS.get(data["os"], ())
    if data["archive"]["placement"] not in placements:
        bad(f"archive.placement must be {' or '.join(placements)} on {'bare-metal' if data['os'] == 'none' else 'Linux'} boards")
    if "map_address" in data["archive"] and (data["archive"]["placement"] != "file"
                                             or data["archive"]["map_address"] % 65536):
        bad("archive.map_address goes with placement = \"file\" and must be a multiple of 64 KiB")
    pkg_flash = data["memory"].get("package_flash_bytes")
    if pkg_flash is not None and (data["os"] != "linux" or pkg_flash <= 0):
        bad("memory.package_flash_bytes is a positive integer, for Linux boards (the flash left to the package)")
    if data["emulator"].get("systick_hz", 1) <= 0:
        bad("emulator.systick_hz must be a positive integer")
    if data["os"] == "none":
        regions = data["memory"].get("regions")
        if not regions:
            bad("bare-metal boards need memory.regions")
        for r in regions:
            if not isinstance(r, dict):
                bad(f"region {r!r} must be a table")
            extra = sorted(set(r) - set(REGION_KEYS))
            if extra:
                bad(f"unknown key memory.regions.{extra[0]} (region keys: {', '.join(REGION_KEYS)})")
            uses = REGION_USES + OPTIONAL_REGION_USES
            if not (_is(r.get("name"), str) and _is(r.get("origin"), int)
                    and _is(r.get("length"), int) and r.get("use") in uses):
                bad(f"region {r!r} needs name, origin, length and use ({', '.join(uses)})")
            if r["origin"] < 0 or r["length"] <= 0 or r["origin"] + r["length"] > ADDRESS_SPACE:
                bad(f"region {r['name']} (origin 0x{r['origin']:X}, length 0x{r['length']:X}) must have a "
                    f"positive length and end within the 32-bit address space (at most 0x{ADDRESS_SPACE:X})")
        by_origin = sorted(regions, key=lambda r: r["origin"])
        for a, b in zip(by_origin, by_origin[1:]):
            if a["origin"] + a["length"] > b["origin"]:
                bad(f"regions {a['name']} (0x{a['origin']:08X}..0x{a['origin'] + a['length']:08X}) and "
                    f"{b['name']} (from 0x{b['origin']:08X}) overlap: each byte belongs to one region")
        names_seen = [r["name"] for r in regions]
        if len(set(names_seen)) != len(names_seen):
            bad(f"two regions are named {next(n for n in names_seen if names_seen.count(n) > 1)}: "
                "each region needs its own name")
        for use in REGION_USES:
            if sum(r["use"] == use for r in regions) != 1:
                bad(f"exactly one region must have use = {use!r}")
        for use in OPTIONAL_REGION_USES:
            if sum(r["use"] == use for r in regions) > 1:
                bad(f"at most one region may have use = {use!r}")
        for key in ("stack_bytes", "max_text"):
            if key not in data or data[key] <= 0:
                bad(f"{key} must be a positive integer")
        if data.setdefault("heap_bytes", 0) < 0 or data["heap_bytes"] % 8:
            bad("heap_bytes (the C library's heap for a program of your own; 0: none) must be a "
                "non-negative multiple of 8")
    else:
        if "stack_bytes" in data or "regions" in data["memory"] or "heap_bytes" in data:
            bad("stack_bytes, heap_bytes and memory.regions are for bare-metal boards (os = none)")
    if "prefill_chunk" in data and not 1 <= data["prefill_chunk"] <= 256:
        bad("prefill_chunk (tokens per prefill pass; 1: token by token) must be 1 to 256")
    if "cores" in data and (data["os"] != "linux" or not 1 <= data["cores"] <= 64):
        bad("cores (the threads an engine uses by default) is for Linux boards: 1 to 64")
    data.setdefault("console", "semihost")
    if data["console"] not in CONSOLES:
        bad(f"console must be {' or '.join(CONSOLES)}")
    if data["console"] == "uart":
        if data["os"] != "none":
            bad("console = \"uart\" is for bare-metal boards (os = none)")
        if "uart" not in data:
            bad("console = \"uart\" needs a [uart] table (base, clock_hz)")
        u = data["uart"]
        u.setdefault("kind", UART_KINDS[0])
        if u["kind"] not in UART_KINDS:
            bad(f"uart.kind must be {' or '.join(UART_KINDS)} (the UART's IP; another one needs its own "
                f"driver, firmware/hal/uart/uart_<kind>.c), not {u['kind']!r}")
        if u["base"] <= 0 or u["clock_hz"] < 16 * 115200:
            bad("uart.base must be the UART's address and uart.clock_hz its clock (at least 1843200 Hz for 115200 baud)")
        if not 1000 <= u.get("cpu_clock_hz", 1000) <= 0xFFFFFF * 1000:
            bad("uart.cpu_clock_hz must be the processor clock in Hz (SysTick's, for the command-line wait)")
    elif "uart" in data:
        bad("[uart] goes with console = \"uart\"")
    if "boot_block" in data and (data["os"] != "none" or data["boot_block"] not in BOOT_BLOCKS):
        bad(f"boot_block must be one of {', '.join(BOOT_BLOCKS)}, on a bare-metal board (os = none)")
    if data["emulator"]["command"] and not all(isinstance(c, str) for c in data["emulator"]["command"]):
        bad("emulator.command must be a list of strings")
    if not data["emulator"]["command"] and data["os"] == "none" and "flash" not in data:
        bad("a bare-metal board without an emulator (emulator.command = []) needs a [flash] table")
    if "flash" in data:
        fl = data["flash"]
        if data["os"] != "none":
            bad("[flash] is for bare-metal boards (os = none)")
        if fl["probe"] not in PROBES:
            bad(f"flash.probe must be {' or '.join(PROBES)}")
        for key in ("openocd", "openocd_commands"):
            if not all(isinstance(f, str) for f in fl.get(key, [])):
                bad(f"flash.{key} must be a list of strings")
        if not fl.get("pyocd_target") and not fl.get("openocd") and fl["probe"] not in ("picotool", "esp-idf"):
            bad("[flash] needs pyocd_target or openocd (config files)")
        if fl["probe"] == "pyocd" and not fl.get("pyocd_target"):
            bad("flash.probe = \"pyocd\" needs flash.pyocd_target")
        if fl["probe"] == "openocd" and not fl.get("openocd"):
            bad("flash.probe = \"openocd\" needs flash.openocd (config files)")
        from generator.build import uf2
        if "uf2_family" in fl and fl["uf2_family"] not in uf2.FAMILIES:
            bad(f"flash.uf2_family must be one of {', '.join(uf2.FAMILIES)} (generator/build/uf2.py)")
        if fl["probe"] == "picotool" and "uf2_family" not in fl:
            bad("flash.probe = \"picotool\" loads a UF2 image: it needs flash.uf2_family")
    if "sha256" in data and (data["os"] != "none" or data["sha256"] not in SHA256_KINDS
                             or data["archive"]["placement"] != "partition"):
        bad(f"sha256 (a hash accelerator for the boot-time archive check) must be one of "
            f"{', '.join(SHA256_KINDS)}, on a bare-metal board whose archive is a partition (the boards "
            "that hash it at boot)")
    if "slots" in data:                  # MCUboot's slots (generator/build/mcuboot.py, sign=KEY)
        if data["os"] != "none":
            bad("[slots] (MCUboot's flash slots) is for bare-metal boards (os = none)")
        from generator.build import mcuboot
        problem = mcuboot.check_slots(data)
        if problem:
            bad(problem)
    if "grammar" in data:                # the call grammar's table bounds (generator/tools/tables.py)
        problem = tables.check_bounds(data["grammar"])
        if problem:
            bad(problem)
    if data["kernels"] != "auto" and data["kernels"] not in board_families(data):
        bad(kernels_refusal(data, data["kernels"], "kernels = "))
    problem = _vector_refusal(data) or _float_abi_refusal(data)
    if problem:
        bad(problem)
    data.setdefault("max_text", DEFAULT_MAX_TEXT)
    return data


def _vector_refusal(data: dict) -> str | None:
    """RISC-V vector boards: kernels = "rvv" on a board that does not say its core has V (its
    vlen), a vlen on another architecture, one that is not a power of two from 128 (what the
    rvv family is written for), or one the emulator does not run at."""
    vlen = data.get("vlen")
    if vlen is None:
        if data["kernels"] == "rvv":
            return ('kernels = "rvv" needs a core with the vector extension: give the board its vlen (the '
                    'vector registers\' bits, e.g. vlen = 256), or choose kernels = "scalar"')
        return None
    if board_arch(data) != "riscv64":
        return f"vlen is the RISC-V vector length and board {data['name']} is {board_arch(data)}: remove it"
    if vlen < 128 or vlen & (vlen - 1):
        return f"vlen = {vlen}: the rvv kernels need a power of two from 128 (128, 256, 512, ...)"
    command = " ".join(data["emulator"]["command"])
    if command and f"vlen={vlen}" not in command:
        return f"vlen = {vlen} but the emulator does not run at it: give its -cpu vlen={vlen}"
    return None


def _float_abi_refusal(data: dict) -> str | None:
    """A RISC-V float ABI the core cannot run: -mabi=ilp32f/ilp32d passes floats in FPU
    registers, which a core without F (or D) does not have."""
    fabi = riscv_float_abi(data)
    if fabi is None:
        return None
    fext, abi = fabi
    need = {"soft": "", "single": "f", "double": "fd"}[abi]
    if need and not set(need) <= set(fext):
        march, mabi = _flag(data["arch_flags"], "-march="), _flag(data["arch_flags"], "-mabi=")
        missing = "F" if "f" not in fext else "D"
        soft = "ilp32" if board_arch(data) == "riscv32" else "lp64"
        return (f"-mabi={mabi} passes floats in FPU registers but -march={march} has no {missing} "
                f"extension: use -mabi={soft} (soft float) on a core without an FPU")
    return None


def no_emulator(board: dict) -> str | None:
    """The one line refusing to run a bare-metal board that has no emulator, or None."""
    if board["os"] != "none" or board["emulator"]["command"]:
        return None
    if board.get("flash", {}).get("probe") == "esp-idf":
        twin = f"{board['name']}-virt"
        run_twin = f"run its emulated twin (scons board={twin} run=1) or " if _path(twin).is_file() else ""
        return (f"board {board['name']} has no emulator: {run_twin}put the engine in an ESP-IDF project "
                "(docs/boards.md, \"RISC-V microcontrollers\")")
    return (f"board {board['name']} has no emulator: flash it (scons board={board['name']} flash=1) "
            "or build only")


def default_threads(board: dict) -> int:
    """Threads a board's engine uses unless `threads=N` says otherwise: the board file's
    `cores` (1 when absent; bare metal: 1), the machine's processors on the host."""
    if board["name"] == "host":
        return max(1, min(os.cpu_count() or 1, 64))
    return board.get("cores", 1)


def count_option(key: str, value, minimum: int) -> int:
    """A count given as KEY=VALUE (SCons) or as an option of `python -m generator emit`: its
    integer, or CactError "KEY=VALUE must be a positive (minimum 1) / non-negative (minimum 0)
    integer".  The one check of these values, so SCons and emit refuse the same ones."""
    text = str(value)
    if not (text.isascii() and text.isdigit()) or int(text) < minimum:   # no sign, no spaces
        raise CactError(f"{key}={value} must be a {'positive' if minimum else 'non-negative'} integer")
    return int(text)


def engine_options(board: dict, kv_window: int | None = None, kernels: str | None = None,
                   head_tokens: int = 0, threads: int | None = None, thread_grain: int | None = None,
                   prefill_chunk: int | None = None):
    """The code generator's options for this board (kernels: force a family; threads and
    prefill_chunk: None for the board's default); a bad count is refused (count_option)."""
    from generator.codegen import plan
    for key, value, minimum in (("kv_window", kv_window, 1), ("head_tokens", head_tokens, 0),
                                ("threads", threads, 1), ("thread_grain", thread_grain, 0),
                                ("prefill_chunk", prefill_chunk, 1)):
        if value is not None:
            count_option(key, value, minimum)
    return plan.Options(board=board["name"], kv_window=kv_window,
                        kv_budget=board["memory"]["kv_budget_bytes"], max_text=board["max_text"],
                        board_data=board, kernels=kernels or kernel_family(board),
                        head_tokens=head_tokens, threads=threads or default_threads(board),
                        prefill_chunk=prefill_chunk if prefill_chunk is not None else board.get("prefill_chunk"),
                        soft_float=soft_float(board),
                        **({"thread_grain": thread_grain} if thread_grain is not None else {}))


def generate_engine(board: dict, archive_path: str, out_dir: str, incbin_path: str | None = None,
                    kv_window: int | None = None, kernels: str | None = None, head_tokens: int = 0,
                    threads: int | None = None, thread_grain: int | None = None,
                    prefill_chunk: int | None = None):
    """Render the board's engine into out_dir, as `scons` and `python -m generator emit` do:
    the board's kernel family and text limit, a linker script on bare metal, a
    non-executable-stack note on Linux.  Returns the engine plan."""
    from generator.codegen import pipeline
    opts = engine_options(board, kv_window=kv_window, kernels=kernels, head_tokens=head_tokens,
                          threads=threads, thread_grain=thread_grain, prefill_chunk=prefill_chunk)
    return pipeline.generate(archive_path, out_dir, opts, incbin_path=incbin_path,
                             gnu_stack=board["os"] == "linux")


def region(board: dict, use: str) -> dict:
    return next(r for r in board["memory"]["regions"] if r["use"] == use)


def with_musl(board: dict) -> dict:
    """The board built as a static musl executable with zig (`scons libc=musl`)."""
    if board["toolchain"] == "zig":
        return board
    if "musl" not in board:
        raise CactError(f"board {board['name']} offers no musl build (no [musl] table); drop libc=musl")
    out = {k: v for k, v in board.items() if k != "musl"}
    out.update(toolchain="zig", toolchain_prefix="", toolchain_package="ziglang",
               zig_target=board["musl"]["zig_target"], arch_flags=list(board["musl"]["arch_flags"]))
    return out


def compiler(board: dict, host_cc: str = "gcc") -> str:
    """The C compiler command line for the board (may hold spaces: `python -m ziglang cc ...`)."""
    if board["toolchain"] == "zig":
        return shell_line([sys.executable, "-m", "ziglang", "cc", "-target", board["zig_target"]])
    return f"{board['toolchain_prefix']}gcc" if board["toolchain_prefix"] else host_cc


def compiler_argv(board: dict, host_cc: str = "gcc") -> list[str]:
    return shlex.split(compiler(board, host_cc))


def is_gcc(board: dict, host_cc: str = "gcc") -> bool:
    """GCC writes the stack-usage and call-graph files the post-link check reads."""
    return board["toolchain"] == "gnu" and compiler(board, host_cc).endswith("gcc")


def zig_requirement() -> str:
    """What `pip install` takes for zig cc (the router boards, libc=musl): in a clone the pinned
    requirements-routers.txt (./setup leaves it out: 411 MB that only routers use), in an
    installed package the range of its `routers` extra (pyproject.toml)."""
    if CHECKOUT:
        return f"-r {shlex.quote(str(ROOT / 'requirements-routers.txt'))}"
    from importlib import metadata
    try:
        wanted = [r.split(";")[0].strip() for r in metadata.requires("needle-fw") or ()
                  if r.startswith("ziglang") and "routers" in r]
    except metadata.PackageNotFoundError:
        wanted = []
    return shlex.quote(wanted[0] if wanted else "ziglang")


def missing_tools(board: dict, host_cc: str = "gcc", run: bool = False) -> str | None:
    """One line naming what is missing and the command that installs it, or None."""
    if board["toolchain"] == "zig":
        if importlib.util.find_spec("ziglang") is None:
            return (f"board {board['name']} is built with zig cc, from the Python package ziglang, which "
                    f"is not installed: {sys.executable} -m pip install {zig_requirement()}")
    else:
        cc = compiler(board, host_cc)
        if not shutil.which(cc):
            pkg = board["toolchain_package"] if board["toolchain_prefix"] else host_cc
            return f"board {board['name']} needs the compiler {cc}: apt-get install {pkg}"
    return missing_emulator(board) if run else None


def missing_emulator(board: dict) -> str | None:
    """One line saying why a binary cannot run on the board here (no emulator at all, or its
    emulator not installed: the command that installs it), or None."""
    if no_emulator(board):
        return no_emulator(board)
    if board["emulator"]["command"] and not shutil.which(board["emulator"]["command"][0]):
        return (f"board {board['name']} runs under {board['emulator']['command'][0]}: "
                f"apt-get install {board['emulator']['package']}")
    return None


def has_host_files(board: dict) -> bool:
    """Whether the firmware reaches the host's files (--tools, --logits ...): Linux, or a
    bare-metal board on the semihosting console.  A UART board has no file system."""
    return board["os"] == "linux" or board.get("console", "semihost") == "semihost"


def soft_float(board: dict) -> bool:
    """Boards whose f32 arithmetic is calls into the compiler's runtime, where the project's own
    soft float takes its place: MIPS boards built for musl soft float (zig target
    `mips*-linux-musleabi`: their cores have no FPU and OpenWrt kernels do not emulate one), and
    RISC-V boards with the soft-float ABI (-mabi=ilp32 on a core without F: the ESP32-C6)."""
    if board.get("toolchain") == "zig" and board["zig_target"].startswith("mips"):
        return not board["zig_target"].endswith("hf")
    fabi = riscv_float_abi(board)
    return fabi is not None and fabi[1] == "soft"


def runtime_sources(board: dict) -> list[str]:
    """Run-time support linked into the engine itself (paths under firmware/): on a
    soft-float board the f32 add, subtract and multiply that replace the compiler runtime's
    (firmware/softfloat/softfloat.c, README "The portable family on cores without SIMD")."""
    return list(sources.SOFTFLOAT_SOURCES) if soft_float(board) else []


def hal_sources(board: dict) -> list[str]:
    """The HAL behind hal.h for a bare-metal board (paths under firmware/): a UART console is
    the shared console logic plus the driver of the board's UART kind."""
    extra = sources.sha256_sources(board["sha256"]) if "sha256" in board else []
    if "flash_driver" in board.get("slots", {}):     # MCUboot's image_ok (baremetal/mcuboot.c)
        extra += sources.flash_sources(board["slots"]["flash_driver"])
    kind = board["uart"].get("kind", UART_KINDS[0]) if board["console"] == "uart" else None
    return sources.console_sources(board["console"], kind) + extra


def hal_defines(board: dict) -> list[str]:
    """Compiler flags the board's HAL needs: a UART console's address, its clock and the
    processor's (SysTick: the command-line wait), and (QEMU boards only)
    NEEDLE_UART_SEMIHOST_EXIT=1 to report the exit status by semihosting; the boot block the
    board's boot ROM wants (boot_block: startup.c); with [slots], the primary slot's end and the
    flash's write alignment, where MCUboot's trailer is (baremetal/mcuboot.c)."""
    out = [BOOT_BLOCKS[board["boot_block"]]] if "boot_block" in board else []
    if "slots" in board:          # where MCUboot's trailer is (baremetal/mcuboot.c)
        primary = board["slots"]["primary"]
        out += [f"-DNEEDLE_MCUBOOT_PRIMARY_END=0x{primary['origin'] + primary['length']:X}u",
                f"-DNEEDLE_MCUBOOT_ALIGN={board['slots']['align']}u"]
    if board.get("console") != "uart":
        return out
    u = board["uart"]
    return out + [f"-DNEEDLE_UART_BASE=0x{u['base']:x}u", f"-DNEEDLE_UART_CLOCK_HZ={u['clock_hz']}u",
                  f"-DNEEDLE_UART_CPU_CLOCK_HZ={u.get('cpu_clock_hz', u['clock_hz'])}u",
                  f"-DNEEDLE_UART_SEMIHOST_EXIT={int(u.get('semihost_exit', False))}"]


def stdin_line(board: dict, args: list[str]) -> str | None:
    """What a UART board reads as its command line (send it on the emulator's standard
    input, `-serial stdio`); None for the other boards (their arguments are in run_command)."""
    if board.get("console") != "uart":
        return None
    return " ".join(_quote(a) for a in args) + "\n"


def run_command(board: dict, binary: str, args: list[str], archive_image: str | None = None) -> list[str]:
    """The command that runs `binary args...` on the board (natively or under its emulator).
    A UART board takes its arguments on standard input instead (stdin_line): here, none."""
    if no_emulator(board):
        raise CactError(no_emulator(board))
    emu = list(board["emulator"]["command"])
    if board["os"] == "linux":
        if board["archive"]["placement"] == "file":
            if not archive_image:
                raise CactError(f"board {board['name']} reads the archive from a file: give its path")
            return emu + [binary, "--archive", archive_image] + list(args)
        return emu + [binary] + list(args)
    if board.get("console") == "uart":
        if args:
            raise CactError(f"board {board['name']} reads its command line on the UART: send "
                            "stdin_line(board, args) on standard input, run_command(..., [])")
        # UART0 on the emulator's stdin/stdout (not mon:stdio: no monitor escapes in the bytes)
        while "-serial" in emu:
            at = emu.index("-serial")
            del emu[at:at + 2]
        cmd = emu + ["-serial", "stdio", "-kernel", binary]
    else:
        cmd = emu + ["-kernel", binary, "-append", " ".join(_quote(a) for a in args)]
    if board["archive"]["placement"] == "partition":
        if not archive_image:
            raise CactError(f"board {board['name']} keeps the archive in a partition: give its image")
        cmd += ["-device", f"loader,file={archive_image},addr=0x{region(board, 'archive')['origin']:x},force-raw=on"]
    return cmd


def gdb_commands(board: dict, binary: str, args: list[str], archive_image: str | None = None,
                 port: int = 1234) -> tuple[list[str] | None, list[str]]:
    """(the emulator command with its gdb stub listening on `port` and the core halted before
    the first instruction, the gdb command that attaches to it).  The host board has no
    emulator: (None, gdb --args ...)."""
    if no_emulator(board):
        raise CactError(no_emulator(board))
    if not board["emulator"]["command"]:
        return None, ["gdb", "--args", binary, *args]
    cmd = run_command(board, binary, args, archive_image)
    if board["os"] == "linux":       # qemu-user: -g PORT waits for gdb before the first instruction
        emu = [cmd[0], "-g", str(port), *cmd[1:]]
    else:                            # qemu-system: the stub on PORT, CPU stopped at reset (-S)
        emu = [cmd[0], "-gdb", f"tcp::{port}", "-S", *cmd[1:]]
    return emu, ["gdb-multiarch", binary, "-ex", f"target remote localhost:{port}"]


def _quote(arg: str) -> str:
    """Quote one argument for the bare-metal HAL's command-line splitter."""
    if arg and not any(c in arg for c in ' "\\'):
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def shell_line(cmd: list[str]) -> str:
    return " ".join(shlex.quote(c) for c in cmd)
