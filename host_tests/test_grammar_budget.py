"""The call grammar's table bounds per board (boards/<name>.toml [grammar]; docs/grammar.md §6).

A board file may set the bounds of the grammar's tables; `scons tools=FILE` compiles the
built-in list with them at build time, and a list they cannot hold fails the build with one
line naming the tool, the bound and the board key to raise.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from host_tests.scons_run import env_with_boards

from generator.build import boards, flags
from generator.tools import tables

ROOT = Path(__file__).resolve().parent.parent
ARCHIVE = ROOT / "host_tests" / "golden" / "tiny" / "archive.cact"
DEMO_TOOLS = ROOT / "demo" / "tools.json"


def scons_with_boards(board_dir: Path, tmp_path: Path, *args) -> subprocess.CompletedProcess:
    """scons in a child process whose board loader reads board_dir (sitecustomize)."""
    env = env_with_boards(board_dir, tmp_path)
    return subprocess.run([sys.executable, "-m", "SCons", "-Q", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)


def host_copy(board_dir: Path, name: str, grammar: str) -> None:
    text = (board_dir / "host.toml").read_text().replace('name = "host"', f'name = "{name}"')
    (board_dir / f"{name}.toml").write_text(text + "\n[grammar]\n" + grammar + "\n")


def test_bounds_become_compiler_flags(board_dir):
    host_copy(board_dir, "host-small-grammar", "nodes = 64\nliterals = 200")
    board = boards.load("host-small-grammar")
    assert tables.defines(board) == ["-DNEEDLE_GRAMMAR_MAX_REFS=200u", "-DNEEDLE_GRAMMAR_MAX_NODES=64u"]
    assert set(tables.defines(board)) <= set(flags.compile_flags(board, "scalar"))
    assert tables.defines(boards.load("host")) == []          # the header's defaults


@pytest.mark.parametrize("grammar, message", [
    ("branches = 4", "unknown key grammar.branches (grammar keys: text_bytes, nodes, literals"),
    ("nodes = 2", "grammar.nodes must be an integer from 3 to 1048576 (schemas, one node each)"),
    ('literals = "many"', "grammar.literals must be an integer from 1"),
    ("text_bytes = true", "grammar.text_bytes must be an integer from 64"),
])
def test_board_file_refuses_bad_bounds(board_error, grammar, message):
    assert message in board_error("host", lambda text: text + "\n[grammar]\n" + grammar + "\n")


@pytest.mark.parametrize("grammar, needs", [
    ("nodes = 5", 'tool "set_timer": the grammar needs more than 5 nodes (NEEDLE_GRAMMAR_MAX_NODES): use fewer or '
                  "simpler tools; or raise grammar.nodes (now 5) in boards/host-small-grammar.toml"),
    ("text_bytes = 200", "the tool list is longer than the grammar's 200 bytes once minified (NEEDLE_GRAMMAR_TEXT_MAX); "
                         "or raise grammar.text_bytes (now 200) in boards/host-small-grammar.toml"),
])
def test_a_list_over_the_boards_bounds_fails_the_build_in_one_line(board_dir, tmp_path, grammar, needs):
    """demo/tools.json has 6 nodes and 379 bytes: a board with less fails before linking."""
    host_copy(board_dir, "host-small-grammar", grammar)
    proc = scons_with_boards(board_dir, tmp_path, "board=host-small-grammar", f"archive={ARCHIVE}",
                             f"build={tmp_path / 'b'}", f"tools={DEMO_TOOLS}", "snapshot=0")
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("scons: error:")]
    assert len(errors) == 1 and needs in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "b" / "needle").exists() and not (tmp_path / "b" / "gen" / "needle_tools.c").exists()


def test_a_list_within_raised_bounds_builds_and_calls(board_dir, tmp_path):
    """Bounds just big enough: the build passes, the call from flash equals the run-time compile,
    and a longer list at run time is refused in one line."""
    host_copy(board_dir, "host-small-grammar", "nodes = 6\ntext_bytes = 400\nliterals = 4")
    proc = scons_with_boards(board_dir, tmp_path, "board=host-small-grammar", f"archive={ARCHIVE}",
                             f"build={tmp_path / 'b'}", f"tools={DEMO_TOOLS}", "snapshot=0")
    assert proc.returncode == 0, proc.stderr
    args = ["--query", "set a timer for ten minutes", "--force-call", "--max-new", "64"]
    small = json.loads(subprocess.run([str(tmp_path / "b" / "needle")] + args, capture_output=True, text=True,
                                      check=True).stdout)
    # a run-time list bigger than the bounds is refused on the device with the same message
    other = subprocess.run([str(tmp_path / "b" / "needle"), "--tools", str(ROOT / "examples" / "tools" / "tools.json")]
                           + args, capture_output=True, text=True)
    assert other.returncode == 2 and "(NEEDLE_GRAMMAR_TEXT_MAX)" in other.stderr and other.stderr.count("\n") == 1
    default = json.loads(subprocess.run([str(tmp_path / "b" / "needle"), "--tools", str(DEMO_TOOLS)] + args,
                                        capture_output=True, text=True, check=True).stdout)
    assert small["function_calls"] == default["function_calls"] and small["text"] == default["text"]


def watch_copy(board_dir: Path, name: str, grammar: str) -> None:
    text = (board_dir / "watch-m4.toml").read_text().replace('name = "watch-m4"', f'name = "{name}"')
    (board_dir / f"{name}.toml").write_text(text + "\n[grammar]\n" + grammar + "\n")


def test_runtime_false_keeps_only_the_built_in_list(board_dir, tmp_path, board_runner):
    """[grammar] runtime = false on a watch: the compiler and its store leave the image (the
    linker drops them), the built-in call is the twin's, --tools is refused in one line, and a
    build without tools=FILE is refused before anything builds."""
    from elftools.elf.elffile import ELFFile
    from host_tests.test_tool_call import ENVELOPE_KEYS, _reference, python_envelope
    board = boards.load("watch-m4")
    if boards.missing_tools(board, run=True):
        pytest.skip(boards.missing_tools(board, run=True))
    watch_copy(board_dir, "watch-flash-grammar", "runtime = false")
    assert boards.load("watch-flash-grammar")["grammar"] == {"runtime": False}
    bare = scons_with_boards(board_dir, tmp_path, "board=watch-flash-grammar", f"archive={ARCHIVE}",
                             f"build={tmp_path / 'none'}")
    errors = [line for line in bare.stderr.splitlines() if line.startswith("scons: error:")]
    assert bare.returncode != 0 and len(errors) == 1 and "pass tools=FILE" in errors[0], bare.stderr
    build = tmp_path / "b"
    proc = scons_with_boards(board_dir, tmp_path, "board=watch-flash-grammar", f"archive={ARCHIVE}", f"build={build}",
                             f"tools={DEMO_TOOLS}")
    assert proc.returncode == 0, proc.stderr
    with open(build / "needle.elf", "rb") as fh:
        names = {s.name for s in ELFFile(fh).get_section_by_name(".symtab").iter_symbols()}
    assert "needle_grammar_compile" not in names and "store" not in names and "tools_file" not in names
    # the library's turn reaches the grammar through its parsed tool record; the built-in
    # tables are what it returns
    assert "needle_call_grammar_toolset" in names and "needle_tools_grammar" in names
    query = "set a timer for ten minutes"
    engine = board_runner(board, build / "needle.elf")
    got = engine.run(["--query", query, "--force-call", "--max-new", "64"], cwd=tmp_path, timeout=600, text=False)
    assert got.returncode == 0, got.stderr
    model, tok = _reference("tiny")
    env = json.loads(got.stdout.decode())
    want = python_envelope(model, tok, DEMO_TOOLS.read_text(), query, 64, True)
    keys = [k for k in ENVELOPE_KEYS if k != "prefix_tokens"]    # the watch starts from its snapshot
    assert {k: env[k] for k in keys} == {k: want[k] for k in keys} and env["prefix_tokens"] > 0
    refused = engine.run(["--tools", DEMO_TOOLS, "--query", query], cwd=tmp_path, timeout=600, text=False)
    assert refused.returncode == 2 and b"runtime = false" in refused.stderr and refused.stdout == b""
