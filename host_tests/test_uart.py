"""The UART console (firmware/hal/uart): console, command line and fault dump on UART0 under
qemu-system-arm, which connects it to standard input and output (`-serial stdio`): the CMSDK
UART of the MPS2 AN386 (watch-m4-uart) and of the MPS3 AN547 (watch-m55-uart), and the PL011
driver on QEMU's Stellaris lm3s6965evb (a tiny firmware built here: the board that uses it for
real, rp2350-pico-plus2, has no emulator).  The command line is one line on stdin; without one
(nothing within a second, or an empty line) the firmware runs its demo prompt.  Every run ends
with the line `needle: exit N`; the exit status reaches the test through semihosting only
because the board sets [uart] semihost_exit (QEMU only; a real board stops the core).

The golden-logit runs (test_boards.py) skip UART boards: they write logits to a host file,
and a UART board has no file system; here the greedy ids of the UART boards are checked
against their semihosting twins instead.  And the semihosting boards still behave as before."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from generator.build import boards
from host_tests.scons_run import build_to_run
from host_tests.tiny_firmware import build_tiny

ROOT = Path(__file__).resolve().parent.parent
ARCHIVE = ROOT / "host_tests" / "golden" / "tiny" / "archive.cact"
TOO_LONG = ("needle: error: the command line is longer than 4096 bytes (the firmware's UART line "
            "buffer): send shorter arguments")


UART_BOARDS = ["watch-m4-uart", "watch-m55-uart"]     # CMSDK UART, QEMU mps2-an386 / mps3-an547


@pytest.fixture(scope="module")
def built(tmp_path_factory, board_runner):
    """name -> the runner of its built image, each board built once for the module."""
    cache = {}

    def get(name: str):
        if name not in cache:
            cache[name] = board_runner(*build_to_run(name, ARCHIVE, tmp_path_factory.mktemp(name)))
        return cache[name]
    return get


@pytest.fixture(scope="module")
def uart(built):
    return built("watch-m4-uart")


@pytest.fixture(scope="module", params=UART_BOARDS)
def console(built, request):
    return built(request.param)


def where(run) -> Path:
    """The directory of the runner's image (the runs' working directory)."""
    return Path(run.binary).parent


def test_board_file_console_key(tmp_path, monkeypatch):
    b = boards.load("watch-m4-uart")
    assert b["console"] == "uart" and boards.load("watch-m4")["console"] == "semihost"
    assert not boards.has_host_files(b) and boards.has_host_files(boards.load("watch-m4"))
    assert b["uart"]["kind"] == "cmsdk"
    assert boards.hal_sources(b) == ["hal/uart/hal_uart.c", "hal/uart/uart_cmsdk.c", "hal/cmdline.c"]
    assert "-DNEEDLE_UART_SEMIHOST_EXIT=1" in boards.hal_defines(b)
    assert "-DNEEDLE_UART_CPU_CLOCK_HZ=25000000u" in boards.hal_defines(b)     # AN386: one clock
    # the AN547: UART0's secure alias, PCLK 25 MHz, CPU (SysTick) 32 MHz; run like watch-m4-uart
    m55 = boards.load("watch-m55-uart")
    assert boards.hal_defines(m55)[-4:] == ["-DNEEDLE_UART_BASE=0x59303000u", "-DNEEDLE_UART_CLOCK_HZ=25000000u",
                                            "-DNEEDLE_UART_CPU_CLOCK_HZ=32000000u", "-DNEEDLE_UART_SEMIHOST_EXIT=1"]
    cmd = boards.run_command(m55, "n.elf", [])
    assert cmd[:3] == ["qemu-system-arm", "-M", "mps3-an547"] and cmd[cmd.index("-serial") + 1] == "stdio"
    # the real RP2350 board: a PL011, no semihosting exit (no debugger attached)
    rp = boards.load("rp2350-pico-plus2")
    assert rp["console"] == "uart" and rp["uart"]["kind"] == "pl011" and not boards.has_host_files(rp)
    assert boards.hal_sources(rp) == ["hal/uart/hal_uart.c", "hal/uart/uart_pl011.c", "hal/cmdline.c"]
    assert "-DNEEDLE_UART_BASE=0x40070000u" in boards.hal_defines(rp)
    assert "-DNEEDLE_UART_SEMIHOST_EXIT=0" in boards.hal_defines(rp)
    # the STM32 stays on semihosting: its USART is neither kind
    assert boards.load("stm32h750b-dk")["console"] == "semihost"
    cmd = boards.run_command(b, "n.elf", [])
    assert cmd[cmd.index("-serial") + 1] == "stdio" and cmd.count("-serial") == 1 and "-append" not in cmd
    assert boards.stdin_line(b, ["--prompt", 'say "hi"']) == '--prompt "say \\"hi\\""\n'
    assert boards.stdin_line(boards.load("watch-m4"), ["--info"]) is None
    # semihosting boards: unchanged command line
    m4 = boards.run_command(boards.load("watch-m4"), "n.elf", ["--info"])
    assert m4[-2:] == ["-append", "--info"] and m4[m4.index("-serial") + 1] == "none"
    # one-line errors for bad values
    d = tmp_path / "boards"
    d.mkdir()
    for name in ("watch-m4", "watch-m4-uart"):
        (d / f"{name}.toml").write_text((ROOT / "boards" / f"{name}.toml").read_text())
    monkeypatch.setattr(boards, "BOARDS_DIR", d)
    text = (d / "watch-m4-uart.toml").read_text()
    for edit, message in [(text.replace('console = "uart"', 'console = "swo"'), "console must be semihost or uart"),
                          (text.split("[uart]")[0], 'console = "uart" needs a [uart] table'),
                          (text.replace('console = "uart"', ""), '[uart] goes with console = "uart"'),
                          (text.replace("[uart]", "[uart]\nbaud = 9600"), "unknown key uart.baud"),
                          (text.replace("[uart]", '[uart]\nkind = "usart"'),
                           "uart.kind must be cmsdk or pl011 (the UART's IP; another one needs its own driver, "
                           "firmware/hal/uart/uart_<kind>.c), not 'usart'"),
                          (text.replace("[uart]", "[uart]\nkind = 11"), "uart.kind must be a string"),
                          (text.replace("[uart]", "[uart]\ncpu_clock_hz = 0"), "uart.cpu_clock_hz must be the processor clock")]:
        (d / "watch-m4-uart.toml").write_text(edit)
        with pytest.raises(Exception) as err:
            boards.load("watch-m4-uart")
        assert str(err.value).startswith("board file watch-m4-uart.toml: ") and message in str(err.value)
        assert "\n" not in str(err.value)


def test_info_through_the_uart(console):
    proc = console.run(["--info"], cwd=where(console))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("needle-fw engine ") and lines[0].endswith(f"board {console.name}")
    assert any(line.startswith("kv cache ") for line in lines)
    assert lines[-1] == "needle: exit 0"


def test_quoted_words_and_errors_through_the_uart(console):
    proc = console.run(["--tokens", "2,99999"], cwd=where(console))
    assert proc.returncode == 2
    assert proc.stdout.splitlines() == ['needle: error: --tokens: "99999" is not a token id in 0..1023',
                                        "needle: exit 2"]
    # no file system: a file option fails with the reason, exit 1
    proc = console.run(["--tokens", "2,3", "--logits", "out.f32"], cwd=where(console))
    assert proc.returncode == 1
    assert "cannot write out.f32: no file system on this board" in proc.stdout
    assert not (where(console) / "out.f32").exists()
    # a quoted prompt with spaces is one word (the splitter the semihosting HAL shares)
    proc = console.run(["--prompt", "hello there", "--max-new", "2", "--ids"], cwd=where(console))
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.splitlines()[-1] == "needle: exit 0"


@pytest.mark.parametrize("line", [None, "\n", "   \r\n"])
def test_no_command_line_runs_the_demo(console, line):
    proc = console.run(None, stdin=line or "", cwd=where(console))
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.endswith("needle: exit 0\n") and len(proc.stdout) > len("needle: exit 0\n")
    assert "error" not in proc.stdout


def test_over_long_command_line_is_one_line_error(console):
    proc = console.run(None, stdin="--prompt " + "a" * 4096 + "\n", cwd=where(console))
    assert proc.returncode == 2
    assert proc.stdout.splitlines() == [TOO_LONG, "needle: exit 2"]
    # 4096 bytes reach the CLI (which refuses the unknown option)
    proc = console.run(None, stdin="--" + "b" * 4094 + "\n", cwd=where(console))
    assert proc.returncode == 2 and TOO_LONG not in proc.stdout and 'unknown option "--bbbb' in proc.stdout
    # and more than 32 words is the shared splitter's error
    proc = console.run(["x"] * 32, cwd=where(console))
    assert proc.returncode == 2 and "the command line has more than 32 words" in proc.stdout


GREEDY = ["--prompt", "What is the weather in Lagos?", "--max-new", "12", "--ids"]


@pytest.mark.parametrize("name", UART_BOARDS)
def test_greedy_ids_match_the_semihosting_twin(built, name):
    """The golden check a UART board can take: the same generation, token for token, as its
    semihosting twin (whose logits test_boards.py compares with the goldens)."""
    run, twin = built(name), built(name.removesuffix("-uart"))
    proc = run.run(GREEDY, cwd=where(run))
    assert proc.returncode == 0, proc.stdout
    want = twin.run(GREEDY, cwd=where(twin))
    assert want.returncode == 0, want.stderr
    ids = proc.stdout.splitlines()[0]
    assert ids == want.stdout.strip() and len(ids.split(",")) == 12


FAULT_MAIN = r"""
#include "hal.h"
/* the CLI replaced by an undefined instruction: a usage fault, escalated to a hard fault */
int main(int argc, char **argv)
{
    (void)argc; (void)argv;
    hal_printf("about to fault\n");
    __asm__ volatile(".inst.n 0xde00");
    return 0;
}
"""


def test_fault_dumps_registers_and_exits_4(uart, tmp_path, board_runner):
    """A tiny firmware: the real start-up, UART HAL and command line, and a main that
    executes an undefined instruction; linked with the board's linker-script template."""
    board = uart.board
    elf = build_tiny(board, FAULT_MAIN, tmp_path, "fault")
    proc = board_runner(board, elf).run(None, stdin="go\n", cwd=elf.parent)
    assert proc.returncode == 4, proc.stdout
    lines = proc.stdout.splitlines()
    assert lines[0] == "about to fault"
    assert lines[1] == "needle: fault: hard fault (exception 3)"
    assert lines[2].startswith("needle: fault: r0=0x") and " r3=0x" in lines[2]
    assert lines[3].startswith("needle: fault: r12=0x") and " pc=0x" in lines[3] and " xpsr=0x" in lines[3]
    # CFSR UNDEFINSTR (bit 16), HFSR FORCED (bit 30)
    assert lines[4].startswith("needle: fault: cfsr=0x10000 hfsr=0x40000000 mmfar=0x")
    assert lines[5:] == ["needle: exit 4"]
    # pc points at the undefined instruction
    pc = int(lines[3].split(" pc=0x")[1].split()[0], 16)
    nm = subprocess.run([board["toolchain_prefix"] + "nm", str(elf)], capture_output=True,
                        text=True, check=True).stdout
    cli = next(int(line.split()[0], 16) for line in nm.splitlines() if line.endswith(" main"))
    assert cli <= pc < cli + 64


