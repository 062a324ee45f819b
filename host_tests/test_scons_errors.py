"""SCons refusals: one line on stderr ("scons: error: ..."), nothing on stdout, exit 2 --
never a Python stack, never on stdout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def scons(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "SCons", "-Q", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, env=env)


def assert_one_line_refusal(proc: subprocess.CompletedProcess, *texts: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == "", proc.stdout          # -Q: SCons itself prints nothing here
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("scons: error: "), proc.stderr
    assert "Traceback" not in proc.stderr and "File \"" not in proc.stderr
    for text in texts:
        assert text in proc.stderr, proc.stderr


def test_archive_that_is_a_directory(tmp_path):
    proc = scons("board=host", f"archive={tmp_path}", f"build={tmp_path / 'b'}")
    assert_one_line_refusal(proc, f"archive={tmp_path} is a directory", "pass the path of a .cact file")


@pytest.mark.parametrize("board", ["host", "all"])
def test_build_that_is_a_file(tmp_path, board):
    f = tmp_path / "hostname"
    f.write_text("not a directory\n")
    proc = scons(f"board={board}", f"build={f}")
    assert_one_line_refusal(proc, f"build={f}: {f} is a file, not a directory", "e.g. build=build/mine")
    assert f.read_text() == "not a directory\n"


def test_build_under_a_file(tmp_path):
    f = tmp_path / "hostname"
    f.write_text("x")
    proc = scons("board=host", f"build={f / 'sub'}")
    assert_one_line_refusal(proc, f"{f} is a file, not a directory")


@pytest.mark.parametrize("args, text", [
    (["bogus=1"], "unknown option(s) bogus"),
    (["board=nope"], "Invalid value for enum variable 'board'"),
    (["kv_window=x"], "kv_window=x must be a positive integer"),
    (["head_tokens=-1"], "head_tokens=-1 must be a non-negative integer"),
    (["archive=/nonexistent.cact"], "archive=/nonexistent.cact does not exist"),
    (["check_tol=2"], "check_tol=2 goes with check=DIR"),
])
def test_option_refusals_go_to_stderr(args, text):
    assert_one_line_refusal(scons(*args), text)


def test_sanitize_on_a_cross_board_goes_to_stderr(tmp_path):
    if not shutil.which("arm-linux-gnueabi-gcc"):
        pytest.skip("needs arm-linux-gnueabi-gcc")
    proc = scons("board=rpi-zero", "sanitize=1", f"build={tmp_path / 'b'}")
    assert_one_line_refusal(proc, "sanitize=1 is for board=host")


def test_missing_toolchain_goes_to_stderr(tmp_path):
    env = dict(os.environ, PATH=str(Path(sys.executable).parent))
    proc = scons("board=watch-m4", f"build={tmp_path / 'b'}", env=env)
    assert_one_line_refusal(proc, "board watch-m4 needs the compiler arm-none-eabi-gcc: apt-get install")


def test_generation_refusal_goes_to_stderr(tmp_path):
    """The SCons tool's refusals (scons_tool.py) are on stderr too; SCons adds its own
    `scons: *** [...] Error 2` line after it."""
    bad = tmp_path / "bad.cact"
    bad.write_bytes(b"\x00" * 200)
    proc = scons("board=host", f"archive={bad}", f"build={tmp_path / 'b'}")
    assert proc.returncode != 0
    assert "not a .cact archive" not in proc.stdout
    errors = [l for l in proc.stderr.splitlines() if l.startswith("scons: error: ")]
    assert len(errors) == 1 and "not a .cact archive (tag 0x00000000)" in errors[0], proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
