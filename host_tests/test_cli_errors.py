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


def test_emit_into_a_file_is_refused_in_one_line(tmp_path):
    target = tmp_path / "not-a-dir"
    target.write_text("keep me")
    proc = _run("emit", "host_tests/golden/tiny/archive.cact", "-o", str(target))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "cannot write the engine" in proc.stderr and "Traceback" not in proc.stderr
    assert target.read_text() == "keep me"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["inspect", "host_tests/golden/tiny/archive.cact"],
                                  ["inspect", "--json", "host_tests/golden/tiny/archive.cact"]])
def test_full_standard_output_fails_in_one_line(args):
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "generator", *args], cwd=ROOT, stdout=full,
                              stderr=subprocess.PIPE, text=True)
    assert proc.returncode == 2
    assert proc.stderr == "error: cannot write standard output: No space left on device\n"


def test_absurd_geometry_is_refused_by_the_planner_with_the_numbers(tmp_path):
    """max_seq_len 2e9 and kv_window 1e9 used to reach the linker ("relocation truncated")."""
    sys.path.insert(0, str(ROOT / "host_tests"))
    import archive_edit as ae
    data = (ROOT / "host_tests/golden/tiny/archive.cact").read_bytes()
    data = ae.patch_header(ae.patch_header(data, "max_seq_len", 2_000_000_000), "kv_window", 1_000_000_000)
    archive = tmp_path / "absurd.cact"
    archive.write_bytes(data)
    out = tmp_path / "gen"
    for board in (["--board", "host"], ["--board", "watch-m4"]):
        proc = _run("emit", str(archive), "-o", str(out), *board)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert "bytes of RAM" in proc.stderr and "kv_window=" in proc.stderr, proc.stderr
        assert not out.exists()


def test_synth_help_names_every_preset():
    from generator.commands.synth import PRESETS
    out = _run("synth", "--help").stdout
    assert all(name in out for name in PRESETS) and len(PRESETS) == 6, out
    proc = _run("synth", "--preset", "nope", "-o", "x.cact")
    assert proc.returncode == 2 and "needle3-base" in proc.stderr


# ---- eval with a built engine, and check: the CLI is the one front end ----------------------

TINY = "host_tests/golden/tiny/archive.cact"
DATA = "demo/eval/heldout.jsonl"


@pytest.mark.parametrize("args, message", [
    (["--board", "host"], "eval: --board and --engine go together (a built engine on its board), "
                          "or give neither (the reference alone)"),
    (["--engine", "build/host/needle"], "eval: --board and --engine go together"),
    (["--image", "x.bin"], "eval: --image goes with --engine BIN --board B"),
    (["--timeout", "5"], "eval: --timeout goes with --engine BIN --board B"),
    (["--board", "host", "--engine", "build/host/needle", "--mode", "float"],
     "eval: --mode is for the reference alone: with --engine the engine and the a8 reference run every "
     "grammar mode (drop it)"),
])
def test_eval_engine_options_are_refused_out_of_place(args, message):
    proc = _run("eval", "--archive", TINY, "--data", DATA, *args)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"error: {message}") and proc.stdout == ""


def test_check_refuses_a_bad_tolerance_in_one_line(tmp_path):
    proc = _run("check", str(tmp_path), "--archive", TINY, "--board", "host", "--engine", "needle",
                "--tol", "loose")
    assert proc.returncode == 2 and proc.stderr == "error: check_tol=loose: want a non-negative number\n"
