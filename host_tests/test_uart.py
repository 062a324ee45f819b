"""The UART console (firmware/hal/uart, board watch-m4-uart): console, command line and fault
dump on the MPS2 AN386's UART0 under qemu-system-arm, which connects it to standard input and
output (`-serial stdio`).  The command line is one line on stdin; without one (nothing within
a second, or an empty line) the firmware runs its demo prompt.  Every run ends with the line
`needle: exit N`; the exit status reaches the test through semihosting only because the board
sets [uart] semihost_exit (QEMU only; a real board stops the core).

The golden-logit runs (test_boards.py) skip UART boards: they write logits to a host file,
and a UART board has no file system.  And the semihosting boards still behave as before."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from generator.build import boards, flags
from generator.codegen import pipeline, render
from host_tests.scons_run import build_to_run, scons

ROOT = Path(__file__).resolve().parent.parent
ARCHIVE = ROOT / "host_tests" / "golden" / "tiny" / "archive.cact"
TOO_LONG = ("needle: error: the command line is longer than 4096 bytes (the firmware's UART line "
            "buffer): send shorter arguments")


def scons_build(board_name: str, build: Path) -> None:
    scons(f"board={board_name}", f"archive={ARCHIVE}", f"build={build}")


@pytest.fixture(scope="module")
def uart(tmp_path_factory):
    return build_to_run("watch-m4-uart", ARCHIVE, tmp_path_factory.mktemp("uart"))


def run_uart(board: dict, elf: Path, line: str | None) -> subprocess.CompletedProcess:
    """Boot the firmware; `line` (the command line, ended by a newline) goes on the UART."""
    return subprocess.run(boards.run_command(board, str(elf), []), input=line or "",
                          capture_output=True, text=True, timeout=600, cwd=elf.parent)


def run_args(uart, args: list[str]) -> subprocess.CompletedProcess:
    board, elf = uart
    return run_uart(board, elf, boards.stdin_line(board, args))


def test_board_file_console_key(tmp_path, monkeypatch):
    b = boards.load("watch-m4-uart")
    assert b["console"] == "uart" and boards.load("watch-m4")["console"] == "semihost"
    assert not boards.has_host_files(b) and boards.has_host_files(boards.load("watch-m4"))
    assert boards.hal_sources(b) == ["hal/uart/hal_uart.c", "hal/cmdline.c"]
    assert "-DNEEDLE_UART_SEMIHOST_EXIT=1" in boards.hal_defines(b)
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
                          (text.replace("[uart]", "[uart]\nbaud = 9600"), "unknown key uart.baud")]:
        (d / "watch-m4-uart.toml").write_text(edit)
        with pytest.raises(Exception) as err:
            boards.load("watch-m4-uart")
        assert str(err.value).startswith("board file watch-m4-uart.toml: ") and message in str(err.value)
        assert "\n" not in str(err.value)


def test_info_through_the_uart(uart):
    proc = run_args(uart, ["--info"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("needle-fw engine ") and lines[0].endswith("board watch-m4-uart")
    assert any(line.startswith("kv cache ") for line in lines)
    assert lines[-1] == "needle: exit 0"


def test_quoted_words_and_errors_through_the_uart(uart):
    proc = run_args(uart, ["--tokens", "2,99999"])
    assert proc.returncode == 2
    assert proc.stdout.splitlines() == ['needle: error: --tokens: "99999" is not a token id in 0..1023',
                                        "needle: exit 2"]
    # no file system: a file option fails with the reason, exit 1
    proc = run_args(uart, ["--tokens", "2,3", "--logits", "out.f32"])
    assert proc.returncode == 1
    assert "cannot write out.f32: no file system on this board" in proc.stdout
    assert not (uart[1].parent / "out.f32").exists()
    # a quoted prompt with spaces is one word (the splitter the semihosting HAL shares)
    proc = run_args(uart, ["--prompt", "hello there", "--max-new", "2", "--ids"])
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.splitlines()[-1] == "needle: exit 0"


@pytest.mark.parametrize("line", [None, "\n", "   \r\n"])
def test_no_command_line_runs_the_demo(uart, line):
    board, elf = uart
    proc = run_uart(board, elf, line)
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.endswith("needle: exit 0\n") and len(proc.stdout) > len("needle: exit 0\n")
    assert "error" not in proc.stdout


def test_over_long_command_line_is_one_line_error(uart):
    board, elf = uart
    proc = run_uart(board, elf, "--prompt " + "a" * 4096 + "\n")
    assert proc.returncode == 2
    assert proc.stdout.splitlines() == [TOO_LONG, "needle: exit 2"]
    # 4096 bytes reach the CLI (which refuses the unknown option)
    proc = run_uart(board, elf, "--" + "b" * 4094 + "\n")
    assert proc.returncode == 2 and TOO_LONG not in proc.stdout and 'unknown option "--bbbb' in proc.stdout
    # and more than 32 words is the shared splitter's error
    proc = run_args(uart, ["x"] * 32)
    assert proc.returncode == 2 and "the command line has more than 32 words" in proc.stdout


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


def test_fault_dumps_registers_and_exits_4(uart, tmp_path):
    """A tiny firmware: the real start-up, UART HAL and command line, and a main that
    executes an undefined instruction; linked with the board's linker-script template."""
    board, _ = uart
    (tmp_path / "fault_main.c").write_text(FAULT_MAIN)
    (tmp_path / "link.ld").write_text(render.render("link.ld.j2", pipeline.linker_context(board, 0)))
    fw = ROOT / "firmware"
    sources = [tmp_path / "fault_main.c", fw / "baremetal" / "startup.c", fw / "hal" / "format.c",
               *(fw / s for s in boards.hal_sources(board))]
    cmd = (boards.compiler_argv(board) + flags.compile_flags(board, boards.kernel_family(board))
           + boards.hal_defines(board) + [f"-I{fw / 'hal'}"] + [str(s) for s in sources]
           + flags.link_flags(board, str(tmp_path / "link.ld")) + ["-o", str(tmp_path / "fault.elf")])
    cc = subprocess.run(cmd, capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    proc = run_uart(board, tmp_path / "fault.elf", "go\n")
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
    nm = subprocess.run([board["toolchain_prefix"] + "nm", str(tmp_path / "fault.elf")], capture_output=True,
                        text=True, check=True).stdout
    cli = next(int(line.split()[0], 16) for line in nm.splitlines() if line.endswith(" main"))
    assert cli <= pc < cli + 64


def test_semihost_watch_unchanged(tmp_path):
    board = boards.load("watch-m4")
    if boards.missing_tools(board, run=True):
        pytest.skip(boards.missing_tools(board, run=True))
    scons_build("watch-m4", tmp_path)
    elf = tmp_path / "needle.elf"
    proc = subprocess.run(boards.run_command(board, str(elf), ["--info"]), capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("needle-fw engine ") and "board watch-m4\n" in proc.stdout
    assert "needle: exit" not in proc.stdout           # no UART line: semihosting exits silently
    err = subprocess.run(boards.run_command(board, str(elf), ["--tokens", "2,99999"]), capture_output=True,
                         text=True, timeout=600, cwd=tmp_path)
    assert err.returncode == 2 and err.stderr.count("\n") == 1 and "is not a token id" in err.stderr
