"""Threads on Linux boards (issue 13 item 2): `scons threads=N` builds a pool of N - 1 workers
that split every A8 product by rows; `needle --threads K` uses K of them.  A row is computed by
one thread with the single-thread kernel, so the logits are bit-identical to the goldens for
every K, natively and under qemu-user.  thread_grain=0 splits every product, so the tiny
golden archives exercise the pool (the default grain leaves their small products whole)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from generator.build import boards
from generator.commands import golden
from host_tests.scons_run import scons

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "host_tests" / "golden"
# (board, archive, threads built): the host, an AArch64 Pi (glibc, NEON) and the MIPS router
# (musl, soft float, archive file) under qemu-user
CASES = [("host", "small", 3), ("host", "n3-small", 3), ("rpi-zero2", "n3-tiny", 4), ("router-mt7621", "tiny", 2)]


def build(board_name: str, archive: str, threads: int, where: Path) -> tuple[dict, Path]:
    board = boards.load(board_name)
    why = boards.missing_tools(board, run=True)
    if why:
        pytest.skip(why)
    scons(f"board={board_name}", f"archive={GOLDEN / archive / 'archive.cact'}", f"build={where}",
          f"threads={threads}", "thread_grain=0")
    return board, where / "needle"


@pytest.mark.parametrize("board_name,archive,threads", CASES, ids=[f"{b}-{a}" for b, a, _ in CASES])
def test_every_thread_count_gives_the_golden_logits(board_name, archive, threads, tmp_path, board_runner):
    board, exe = build(board_name, archive, threads, tmp_path / "build")
    engine = board_runner(board, exe, GOLDEN / archive / "archive.cact")
    header = (tmp_path / "build" / "gen" / "needle_model.h").read_text()
    assert f"#define NEEDLE_THREADS {threads}u" in header
    meta, logits = golden.load(GOLDEN / archive)
    tokens = ",".join(map(str, meta["tokens"]))
    for k in range(1, threads + 1):
        proc = engine.run(["--threads", str(k), "--tokens", tokens, "--logits", f"l{k}.f32"], cwd=tmp_path,
                          timeout=1800)
        assert proc.returncode == 0, proc.stderr
        got = np.fromfile(tmp_path / f"l{k}.f32", dtype="<f4").reshape(logits["a8"].shape)
        assert np.array_equal(got, logits["a8"]), f"--threads {k}"
    greedy = engine.run(["--prompt", meta["prompt"], "--max-new", str(meta["recipe"]["max_new"]), "--ids"],
                        cwd=tmp_path, timeout=1800)         # all threads: the default
    assert greedy.returncode == 0, greedy.stderr
    assert [int(x) for x in greedy.stdout.strip().split(",") if x] == meta["greedy"]["a8"]


def test_threads_option_errors(tmp_path, board_runner):
    board, exe = build("host", "tiny", 2, tmp_path / "build")
    engine = board_runner(board, exe)
    for value in ("0", "3", "two", "-1"):
        proc = engine.run(["--threads", value, "--info"], cwd=tmp_path)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr == (f'needle: error: --threads wants an integer between 1 and 2 (this engine\'s '
                               f'NEEDLE_THREADS; rebuild with scons threads=N for more), not "{value}"\n')
    proc = engine.run(["--threads", "1", "--threads", "2", "--info"], cwd=tmp_path)
    assert proc.returncode == 2 and "--threads given more than once" in proc.stderr
    proc = engine.run(["--info", "--threads"], cwd=tmp_path)
    assert proc.returncode == 2 and "--threads needs a value" in proc.stderr


def test_one_thread_engine_has_no_pool(tmp_path, board_runner):
    board, exe = build("host", "tiny", 1, tmp_path / "build")
    engine = board_runner(board, exe)
    model = (tmp_path / "build" / "gen" / "needle_model.c").read_text()
    assert "pthread" not in model
    assert engine.run(["--threads", "1", "--info"], cwd=tmp_path).returncode == 0
    proc = engine.run(["--threads", "2", "--info"], cwd=tmp_path)
    assert proc.returncode == 2 and "between 1 and 1" in proc.stderr


@pytest.mark.parametrize("args, message", [
    (["board=watch-m4", "threads=2"], "threads=2: board watch-m4 is bare metal and its engine runs on one core "
                                      "(drop threads=)"),
    (["board=host", "threads=0"], "threads=0 must be a positive integer"),
    (["board=host", "threads=many"], "threads=many must be a positive integer"),
    (["board=host", "thread_grain=-5"], "thread_grain=-5 must be a non-negative integer"),
])
def test_scons_refuses_bad_thread_options(args, message, tmp_path):
    proc = scons(*args, f"build={tmp_path}", check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"scons: error: {message}"]


def test_default_threads_come_from_the_board(board_error):
    assert boards.default_threads(boards.load("rpi-zero")) == 1
    assert boards.default_threads(boards.load("rpi-zero2")) == 4
    assert boards.default_threads(boards.load("router-mt7621")) == 4
    assert boards.default_threads(boards.load("watch-m4")) == 1
    assert 1 <= boards.default_threads(boards.load("host")) <= 64
    msg = board_error("watch-m4", lambda t: t.replace('kernels = "mdsp"', 'kernels = "mdsp"\ncores = 2'))
    assert "cores (the threads an engine uses by default) is for Linux boards: 1 to 64" in msg


def test_default_threads_stop_at_the_processors_the_process_may_use(tmp_path):
    """NEEDLE_THREADS is a ceiling: by default a step uses no more threads than the CPUs of
    the process's affinity (taskset); an explicit --threads is taken as given."""
    if not shutil.which("taskset"):
        pytest.skip("taskset (util-linux) is not installed")
    board, exe = build("host", "tiny", 3, tmp_path / "build")

    def threads(*args):
        proc = subprocess.run([*args, str(exe), "--bench", "1"], capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])["threads"]
    assert threads("taskset", "-c", "0") == 1
    cpus = len(os.sched_getaffinity(0))
    assert threads("env") == min(3, cpus)
    proc = subprocess.run(["taskset", "-c", "0", str(exe), "--threads", "3", "--bench", "1"], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0 and json.loads(proc.stdout.strip().splitlines()[-1])["threads"] == 3


def test_time_bench_reports_threads_first_token_and_long_prefill(tmp_path):
    """bench.host's time mode (scons bench=1 on the host): the same engine on one thread beside
    its default, the demo tool prompt's time to first token and a 128-token prefill, in the
    last-line JSON.  Figures only: timed, never compared (the machine is shared)."""
    board = boards.load("host")
    scons("board=host", f"archive={GOLDEN / 'tiny' / 'archive.cact'}", f"build={tmp_path}", "threads=2",
          "kernels=scalar")
    proc = subprocess.run([sys.executable, "-m", "bench.host", str(GOLDEN / "tiny" / "archive.cact"),
                           "--engine", str(tmp_path / "needle"), "--board", board["name"], "--tokens", "4"],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["threads"] == min(2, len(os.sched_getaffinity(0)))
    for key in ("decode_tok_s_1thread", "prefill_tok_s_1thread", "prefill_tok_s_128", "time_to_first_token_ms"):
        assert result[key] > 0, key
    assert result["time_to_first_token_prompt_tokens"] > 50     # the demo tools block and query
    assert "first token after" in proc.stdout
