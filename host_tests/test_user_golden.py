"""Golden-output regression for a user's own archive (docs/archive.md, "Regression-test your own archive"):
`python -m generator golden --archive A --prompt ... --tokens ... -o DIR`, then
`scons board=B archive=A check=DIR` runs the built engine on every case and compares."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from generator import __version__
from generator.build import boards
from generator.commands import golden

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "host_tests" / "golden"
TINY = GOLDEN / "tiny" / "archive.cact"          # the bundled demo archive (synth tiny, seed 1)
PROMPT = "What is the weather in Lagos?"
TOKENS = "2,17,5,9,300"


def generator(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "generator", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def scons(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "SCons", "-Q", "-j2", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def cases_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("user-golden") / "mine"
    proc = generator("golden", "--archive", TINY, "--prompt", PROMPT, "--tokens", TOKENS, "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert "case 1 (prompt)" in proc.stdout and "case 2 (tokens)" in proc.stdout
    return out


@pytest.fixture(scope="module")
def host_build(tmp_path_factory) -> Path:
    """One host build directory shared by the checks (after the first, only the check runs)."""
    return tmp_path_factory.mktemp("user-golden-host") / "b"


# ---- golden --archive ------------------------------------------------------------------

def test_cases_carry_the_reference_and_its_provenance(cases_dir):
    doc = json.loads((cases_dir / "cases.json").read_text())
    assert doc["archive_sha256"] == golden.sha256_file(TINY)
    assert doc["generator_version"] == __version__
    assert doc["numerics_version"] == golden.NUMERICS_VERSION
    assert doc["reference_mode"] == "a8" and doc["numpy_version"] == np.__version__
    assert [c["kind"] for c in doc["cases"]] == ["prompt", "tokens"]
    prompt, tokens = doc["cases"]
    assert prompt["prompt"] == PROMPT and prompt["ids"][0] == 2
    assert len(prompt["greedy"]) <= golden.DEFAULT_MAX_NEW == 16 and prompt["max_new"] == 16
    assert tokens["ids"] == [2, 17, 5, 9, 300] and tokens["greedy"] is None
    for case in doc["cases"]:
        lg = np.fromfile(cases_dir / case["logits"], dtype="<f4")
        assert lg.size == case["positions"] * doc["vocab"]


def test_tokens_case_reproduces_the_bundled_golden(tmp_path):
    """The a8 logits of a --tokens case are the committed golden's, bit for bit."""
    meta, logits = golden.load(GOLDEN / "tiny")
    out = tmp_path / "g"
    proc = generator("golden", "--archive", TINY, "--tokens", ",".join(map(str, meta["tokens"])),
                     "--max-new", "4", "-o", out)
    assert proc.returncode == 0, proc.stderr
    got = np.fromfile(out / "case-1.f32", dtype="<f4").reshape(logits["a8"].shape)
    assert np.array_equal(got, logits["a8"])


@pytest.mark.parametrize("args, text", [
    (["--archive", TINY, "--archive", TINY, "--prompt", "x", "-o", "X"], "--archive given more than once"),
    (["--archive", TINY, "--prompt", "x", "-o", "X", "-o", "Y"], "-o given more than once"),
    (["--archive", TINY, "--prompt", "x", "--max-new", "3", "--max-new", "4", "-o", "X"],
     "--max-new given more than once"),
    (["--archive", TINY, "-o", "X"], "needs at least one case"),
    (["tiny", "--archive", TINY, "--prompt", "x", "-o", "X"], "two modes"),
    (["--prompt", "x", "-o", "X"], "--prompt goes with --archive"),
    (["--archive", TINY, "--query", "x", "-o", "X"], "--query needs --tools"),
    (["--archive", TINY, "--tools", "demo/tools.json", "--prompt", "x", "-o", "X"], "--tools goes with --query"),
    (["--archive", TINY, "--tokens", "2,1024", "-o", "X"], "'1024' is not a token id in 0..1023"),
    (["--archive", TINY, "--prompt", "", "-o", "X"], "empty text"),
    (["--archive", TINY, "--prompt", "x", "--max-new", "0", "-o", "X"], "positive integer"),
])
def test_golden_user_mode_refuses_in_one_line(tmp_path, args, text):
    args = [str(tmp_path / a) if a in ("X", "Y") else a for a in args]
    proc = generator("golden", *args)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and text in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert not (tmp_path / "X").exists()


