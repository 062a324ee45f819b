"""One way for the tests to run SCons: `scons(*args)` runs `python -m SCons -Q -j2 ARGS` in the
repository (or `cwd`) and raises AssertionError with the end of its output when it fails
(`check=False`: returns the result whatever it is)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def scons(*args, cwd=ROOT, check: bool = True, env: dict | None = None,
          timeout: int = 1800) -> subprocess.CompletedProcess:
    args = [str(a) for a in args]
    proc = subprocess.run([sys.executable, "-m", "SCons", "-Q", "-j2", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=env)
    if check and proc.returncode:
        raise AssertionError(f"scons {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr}")
    return proc
