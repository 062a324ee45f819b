"""Bounded CLI soak (issue 14 §4): fuzz/soak.c runs needle_cli of firmware/cli/main.c
(unchanged) in a loop under ASan + UBSan + LeakSanitizer over ~30 varied requests (valid
generation, tool prompts, teacher-forced runs with a logits file, --info, --help, and refusals
that must fail the same way each time), checking every iteration against the first run of the
same request; then each first run is compared with a fresh process (`soak --once K`) and, in
the slow test, with the real host CLI built by `scons board=host sanitize=1` on the same tiny
golden archive.

The documented long run is `fuzz/run.py --soak 10000` (fuzz/README.md).  Skipped when clang
cannot build and run an ASan/LeakSanitizer program.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ITERATIONS = 300

from fuzz import run as fuzz_run  # noqa: E402  (conftest puts the repository root on sys.path)


@pytest.fixture(scope="module")
def soak(tmp_path_factory):
    reason = fuzz_run.soak_available()
    if reason:
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("soak")
    exe = fuzz_run.build_soak(out)
    summary, first, rc, text = fuzz_run.run_soak(exe, ITERATIONS)
    return exe, summary, first, rc, text


def test_soak_loop_is_clean_and_stable(soak):
    exe, summary, first, rc, text = soak
    assert rc == 0 and summary is not None, f"soak exit {rc}:\n{text[-6000:]}"
    assert summary["iterations"] == ITERATIONS
    assert summary["mismatches"] == 0, text[-6000:]
    assert summary["leak_checks"] >= 1 and summary["leaking"] == 0, text[-6000:]
    assert "ERROR: AddressSanitizer" not in text and "runtime error" not in text, text[-6000:]
    assert len(first) == summary["requests"] >= 20


def test_soak_requests_are_varied(soak):
    """The list exercises successes and each kind of failure (exit 2 usage/input, exit 1 I/O)."""
    exe, summary, first, rc, text = soak
    codes = {r[0] for r in first.values()}
    assert {0, 1, 2} <= codes, codes
    assert any(r[3] != "none" for r in first.values()), "no request wrote a logits file"
    for k, (code, out, err, file) in first.items():
        if code:   # a failure is one line on stderr, nothing on stdout
            assert err.count(b"\n") == 1 and err.startswith(b"needle: error: "), (k, err)
            assert out == b"", (k, out)
        else:
            assert err == b"" and (out.endswith(b"\n") or file != "none"), (k, out, err)


def test_first_runs_match_fresh_processes(soak):
    exe, summary, first, rc, text = soak
    fresh = fuzz_run.fresh_records(exe, summary["requests"])
    assert fuzz_run.compare_records(first, fresh, "soak --once") == []


@pytest.mark.slow
def test_first_runs_match_the_sanitized_host_cli(soak, tmp_path_factory):
    """The real program (hal/linux, `scons board=host sanitize=1`) gives the same answers."""
    exe, summary, first, rc, text = soak
    build = tmp_path_factory.mktemp("soak-host")
    proc = subprocess.run([sys.executable, "-m", "SCons", "-Q", "-j2", "board=host", "sanitize=1",
                           f"archive={ROOT / 'host_tests' / 'golden' / 'tiny' / 'archive.cact'}",
                           f"build={build}"], cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, f"scons failed:\n{proc.stdout}\n{proc.stderr}"
    got = fuzz_run.binary_records(build / "needle", fuzz_run.soak_requests(exe),
                                  tmp_path_factory.mktemp("soak-sinks"))
    assert fuzz_run.compare_records(first, got, "host CLI") == []