# ---- scons check=DIR -------------------------------------------------------------------

def test_scons_check_passes_on_the_host(cases_dir, host_build):
    proc = scons("board=host", f"archive={TINY}", f"build={host_build}", f"check={cases_dir}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert "case 1 (prompt): bit-identical; greedy continuation matches" in proc.stdout
    assert "case 2 (tokens): bit-identical" in proc.stdout
    assert "all 2 cases pass (check_tol=0)" in proc.stdout


def test_scons_check_fails_with_the_figures(cases_dir, host_build, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(cases_dir, bad)
    lg = np.fromfile(bad / "case-2.f32", dtype="<f4")
    vocab = lg.size // 5
    lg[2 * vocab + 7] += 0.25                         # position 2 of the tokens case
    lg.tofile(bad / "case-2.f32")
    proc = scons("board=host", f"archive={TINY}", f"build={host_build}", f"check={bad}")
    assert proc.returncode != 0
    assert "case 1 (prompt): bit-identical" in proc.stdout
    line = next(l for l in proc.stdout.splitlines() if l.startswith("case 2 (tokens)"))
    assert "FAIL: worst position 2 of 5: max |Δlogit| 0.25, max |logit| " in line
    assert "> check_tol=0" in line
    assert "1 of 2 cases FAIL" in proc.stdout
    # a tolerance that covers the difference passes, and says it was not bit-identical
    relaxed = scons("board=host", f"archive={TINY}", f"build={host_build}", f"check={bad}", "check_tol=0.5")
    assert relaxed.returncode == 0, relaxed.stdout[-3000:] + relaxed.stderr
    assert "case 2 (tokens): within tolerance: worst position 2 of 5" in relaxed.stdout


def test_scons_check_fails_on_a_different_greedy_continuation(cases_dir, host_build, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(cases_dir, bad)
    doc = json.loads((bad / "cases.json").read_text())
    doc["cases"][0]["greedy"][1] = (doc["cases"][0]["greedy"][1] + 1) % doc["vocab"]
    (bad / "cases.json").write_text(json.dumps(doc))
    proc = scons("board=host", f"archive={TINY}", f"build={host_build}", f"check={bad}")
    assert proc.returncode != 0
    assert "case 1 (prompt): bit-identical; FAIL: greedy continuation differs at token 1" in proc.stdout


def test_scons_check_refuses_another_archive_in_one_line(cases_dir, tmp_path):
    other = GOLDEN / "small" / "archive.cact"
    proc = scons("board=host", f"archive={other}", f"build={tmp_path / 'b'}", f"check={cases_dir}")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert str(TINY) in proc.stderr and str(other) in proc.stderr
    assert golden.sha256_file(TINY)[:16] in proc.stderr and golden.sha256_file(other)[:16] in proc.stderr
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("args, text", [
    (["check=/nonexistent-dir"], "/nonexistent-dir is not a directory"),
    (["check_tol=1e-3"], "check_tol=1e-3 goes with check=DIR"),
    (["check={dir}", "check_tol=-1"], "check_tol=-1 must be a non-negative number"),
    (["check={dir}", "kv_window=8"], "drop kv_window=8"),
])
def test_scons_check_option_errors(cases_dir, args, text):
    proc = scons("board=host", *[a.format(dir=cases_dir) for a in args])
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and text in proc.stderr, proc.stderr


@pytest.mark.parametrize("board_name", ["rpi-zero2", "watch-m55"])
def test_scons_check_passes_on_a_cross_board_under_emulation(cases_dir, board_name, tmp_path):
    board = boards.load(board_name)
    problem = boards.missing_tools(board, run=True)
    if problem:
        pytest.skip(problem)
    proc = scons(f"board={board_name}", f"archive={TINY}", f"build={tmp_path / 'b'}", f"check={cases_dir}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert f"on board {board_name}: all 2 cases pass" in proc.stdout
    assert "case 1 (prompt): bit-identical; greedy continuation matches" in proc.stdout
