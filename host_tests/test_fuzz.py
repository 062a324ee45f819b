"""Bounded libFuzzer run of the fuzz/ harnesses (issue 14 §4).

fuzz/run.py builds fuzz/tokenizer.c, fuzz/prompt.c and fuzz/cli.c with
clang -fsanitize=fuzzer,address,undefined and runs each on a copy of its seed corpus.  Here
the three run at the same time for SECONDS each (about 20 s of wall clock for the lot, plus
a few seconds of build); a crash, leak, timeout or broken invariant fails the harness's test
with libFuzzer's log tail.  The long run is `fuzz/run.sh 3600` (fuzz/README.md).

Skipped when clang or its libFuzzer runtime is missing (Debian/Ubuntu: libclang-rt-14-dev
for clang 14).
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SECONDS = 20

from fuzz import run as fuzz_run  # noqa: E402  (conftest puts the repository root on sys.path)




@pytest.fixture(scope="module")
def results(tmp_path_factory):
    reason = fuzz_run.libfuzzer_available()
    if reason:
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("fuzz")
    exes = fuzz_run.build(out, list(fuzz_run.HARNESSES))
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=len(exes)) as ex:
        runs = list(ex.map(lambda n: fuzz_run.run(n, exes[n], SECONDS, out), exes))
    return {r["name"]: r for r in runs}


@pytest.mark.parametrize("name", fuzz_run.HARNESSES)
def test_harness_survives(results, name):
    r = results[name]
    assert r["rc"] == 0 and not r["artifacts"], (
        f"{name}: libFuzzer exit {r['rc']}, reproducers {r['artifacts']}\n{r['tail']}")
    assert r["done"], f"{name}: no final DONE line\n{r['tail']}"
    assert r["execs"] > 100, f"{name}: only {r['execs']} executions\n{r['done']}"


def test_seed_corpora_and_dicts():
    for name in fuzz_run.HARNESSES:
        seeds = list((ROOT / "fuzz" / "corpus" / name).iterdir())
        assert len(seeds) >= 10, name
        assert (ROOT / "fuzz" / f"{name}.dict").is_file(), name


def test_a_harness_peak_rss_is_its_own(tmp_path):
    """The fuzzers' RSS limit and the soak's growth check read getrusage's peak, which Linux
    seeds at exec with the RSS of the forking process: run_apart keeps a big test worker's
    memory out of it (this process holds 600 MB more while it starts the child)."""
    import sys
    held = bytearray(600 * 1024 * 1024)
    held[::4096] = b"x" * len(held[::4096])
    code = "import resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)"
    peak = int(fuzz_run.run_apart([sys.executable, "-c", code], capture_output=True, text=True).stdout)
    assert peak < 200, f"the child's peak RSS {peak} MB includes its parent's"
    del held
