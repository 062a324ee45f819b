"""The hand-written C sources, listed once (paths under firmware/).

    firmware/lib/         the library: what libneedle.a holds beside the generated engine
                          (JSON scanning, the prompt renderer, the call grammar, the constrained
                          turn, bindings, retrieval, the text-level API); its headers are the
                          SDK's, installed under the names they have here
    firmware/cli/         the command line on every board (main.c, entry.c) and, on Linux, the
                          service and the benchmark
    firmware/hal/         the HAL behind hal.h: Linux, semihosting, UART, SHA-256 engines
    firmware/baremetal/   start-up, system calls and the benchmark of bare-metal boards
    firmware/softfloat/   the soft-float boards' f32 arithmetic
    firmware/buildtools/  the host program that compiles built-in tools into grammar tables

SConstruct, the SDK (generator/build/sdk.py), the board files' HAL and run-time lists
(generator/build/boards.py), the fuzz harnesses and the host tests read these lists; none of
them writes a firmware path of its own.  This module imports nothing of the generator.
"""

from __future__ import annotations

LIB_DIR = "lib"
CLI_DIR = "cli"
HAL_DIR = "hal"
# the compiler's include path (beside gen/): the library's headers, the CLI's, hal.h
INCLUDE_DIRS = (LIB_DIR, CLI_DIR, HAL_DIR)

# the JSON and UTF-8 scanner every JSON reader of the library shares (no heap)
JSON_SOURCES = [f"{LIB_DIR}/needle_json_scan.c"]
# the prompt renderer and what it needs
PROMPT_SOURCES = JSON_SOURCES + [f"{LIB_DIR}/needle_tool_prompt.c"]
# the call grammar and what it needs: the schema compiler, the pattern subset and the matcher
# (twins of generator/tools/schema.py, regex.py, grammar.py)
GRAMMAR_SOURCES = PROMPT_SOURCES + [f"{LIB_DIR}/{f}" for f in (
    "needle_grammar_schema.c", "needle_grammar_regex.c", "needle_tool_grammar.c")]
# what libneedle.a holds beyond the generated engine's own sources
LIBRARY_SOURCES = GRAMMAR_SOURCES + [f"{LIB_DIR}/{f}" for f in (
    "needle_tool_call.c", "needle_envelope.c", "needle_bindings.c", "needle_retrieval.c", "needle_session.c")]
# the library's public headers: installed into the SDK under these same names
PUBLIC_HEADERS = [f"{LIB_DIR}/{f}" for f in (
    "needle_tool_prompt.h", "needle_tool_grammar.h", "needle_tool_call.h", "needle_bindings.h",
    "needle_retrieval.h", "needle_session.h")]
# hand-written sources that run for every token (the grammar's matcher and its pattern items,
# the constrained turn): compiled for speed even where the rest of the glue is compiled for size
PER_TOKEN_GLUE = tuple(f"{LIB_DIR}/{f}" for f in ("needle_tool_grammar.c", "needle_grammar_regex.c", "needle_tool_call.c"))

# the command line, the same program on every board (it talks only to hal.h)
CLI_SOURCES = [f"{CLI_DIR}/entry.c", f"{CLI_DIR}/main.c"]
# a Linux board's firmware beside the CLI and the library: the HAL, the benchmark, the service
LINUX_SOURCES = [f"{HAL_DIR}/format.c", f"{HAL_DIR}/linux/hal_linux.c", f"{HAL_DIR}/linux/stdio_file.c",
                 f"{CLI_DIR}/bench.c"] + [f"{CLI_DIR}/serve_{f}.c" for f in ("transport", "requests", "sessions")]
# a bare-metal board's: the SysTick benchmark (beside the board support below)
BAREMETAL_SOURCES = ["baremetal/bench_mcu.c"]
# the reference board support's start-up, per bare-metal instruction set (the names
# generator/build/boards.py board_arch gives), and its formatting (libneedle_board.a; + the console)
STARTUP_SOURCES = {"Arm Cortex-M": "baremetal/startup.c", "riscv32": "baremetal/startup_riscv.c"}
FORMAT_SOURCES = [f"{HAL_DIR}/format.c"]


def board_support_sources(arch: str) -> list[str]:
    """Start-up and formatting of a bare-metal board of instruction set `arch`."""
    return [STARTUP_SOURCES[arch]] + FORMAT_SOURCES
# the C library's hooks on the HAL, per bare-metal instruction set: libneedle_board.a only
# (generator/build/sdk.py): newlib's system calls (Cortex-M), picolibc's standard streams (RISC-V)
SYSCALL_SOURCES = {"Arm Cortex-M": ["baremetal/syscalls.c"], "riscv32": ["baremetal/syscalls_picolibc.c"]}
# f32 arithmetic of the soft-float boards (generator/build/boards.py runtime_sources)
SOFTFLOAT_SOURCES = ["softfloat/softfloat.c"]
# the host program that compiles built-in tools into grammar tables (generator/tools/tables.py)
GRAMMAR_TABLES_SOURCES = ["buildtools/grammar_tables.c"] + GRAMMAR_SOURCES


def console_sources(console: str, uart_kind: str | None = None) -> list[str]:
    """The HAL of a bare-metal console: semihosting, or a UART's shared logic and its driver."""
    if console == "uart":
        return [f"{HAL_DIR}/uart/hal_uart.c", f"{HAL_DIR}/uart/uart_{uart_kind}.c", f"{HAL_DIR}/cmdline.c"]
    return [f"{HAL_DIR}/{console}/hal_{console}.c", f"{HAL_DIR}/cmdline.c"]


def sha256_sources(kind: str) -> list[str]:
    """A chip's SHA-256 engine, overriding the engine's weak software hal_sha256."""
    return [f"{HAL_DIR}/sha256/sha256_{kind}.c"]


def flash_sources(driver: str) -> list[str]:
    """A chip's flash-programming driver, overriding mcuboot.c's weak hal_flash_program."""
    return [f"{HAL_DIR}/flash/flash_{driver}.c"]


# an MCUboot board's self-confirmation (needle_boot calls it once the archive checks pass)
MCUBOOT_SOURCES = ["baremetal/mcuboot.c"]
