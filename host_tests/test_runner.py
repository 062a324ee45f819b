"""The board runner (generator/build/runner.py): the one way an engine runs on a board.

The argv of each kind of board is checked against the board files' own data (the emulator
command, the archive placement and region), never against a copy of the runner's code; a
stand-in emulator (a Python script that reports its arguments and standard input) shows
what a run hands the emulator; a run past its timeout is one error line and leaves no
process behind; a missing emulator is one line naming the package to install."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from generator.build import boards
from generator.errors import CactError

ARGS = ["--prompt", 'say "hi" now', "--max-new", "4"]


def one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert "\n" not in message and message, message
    return message


# ---- the argv, from the board files ------------------------------------------------------

def test_host_runs_the_binary_itself(board_runner):
    run = board_runner("host", "build/needle")
    assert boards.load("host")["emulator"]["command"] == []
    assert run.command(ARGS) == ["build/needle", *ARGS]
    assert run.stdin_line(ARGS) is None


@pytest.mark.parametrize("name", ["rpi-zero", "rpi5"])
def test_qemu_user_board_prefixes_its_emulator_and_cpu(board_runner, name):
    board = boards.load(name)
    emu = board["emulator"]["command"]
    assert emu[0].startswith("qemu-") and "-cpu" in emu        # the device's core, from the board file
    assert board["archive"]["placement"] == "linked"
    assert board_runner(name, "needle").command(ARGS) == [*emu, "needle", *ARGS]


@pytest.mark.parametrize("name", ["router-ath79", "router-mt7621", "router-ipq40xx"])
def test_file_placement_board_gets_the_archive_argument(board_runner, name):
    board = boards.load(name)
    assert board["archive"]["placement"] == "file"
    cmd = board_runner(board, "needle", "/data/model.cact").command(ARGS)
    assert cmd == [*board["emulator"]["command"], "needle", "--archive", "/data/model.cact", *ARGS]
    # without an archive file: another program (or one reading $NEEDLE_ARCHIVE), no --archive
    assert board_runner(board, "driver").command(["x"]) == [*board["emulator"]["command"], "driver", "x"]


def test_semihosting_board_takes_its_arguments_as_the_kernel_command_line(board_runner):
    board = boards.load("watch-m4")
    assert board["console"] == "semihost" and board["archive"]["placement"] == "linked"
    cmd = board_runner(board, "needle.elf").command(ARGS)
    n = len(board["emulator"]["command"])
    assert cmd[:n] == board["emulator"]["command"]
    assert cmd[n:] == ["-kernel", "needle.elf", "-append", '--prompt "say \\"hi\\" now" --max-new 4']
    assert board_runner(board, "needle.elf").stdin_line(ARGS) is None


@pytest.mark.parametrize("name", ["watch-m4-uart", "watch-m55-uart"])
def test_uart_board_reads_its_arguments_on_standard_input(board_runner, name):
    board = boards.load(name)
    assert board["console"] == "uart"
    run = board_runner(board, "needle.elf")
    cmd = run.command(ARGS)
    assert cmd[0] == board["emulator"]["command"][0] and cmd[-2:] == ["-kernel", "needle.elf"]
    assert "-append" not in cmd and not set(ARGS) & set(cmd)
    # UART0 on stdio, once, whatever the board file's -serial said
    assert cmd.count("-serial") == 1 and cmd[cmd.index("-serial") + 1] == "stdio"
    rest = [a for a in board["emulator"]["command"][1:] if a not in ("-serial", "stdio", "none", "mon:stdio")]
    assert all(a in cmd for a in rest)
    assert run.stdin_line(ARGS) == '--prompt "say \\"hi\\" now" --max-new 4\n'


@pytest.mark.parametrize("name", ["watch-m7"])
def test_partition_board_loads_its_image_at_the_archive_region(board_runner, name):
    board = boards.load(name)
    assert board["archive"]["placement"] == "partition"
    origin = next(r["origin"] for r in board["memory"]["regions"] if r["use"] == "archive")
    cmd = board_runner(board, "needle.elf", "archive.bin").command(["--info"])
    at = cmd.index("-device")
    assert cmd[at + 1] == f"loader,file=archive.bin,addr=0x{origin:x},force-raw=on"
    assert cmd[:len(board["emulator"]["command"])] == board["emulator"]["command"]


def test_emulator_flags_go_right_after_the_emulator(board_runner):
    board = boards.load("router-ath79")
    cmd = board_runner(board, "needle", "a.cact").command(["--info"], emulator_flags=["-d", "exec", "-D", "log"])
    assert cmd == [board["emulator"]["command"][0], "-d", "exec", "-D", "log", *board["emulator"]["command"][1:],
                   "needle", "--archive", "a.cact", "--info"]
    with pytest.raises(CactError) as err:
        board_runner("host", "needle").command([], emulator_flags=["-d", "exec"])
    assert "board host runs natively" in one_line(err)


# ---- what a run hands the emulator (a stand-in emulator) -----------------------------------

REPORTER = """import json, os, sys
print(json.dumps({"argv": sys.argv[1:], "stdin": sys.stdin.read() if not sys.stdin.isatty() else None,
                  "env": os.environ.get("NEEDLE_RUNNER_TEST"), "cwd": os.getcwd()}))
