"""The bare-metal command line (semihosting SYS_GET_CMDLINE, firmware/hal/semihost): at most
32 words (the program name included) in at most 8191 bytes; more is a one-line usage error
with exit status 2, never a silently cut line or the demo.

Under QEMU the line the firmware reads is `<kernel path> <-append words>` (QEMU puts the
-kernel path first as the program name and joins the -append words with single spaces), and
QEMU refuses the call when the line and its terminating zero do not fit the buffer the
firmware offers: the tests count that path in."""

from __future__ import annotations

from pathlib import Path

import pytest

from host_tests.scons_run import build_to_run

ROOT = Path(__file__).resolve().parent.parent
ARCHIVE = ROOT / "host_tests" / "golden" / "tiny" / "archive.cact"
TOO_MANY = "the command line has more than 32 words"
TOO_LONG = "the command line is longer than 8191 bytes"


@pytest.fixture(scope="module")
def m4(tmp_path_factory, board_runner):
    """The built watch-m4 engine's runner."""
    return board_runner(*build_to_run("watch-m4", ARCHIVE, tmp_path_factory.mktemp("semihost")))


def assert_usage_error(proc, text):
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert proc.stderr.count("\n") == 1 and text in proc.stderr, proc.stderr
    assert proc.stdout == ""


def test_33_words_are_an_error(m4):
    # program name + 32 arguments: before, the words after the 32nd were dropped unseen
    assert_usage_error(m4.run(["--info"] + ["x"] * 31), TOO_MANY)
    assert_usage_error(m4.run(["--prompt", "hi"] + ["x"] * 29 + ["--info"]), TOO_MANY)


def test_32_words_reach_the_cli(m4):
    # program name + 31 arguments: the CLI itself reads them (and refuses the unknown one)
    proc = m4.run(["--info"] + ["x"] * 30)
    assert_usage_error(proc, 'unknown option "x"')
    assert TOO_MANY not in proc.stderr
    # a quoted argument is one word however many spaces it holds
    proc = m4.run(["--prompt", "a b c d e f g h i j k l m n o p q r s t u v w x y z"] + ["x"] * 29)
    assert_usage_error(proc, 'unknown option "x"')


def test_a_long_argument_is_an_error_not_the_demo(m4):
    # before: SYS_GET_CMDLINE failed, the firmware ran its demo prompt and exited 0
    assert_usage_error(m4.run(["--prompt", "a" * 9000]), TOO_LONG)


def test_the_length_limit_is_the_firmwares(m4):
    """QEMU hands over a line of exactly 8191 bytes; one byte more is the firmware's error."""
    room = 8191 - len(f"{m4.binary} --info ")
    at_limit = m4.run(["--info", "a" * room])
    assert_usage_error(at_limit, 'unknown option "' + "a" * 40)    # the CLI saw the whole line
    assert TOO_LONG not in at_limit.stderr
    assert_usage_error(m4.run(["--info", "a" * (room + 1)]), TOO_LONG)
