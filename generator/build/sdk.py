"""The engine as a library: what `scons board=X lib=1` writes into build/X/sdk.

    sdk/include/needle.h                    one include: model, tokenizer, prompt renderer
    sdk/include/needle_model.h, needle_tokenizer.h, needle_tool_prompt.h
    sdk/lib/libneedle.a                     engine, kernels, tokenizer, prompt renderer, and the
                                            archive itself when the board links it (section .cact)
    sdk/lib/pkgconfig/needle.pc             pkg-config (cc, Cflags with the board's arch flags, Libs)
    sdk/lib/cmake/needle/needle-config.cmake (+ -version): find_package(needle) -> needle::needle
    sdk/share/needle/toolchain.cmake        the board's compiler for CMake (CMAKE_TOOLCHAIN_FILE)
    sdk/share/needle/needle.cact            placement "file": the archive to install beside the program
    sdk/share/needle/archive.bin            placement "partition": the image to flash at its address
  bare-metal boards also:
    sdk/include/needle_hal.h                the console/exit seam of the board support
    sdk/lib/libneedle_board.a               the board's reference support: start-up, vector table,
                                            console, fault handler; calls the application's main()
    sdk/lib/pkgconfig/needle-board.pc, needle::board, sdk/share/needle/needle.ld (linker script)

Every generated file names paths relative to itself (pkg-config's ${pcfiledir}, CMake's
CMAKE_CURRENT_LIST_DIR), so the directory can be moved, copied or packed as it is.
SConstruct compiles and archives; this module says which files go where and renders the
metadata from templates/sdk/.
"""

from __future__ import annotations

import os
import shlex
import sys

from generator.build import boards, flags, sources
from generator.codegen import render
from generator.errors import CactError

SDK_DIR = "sdk"

# installed header name -> where it comes from ("gen/" the generated engine, else firmware/):
# the library's headers keep the names they have in the tree (generator/build/sources.py)
HEADERS = {"needle_model.h": "gen/needle_model.h", "needle_tokenizer.h": "gen/needle_tokenizer.h",
           **{os.path.basename(p): p for p in sources.PUBLIC_HEADERS}}
# with a built-in tool list (scons tools=FILE): its typed bindings
TOOLS_HEADERS = {"needle_tools.h": "gen/needle_tools.h"}
BOARD_HEADERS = {"needle_hal.h": "hal/hal.h"}
# the source lists live in generator/build/sources.py; these names are what SConstruct reads
PER_TOKEN_GLUE = sources.PER_TOKEN_GLUE
LIBRARY_SOURCES = sources.LIBRARY_SOURCES
# the command line's own sources (firmware/cli/main.c and the library it calls on every board)
CLI_SOURCES = sources.CLI_SOURCES + sources.LIBRARY_SOURCES
# templates/sdk/<name>.j2 -> path in the SDK
METADATA = {"needle.h": "include/needle.h", "needle.pc": "lib/pkgconfig/needle.pc",
            "needle-config.cmake": "lib/cmake/needle/needle-config.cmake",
            "needle-config-version.cmake": "lib/cmake/needle/needle-config-version.cmake",
            "toolchain.cmake": "share/needle/toolchain.cmake"}
BOARD_METADATA = {"needle-board.pc": "lib/pkgconfig/needle-board.pc"}
# the reference board support's entry: nothing references the start-up object, so the link
# names its reset handler (which keeps the vector table and pulls in the console)
BOARD_ENTRY = "Reset_Handler"
# newlib's system calls on the HAL (firmware/baremetal/syscalls.c): in libneedle_board.a only,
# never in the needle firmware (whose engine is heap-free).  The C library is searched after
# libneedle_board.a, so the link names one of them and the whole object comes in first.
SYSCALL_ENTRY = {"Arm Cortex-M": "_write", "riscv32": "stdout"}


def syscall_sources(board: dict) -> list[str]:
    """The C library's hooks on the HAL for the board's instruction set (paths under firmware/)."""
    return sources.SYSCALL_SOURCES[boards.board_arch(board)]
SHA256_HOOK = "hal_sha256"
FLASH_HOOK = "hal_flash_program"
CONFIRM_HOOK = "needle_image_confirm"
# The needle firmware links newlib-nano (it formats on its own); a user's program on the board
# support gets the full newlib, whose printf has %lld and %f (newlib-nano's has neither).
NANO = ("--specs=nano.specs",)
PROCESSORS = {"arm": "arm", "mips": "mips"}


def board_support_sources(board: dict) -> list[str]:
    """firmware/ sources of libneedle_board.a: start-up, the board's console, formatting."""
    # mcuboot.c confirms the image (needle_boot) and defines a weak hal_flash_program; it comes
    # after the HAL, whose flash driver defines the strong one: in libneedle_board.a the linker
    # takes the first member that defines a symbol it needs, so the driver's must come first
    mcuboot = sources.MCUBOOT_SOURCES if "slots" in board else []
    return sources.board_support_sources(boards.board_arch(board)) + boards.hal_sources(board) + mcuboot


def archive_file(board: dict) -> str | None:
    """The archive file an SDK ships (share/needle/...), or None when it is linked in."""
    return {"file": "needle.cact", "partition": "archive.bin"}.get(board["archive"]["placement"])


def metadata_files(board: dict) -> dict[str, str]:
    """Template name -> SDK path of every rendered file for this board."""
    out = dict(METADATA)
    if board["os"] == "none":
        out.update(BOARD_METADATA)
    return out


