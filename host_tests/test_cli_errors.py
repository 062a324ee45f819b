"""Mistakes a user can make with `python -m generator`: one line on stderr, exit 2, no file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*args):
    return subprocess.run([sys.executable, "-m", "generator", *args], cwd=ROOT,
                          capture_output=True, text=True)


@pytest.mark.parametrize("seed", ["-5", "4294967296"])
def test_out_of_range_seed_is_refused_in_one_line(tmp_path, seed):
    out = tmp_path / "x.cact"
    proc = _run("synth", "--preset", "tiny", "--seed", seed, "-o", str(out))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "seed" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()