"""


def stand_in(name: str, tmp_path: Path) -> dict:
    """Board `name` with its emulator replaced by a script that prints what it was given."""
    script = tmp_path / "emu.py"
    script.write_text(REPORTER)
    board = boards.load(name)
    board["emulator"] = dict(board["emulator"],
                             command=[sys.executable, str(script)] + board["emulator"]["command"][1:])
    return board


def test_a_uart_run_sends_the_command_line_then_stdin(board_runner, tmp_path):
    run = board_runner(stand_in("watch-m4-uart", tmp_path), "needle.elf")
    got = json.loads(run.run(ARGS, stdin="more\n", cwd=tmp_path, env={"NEEDLE_RUNNER_TEST": "1"}).stdout)
    assert got["stdin"] == '--prompt "say \\"hi\\" now" --max-new 4\nmore\n'
    assert got["argv"][-2:] == ["-kernel", "needle.elf"]
    assert got["env"] == "1" and Path(got["cwd"]) == tmp_path
    # args=None: nothing but stdin (a test's raw bytes)
    raw = json.loads(run.run(None, stdin=b"a  b\r", text=False).stdout)
    assert raw["stdin"] == "a  b\r"


def test_a_semihosting_run_sends_no_stdin(board_runner, tmp_path):
    run = board_runner(stand_in("watch-m4", tmp_path), "needle.elf")
    got = json.loads(run.run(["--info"], stdin="").stdout)
    assert got["stdin"] == "" and got["argv"][-4:] == ["-kernel", "needle.elf", "-append", "--info"]


def test_check_turns_a_failure_into_the_engines_last_error_line(board_runner, tmp_path):
    script = tmp_path / "fails"
    script.write_text("#!/bin/sh\necho 'needle: error: first' >&2\necho 'needle: error: --tokens: bad' >&2\nexit 2\n")
    script.chmod(0o755)
    run = board_runner("host", script)
    assert run.run(["x"]).returncode == 2                     # check=False: the caller looks
    with pytest.raises(CactError) as err:
        run.run(["x"], check=True)
    assert one_line(err).endswith("engine exit 2: needle: error: --tokens: bad")


# ---- failures: timeout, missing emulator, no emulator ---------------------------------------

# an engine that starts a process of its own and never answers: its pid and its child's go to $1
SLEEPER = """#!/bin/sh
sleep 60 &
echo "$$ $!" > "$1"
wait
"""


def alive(pid: int) -> bool:
    """Whether process `pid` still exists (a zombie counts as gone: it runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_timeout_is_one_line_and_leaves_no_process(board_runner, tmp_path):
    engine = tmp_path / "sleeper"
    engine.write_text(SLEEPER)
    engine.chmod(0o755)
    pids = tmp_path / "pids"
    start = time.monotonic()
    with pytest.raises(CactError) as err:
        board_runner("host", engine).run([pids], timeout=0.5)
    assert time.monotonic() - start < 10
    message = one_line(err)
    assert message.startswith("board host: the engine did not answer in 0.5 s: ")
    assert str(engine) in message and "more time" in message            # the command and the fix
    if not pids.exists():
        pytest.skip("the machine is too loaded: the sleeper did not start within 0.5 s")
    deadline = time.monotonic() + 5
    parent, child = map(int, pids.read_text().split())
    while (alive(parent) or alive(child)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(parent) and not alive(child), "the run or what it started is still running"


def test_a_missing_emulator_names_the_package(board_runner, tmp_path):
    board = boards.load("router-mt7621")
    board["emulator"] = dict(board["emulator"], command=["qemu-no-such-emulator", "-cpu", "24Kc"])
    run = board_runner(board, tmp_path / "needle", tmp_path / "a.cact")
    with pytest.raises(CactError) as err:
        run.run(["--info"])
    message = one_line(err)
    assert message.startswith("board router-mt7621 runs under qemu-no-such-emulator")
    assert message.endswith(f"apt-get install {board['emulator']['package']}")
    assert run.missing() == message
    with pytest.raises(CactError) as err:
        run.popen(["--serve"])
    assert one_line(err) == message


def test_a_binary_that_cannot_start_is_one_line(board_runner, tmp_path):
    with pytest.raises(CactError) as err:
        board_runner("host", tmp_path / "never-built").run(["--info"])
    assert one_line(err).startswith(f"board host: cannot run {tmp_path / 'never-built'}: ")


def test_a_board_without_an_emulator_is_refused(board_runner):
    board = boards.load("stm32h750b-dk")
    assert board["os"] == "none" and board["emulator"]["command"] == []
    with pytest.raises(CactError) as err:
        board_runner(board, "needle.elf", "archive.bin").run(["--info"])
    assert one_line(err) == boards.no_emulator(board)


def test_popen_runs_a_long_lived_engine_and_stop_ends_it(board_runner, tmp_path):
    engine = tmp_path / "sleeper"
    engine.write_text(SLEEPER)
    engine.chmod(0o755)
    pids = tmp_path / "pids"
    run = board_runner("host", engine)
    proc = run.popen([pids])
    deadline = time.monotonic() + 10
    while not (pids.exists() and len(pids.read_text().split()) == 2) and time.monotonic() < deadline:
        time.sleep(0.05)
    parent, child = map(int, pids.read_text().split())
    assert proc.pid == parent and alive(child)
    run.stop(proc)
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.returncode is not None and not alive(child)
    assert os.path.exists(pids)