def test_semihost_watch_unchanged(built, tmp_path):
    m4 = built("watch-m4")
    proc = m4.run(["--info"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("needle-fw engine ") and "board watch-m4\n" in proc.stdout
    assert "needle: exit" not in proc.stdout           # no UART line: semihosting exits silently
    err = m4.run(["--tokens", "2,99999"], cwd=tmp_path)
    assert err.returncode == 2 and err.stderr.count("\n") == 1 and "is not a token id" in err.stderr


# ---- the PL011 driver, on QEMU's Stellaris LM3S6965 (Cortex-M3, no FPU) -----------------------

# A board file for the test only: the LM3S6965's UART0 is a PL011 (QEMU's pl011_luminary); QEMU
# clocks the chip at 12.5 MHz out of reset (RCC's SYSDIV /16 of 200 MHz), UART and SysTick alike.
LM3S6965 = """
name = "lm3s6965-pl011"
description = "TI Stellaris LM3S6965 (QEMU lm3s6965evb): the PL011 console driver under test"
arch_flags = ["-mcpu=cortex-m3", "-mthumb", "-mfloat-abi=soft"]
endianness = "little"
os = "none"
toolchain_prefix = "arm-none-eabi-"
toolchain_package = "gcc-arm-none-eabi libnewlib-arm-none-eabi"
kernels = "scalar"
stack_bytes = 4096
max_text = 256
console = "uart"

[uart]
kind = "pl011"
base = 0x4000C000
clock_hz = 12500000
semihost_exit = true

[memory]
ram_bytes = 65536
kv_budget_bytes = 16384
flash_bytes = 262144
regions = [
  { name = "FLASH",   origin = 0x00000000, length = 0x00030000, use = "code" },
  { name = "ARCHIVE", origin = 0x00030000, length = 0x00010000, use = "archive" },
  { name = "RAM",     origin = 0x20000000, length = 0x00010000, use = "data" },
]

[archive]
placement = "linked"

[emulator]
command = ["qemu-system-arm", "-M", "lm3s6965evb", "-nographic", "-monitor", "none", "-serial", "none",
           "-semihosting-config", "enable=on,target=native"]
package = "qemu-system-arm"
"""

# The CLI replaced by a main that shows what the console handed it, on both streams, and
# exits with 10 + argc (no line at all: 11).
ECHO_MAIN = r"""
#include "hal.h"
int main(int argc, char **argv)
{
    hal_printf("argc=%d\n", argc);
    for (int i = 0; i < argc; i++) hal_printf("argv[%d]=<%s>\n", i, argv[i]);
    hal_err("to stderr\n", 10);
    hal_out("to stdout\n", 10);
    return 10 + argc;
}
"""


@pytest.fixture(scope="module")
def pl011(tmp_path_factory, board_runner):
    """The runner of: startup.c, the UART HAL with the PL011 driver, the command line and
    ECHO_MAIN, linked with the board's linker-script template."""
    out = tmp_path_factory.mktemp("pl011")
    (out / "boards").mkdir()
    (out / "boards" / "lm3s6965-pl011.toml").write_text(LM3S6965)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(boards, "BOARDS_DIR", out / "boards")
        board = boards.load("lm3s6965-pl011")
    if boards.missing_tools(board, run=True):
        pytest.skip(boards.missing_tools(board, run=True))
    return board_runner(board, build_tiny(board, ECHO_MAIN, out, "echo"))


# pl011.run(None, stdin=LINE, text=False): boot the firmware with LINE on UART0 (stdout: exact
# bytes; stderr has QEMU's own "Timer with period zero, disabling", which this machine prints at
# reset, code or not)

def test_pl011_console_hands_main_the_words(pl011):
    assert boards.hal_sources(pl011.board)[1] == "hal/uart/uart_pl011.c"
    # the runner sends the arguments as the UART's command line
    proc = pl011.run(["--prompt", 'say "hi" now', "-x"], text=False, timeout=120, cwd=where(pl011))
    assert proc.returncode == 14, proc.stdout
    assert proc.stdout == (b"argc=4\nargv[0]=<needle>\nargv[1]=<--prompt>\nargv[2]=<say \"hi\" now>\n"
                           b"argv[3]=<-x>\nto stderr\nto stdout\nneedle: exit 14\n")
    # CR ends the line as LF does; nothing after the line is read
    proc = pl011.run(None, stdin=b"a  b\rignored\n", text=False, timeout=120, cwd=where(pl011))
    assert proc.returncode == 13
    assert proc.stdout.startswith(b"argc=3\nargv[0]=<needle>\nargv[1]=<a>\nargv[2]=<b>\n")


def test_pl011_console_demo_and_errors(pl011):
    # silence: main gets the program name alone (the CLI's entry.c then runs its demo prompt)
    proc = pl011.run(None, stdin=b"", text=False, timeout=120, cwd=where(pl011))
    assert proc.returncode == 11
    assert proc.stdout == b"argc=1\nargv[0]=<needle>\nto stderr\nto stdout\nneedle: exit 11\n"
    # the line buffer holds 4096 bytes, no more (hal_printf's bounded buffer cuts the echo short)
    proc = pl011.run(None, stdin=b"y" * 4096 + b"\n", text=False, timeout=120, cwd=where(pl011))
    assert proc.returncode == 12 and proc.stdout.startswith(b"argc=2\nargv[0]=<needle>\nargv[1]=<yyyy")
    proc = pl011.run(None, stdin=b"y" * 4097 + b"\n", text=False, timeout=120, cwd=where(pl011))
    assert proc.returncode == 2
    assert proc.stdout == TOO_LONG.encode() + b"\nneedle: exit 2\n"
