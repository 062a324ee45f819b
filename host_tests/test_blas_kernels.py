"""The float-mode reference tests again, under other OpenBLAS kernels.

NumPy's OpenBLAS picks its kernels by CPU (SSE, AVX2, AVX-512), and each sums a dot product
in its own order, so float-mode logits differ in their last bits from machine to machine.
Every float-mode tolerance in test_reference.py and test_needle3.py is derived to hold
whatever that order is; this module checks the claim on the machine at hand by forcing the
kernels of other CPUs (`OPENBLAS_CORETYPE`) in a child process, plus a single-threaded
run (threads split the work, and so the sums, differently).  The a8 tests need no such run:
a8 mode uses no BLAS product at all (docs/numerics.md §1).

Core types tried: Prescott (SSE3, which every x86-64 runs), and Haswell (AVX2) when the CPU
has AVX2.  On an AVX-512 machine the main run already uses SkylakeX; on an AVX2 machine it
uses Haswell, and Prescott is the other one.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FLOAT_TESTS = ["host_tests/test_reference.py", "host_tests/test_needle3.py", "-k", "float or fidelity"]


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def _variants() -> list[tuple[str, dict]]:
    if platform.machine() not in ("x86_64", "AMD64"):
        return [("threads=1", {"OPENBLAS_NUM_THREADS": "1"})]
    out = [("Prescott", {"OPENBLAS_CORETYPE": "Prescott"})]
    if "avx2" in _cpu_flags():
        out.append(("Haswell", {"OPENBLAS_CORETYPE": "Haswell"}))
    out.append(("threads=1", {"OPENBLAS_NUM_THREADS": "1"}))
    return out


VARIANTS = _variants()


@pytest.mark.parametrize("name,extra", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_float_reference_tests_pass_under_other_blas_kernels(name, extra):
    env = dict(os.environ, **extra)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *FLOAT_TESTS],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    tail = "\n".join(proc.stdout.splitlines()[-15:])
    assert proc.returncode == 0, f"float-mode tests under {name} ({extra}):\n{tail}\n{proc.stderr[-2000:]}"
    assert " passed" in tail and " failed" not in tail, tail
