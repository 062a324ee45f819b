"""The hosted-CI workflow (.github/workflows/ci.yml) is linted here, never run here.

It must validate against the published GitHub workflow schema (check-jsonschema bundles it,
so this works offline; requirements-test.txt pins it and .ci/run installs it), name every
board of boards/ in its emulator matrix, and shard that tier so each test runs in one shard."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression   # pytest's own -k parser: what CI runs

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"
BOARDS = sorted(p.stem for p in (ROOT / "boards").glob("*.toml"))


def _board_k():
    spec = importlib.util.spec_from_file_location("board_k", ROOT / ".ci" / "board_k.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _matrix_boards(text: str) -> list[str]:
    """The `board:` list of the emulator job's matrix (a plain YAML block list)."""
    m = re.search(r"^( +)board:\n((?:\1  - .*\n)+)", text, re.M)
    assert m, "no `board:` list in the workflow's matrix"
    return [line.split("- ", 1)[1].strip() for line in m.group(2).splitlines()]


def lint(path: Path) -> subprocess.CompletedProcess:
    """check-jsonschema on `path` with the GitHub workflow schema it bundles."""
    if importlib.util.find_spec("check_jsonschema") is None:
        pytest.skip("check-jsonschema is not installed: pip install -r requirements-test.txt "
                    "(.ci/run does)")
    return subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema",
                           "vendor.github-workflows", str(path)], capture_output=True, text=True, timeout=300)


def test_workflow_validates_against_the_github_schema():
    out = lint(WORKFLOW)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_linter_refuses_a_broken_workflow(tmp_path):
    """The lint is not vacuous: a job without runs-on and with an unknown key is refused."""
    bad = tmp_path / "ci.yml"
    bad.write_text("name: ci\non: push\njobs:\n  quick:\n    runs-onn: ubuntu-24.04\n"
                   "    steps:\n      - run: true\n")
    out = lint(bad)
    assert out.returncode == 1, out.stdout + out.stderr


def test_every_board_is_in_the_matrix():
    assert sorted(_matrix_boards(WORKFLOW.read_text())) == BOARDS


def test_the_workflow_installs_with_setup_and_shares_the_scons_cache():
    text = WORKFLOW.read_text()
    assert text.count("run: sudo ./setup") == 3
    cache = re.search(r"^  SCONS_CACHE: (\S+)$", text, re.M).group(1)
    assert re.search(rf"^  SCONSFLAGS: cache={re.escape(cache)}$", text, re.M)
    assert text.count("path: ${{ env.SCONS_CACHE }}") == 2
    for tier in ("-m quick", "-m emulator", '"${{ matrix.marks }}"'):
        assert tier in text


def _selected(expr: str, test_id: str) -> bool:
    return Expression.compile(expr).evaluate(lambda name, **kw: name.lower() in test_id.lower())


@pytest.mark.parametrize("boards", [BOARDS, ["host", "zq", "zq2", "zq-uart", "yv"]], ids=["boards", "synthetic"])
def test_each_emulator_test_runs_in_exactly_one_shard(boards):
    """Ids name a board alone, with a suffix or prefix, beside a board whose name contains it,
    or no board at all; each is picked by exactly one board's -k expression."""
    k = _board_k()
    ids = ["host_tests/test_x.py::test_plain", "host_tests/test_x.py::test_p[tiny]"]
    for b in boards:
        if b != "host":
            ids += [f"host_tests/test_x.py::test_a[{b}]", f"host_tests/test_x.py::test_b[{b}-tiny-demo]",
                    f"host_tests/test_x.py::test_c[neon-{b}]"]
    for test_id in ids:
        shards = [b for b in boards if _selected(k.expression(b, boards), test_id)]
        assert len(shards) == 1, (test_id, shards)


def test_board_k_refuses_an_unknown_board():
    out = subprocess.run([sys.executable, str(ROOT / ".ci" / "board_k.py"), "nosuch"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.splitlines() == [f"error: no board 'nosuch' in boards/ (one of: {', '.join(BOARDS)})"]