def archiver(board: dict) -> tuple[str, str]:
    """The `ar` and `ranlib` command lines that go with boards.compiler(board)."""
    if board["toolchain"] == "zig":
        zig = shlex.join([sys.executable, "-m", "ziglang"])
        return f"{zig} ar", f"{zig} ranlib"
    prefix = board["toolchain_prefix"]
    return f"{prefix}ar", f"{prefix}ranlib"


def _zig_binary() -> str:
    import ziglang
    return os.path.join(os.path.dirname(ziglang.__file__), "zig")


def _processor(board: dict) -> str:
    arch = board.get("zig_target", board["toolchain_prefix"] or "x86_64").split("-")[0]
    return next((v for k, v in PROCESSORS.items() if arch.startswith(k)), arch)


def libc_include_flags(board: dict, host_cc: str = "gcc") -> list[str]:
    """-isystem flags for the C library's headers where the compile flags reach them through a
    specs file (flags.BARE_LIBC_COMPILE: picolibc on RISC-V), as the compiler itself lists them
    (`-E -v`: its include search); [] elsewhere."""
    import subprocess
    specs = list(flags.BARE_LIBC_COMPILE.get(boards.board_arch(board), ()))
    if not specs:
        return []
    cmd = boards.compiler_argv(board, host_cc) + board["arch_flags"] + specs + ["-xc", "-E", "-v", os.devnull]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = proc.stderr.splitlines()
    try:
        start, end = lines.index("#include <...> search starts here:"), lines.index("End of search list.")
    except ValueError:
        raise CactError(f"{shlex.join(cmd)} did not list its include directories: {proc.stderr.strip()[-300:]}") from None
    dirs = [ln.strip() for ln in lines[start + 1:end] if "picolibc" in ln]
    if not dirs:
        raise CactError(f"board {board['name']}: the compiler lists no picolibc include directory: "
                        f"apt-get install {board['toolchain_package']}")
    return [f"-isystem{d}" for d in dirs]


def context(board: dict, sha256: str, host_cc: str = "gcc", threads: int = 1) -> dict:
    """What the templates of templates/sdk/ read (threads: the engine's NEEDLE_THREADS)."""
    from generator import __version__
    bare = board["os"] == "none"
    link = flags.link_flags(board, "@LDSCRIPT@") if bare else flags.link_flags(board)
    # the architecture's flags, and on RISC-V picolibc's headers (the firmware's build takes them
    # from its specs file, which the board's link flags name: a compile-and-link command that
    # gets both Cflags and Libs must not name it twice, so Cflags names the directory)
    arch = list(board["arch_flags"]) + (libc_include_flags(board, host_cc) if bare else [])
    # needle::needle / needle.pc: the flags that must match the library's objects
    needle_link = [f for f in link if f in arch or f == "-static"] + (["-pthread"] if threads > 1 else [])
    # needle::board / needle-board.pc: the start-up files, linker script and entry on top
    # (the full newlib, not newlib-nano: a user's printf has %lld and %f; the engine calls none of it)
    board_link = [f for f in link if f not in needle_link and f not in NANO] + [
        f"-Wl,--undefined={BOARD_ENTRY}", f"-Wl,--undefined={SYSCALL_ENTRY.get(boards.board_arch(board), '_write')}"] + (
        # a hash accelerator's hal_sha256 must win over the engine's weak software one
        [f"-Wl,--undefined={SHA256_HOOK}"] if "sha256" in board else []) + (
        # with [slots]: the image confirmation libneedle.a's needle_boot calls (this library is
        # searched before libneedle.a), and a flash driver's hal_flash_program over the weak
        # refusal in mcuboot.c's object
        [f"-Wl,--undefined={CONFIRM_HOOK}"] if "slots" in board else []) + (
        [f"-Wl,--undefined={FLASH_HOOK}"] if "flash_driver" in board.get("slots", {}) else [])
    arch_region = next((r for r in board["memory"].get("regions", []) if r["use"] == "archive"), None)
    return {
        "version": __version__, "board": board["name"], "os": board["os"], "bare": bare,
        "console": board.get("console", "semihost"), "placement": board["archive"]["placement"],
        "archive_address": arch_region["origin"] if arch_region else 0, "sha256": sha256,
        "cc": boards.compiler(board, host_cc), "arch_flags": arch,
        "cross": board["name"] != "host", "zig": board["toolchain"] == "zig",
        "zig_target": board.get("zig_target", ""), "zig_binary": _zig_binary() if board["toolchain"] == "zig" else "",
        "processor": _processor(board),
        "link_options": needle_link,
        "board_link_options": [f.replace("@LDSCRIPT@", "${_needle_prefix}/share/needle/needle.ld") for f in board_link],
        "cflags": "".join(" " + f for f in arch),
        "libs": " -lneedle -lm" + "".join(" " + f for f in needle_link),
        "board_libs": " -lneedle_board" + "".join(" " + f.replace("@LDSCRIPT@", "${datadir}/needle.ld")
                                                  for f in board_link),
    }


def write_metadata(board: dict, sdk_dir: str, sha256: str, host_cc: str = "gcc", threads: int = 1) -> list[str]:
    """Render pkg-config, CMake and header files into sdk_dir; returns the paths written."""
    ctx = context(board, sha256, host_cc, threads)
    written = []
    for template, rel in metadata_files(board).items():
        path = os.path.join(sdk_dir, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(render.render(f"sdk/{template}.j2", ctx))
        written.append(path)
    return written
