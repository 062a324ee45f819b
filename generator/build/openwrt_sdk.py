"""The board file an OpenWrt SDK build uses: the router board of the SDK's package
architecture, compiled by the SDK's own gcc instead of zig cc.

The OpenWrt package Makefile (templates/openwrt/Makefile.j2, written by `scons dist`) runs

    python3 -m generator.build.openwrt_sdk --arch-packages $(ARCH_PACKAGES) \\
        --cc $(TOOLCHAIN_DIR)/bin/$(TARGET_CC_NOCACHE) --cflags "$(TARGET_CFLAGS)" -o boards/openwrt-sdk.toml
    python3 -m SCons board=openwrt-sdk ...

The board is the router board whose [package] openwrt_arch is ARCH_PACKAGES (mipsel_24kc:
router-mt7621, ...), with every table kept (memory, archive placement, package, emulator) and
only the compiler changed: toolchain "gnu", toolchain_prefix the SDK's (TARGET_CC without its
`gcc`), arch_flags the SDK's TARGET_CFLAGS without their optimisation level (the engine's -O2
stays: docs/numerics.md).  The post-link check then holds the SDK's executable to the same
rules as the zig build (soft float on MIPS, no heap, the flash budget).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys

from generator.build import boards, package
from generator.errors import CactError

BOARD = "openwrt-sdk"


def router_for(arch_packages: str) -> dict:
    routers = {}
    for name in package._router_names():
        routers[boards.load(name)["package"]["openwrt_arch"]] = name
    if arch_packages not in routers:
        known = ", ".join(f"{a} ({n})" for a, n in sorted(routers.items()))
        raise CactError(f"no needle-fw board for the OpenWrt package architecture {arch_packages!r}: "
                        f"needle-fw builds {known}")
    return boards.load(routers[arch_packages])


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)                 # a TOML basic string for what board files hold
    if isinstance(value, list) and all(isinstance(v, (str, int)) for v in value):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise CactError(f"cannot write {value!r} into a board file")


def board_toml(arch_packages: str, cc: str, cflags: str) -> str:
    """The text of boards/openwrt-sdk.toml."""
    if not os.path.basename(cc).endswith("gcc"):
        raise CactError(f"--cc {cc!r}: the SDK's gcc is needed (TARGET_CC_NOCACHE, ...-gcc; not a ccache wrapper)")
    router = router_for(arch_packages)
    data = {k: v for k, v in router.items() if k not in ("zig_target", "toolchain", "toolchain_prefix", "console")}
    data.update(name=BOARD, toolchain="gnu", toolchain_prefix=cc[:-len("gcc")], toolchain_package="the OpenWrt SDK",
                description=f"{router['description']} (OpenWrt SDK build of {router['name']})",
                arch_flags=[f for f in shlex.split(cflags) if not f.startswith("-O")])
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    lines = [f"# {BOARD}: {router['name']} built by the OpenWrt SDK's gcc (generator/build/openwrt_sdk.py)"]
    allowed = set(boards.TOP_KEYS)
    for key, value in data.items():
        if not isinstance(value, dict) and key in allowed:
            lines.append(f"{key} = {_toml_value(value)}")
    for table, values in tables.items():
        if table not in allowed:
            continue
        lines += ["", f"[{table}]"] + [f"{k} = {_toml_value(v)}" for k, v in values.items()
                                        if k in boards.TABLE_KEYS.get(table, {})]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = package._Parser(prog="python -m generator.build.openwrt_sdk",
                        description="Write the board file of an OpenWrt SDK build (boards/openwrt-sdk.toml).")
    p.add_argument("--arch-packages", required=True, help="the SDK's $(ARCH_PACKAGES), e.g. mipsel_24kc")
    p.add_argument("--cc", required=True, help="the SDK's gcc: $(TOOLCHAIN_DIR)/bin/$(TARGET_CC_NOCACHE)")
    p.add_argument("--cflags", default="", help="the SDK's $(TARGET_CFLAGS)")
    p.add_argument("-o", "--output", required=True, help="the board file to write (boards/openwrt-sdk.toml)")
    return p.run(argv, lambda args: print(package._write_atomic(
        args.output, board_toml(args.arch_packages, args.cc, args.cflags).encode())))

if __name__ == "__main__":
    sys.exit(main())
