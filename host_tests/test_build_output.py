"""What a build prints and leaves behind: one short line a step (verbose=1: the command lines),
a no-op rebuild's one line, no warning for the bundled demo, the build directory of another
archive, run=1 query=..., scons -c, the settings file (custom.py / settings=FILE), and the
table board=all ends with.

Host builds (no tier, as every test that builds for the host); the tests of the summary table
and of the progress counter run no build (quick)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from generator.build import progress, summary
from host_tests.scons_run import ROOT, env_with_boards, scons

# what the demo build prints besides one line a compile step: GEN, LINK, CHECK and the memory
# report's three lines (its header, flash, RAM)
DEMO_BUILD_FIXED_LINES = 6
LINE_WIDTH = 100


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """A clean host build of the demo into a build directory of its own: (its output, the dir)."""
    build = tmp_path_factory.mktemp("demo") / "b"
    return scons("board=host", f"build={build}"), build


def test_a_clean_demo_build_prints_one_short_line_a_step(demo):
    proc, build = demo
    lines = proc.stdout.splitlines()
    commands = json.loads((build / "compile_commands.json").read_text())
    steps = [line for line in lines if line.startswith(("CC ", "AS "))]
    assert len(steps) == len(commands), proc.stdout        # one short line per compile step
    assert len(lines) == len(commands) + DEMO_BUILD_FIXED_LINES, proc.stdout
    assert all(len(line) <= LINE_WIDTH for line in lines), [line for line in lines if len(line) > LINE_WIDTH]
    assert lines[0] == f"GEN {build / 'gen'}"
    assert {"CC needle_model.c", "AS needle_archive.S", f"LINK {build / 'needle'}",
            f"CHECK {build / 'needle'}", f"memory report (host): {build / 'memory.txt'}"} <= set(lines)
    assert not [line for line in lines if line.startswith(("gcc", "Building compilation database"))]
    # no warning on the bundled demo: its header holds the window the engine sizes to
    assert "warning" not in proc.stdout + proc.stderr
    # the whole report is in memory.txt; compile_commands.json has the full command lines
    assert "worst stack path" in (build / "memory.txt").read_text()
    assert len(commands) >= 10 and all(c["command"].startswith("gcc ") for c in commands)


def test_a_no_op_rebuild_says_only_that_it_is_up_to_date(demo):
    _, build = demo
    again = scons("board=host", f"build={build}")
    assert again.stdout == "scons: `host' is up to date.\n" and again.stderr == ""


def test_verbose_prints_the_command_lines(tmp_path):
    """(-n: what would run, nothing built)"""
    short = scons("board=host", f"build={tmp_path / 'b'}", "-n").stdout.splitlines()
    full = scons("board=host", f"build={tmp_path / 'b'}", "-n", "verbose=1").stdout.splitlines()
    assert "CC needle_model.c" in short and not [line for line in short if line.startswith("gcc ")]
    assert any(line.startswith(f"gcc -o {tmp_path / 'b' / 'obj' / 'needle_model.o'} -c ") for line in full)
    assert f"generate engine {tmp_path / 'b' / 'gen'} <- demo/needle2-demo.cact" in full


def test_run_answers_the_query_given_as_one_argument(demo, tmp_path):
    _, build = demo
    proc = scons("board=host", f"build={build}", "run=1", "query=what's the weather in Oslo?")
    answer = json.loads(proc.stdout.splitlines()[-1])
    assert answer["function_calls"] == [{"name": "get_weather", "arguments": {"city": "Oslo"}}], answer
    assert f"RUN {build / 'needle'}" in proc.stdout.splitlines()
    # quote-safe: one argument, whatever it holds (nothing of it runs in a shell)
    nasty = "what's \"it\"; touch PWNED $(touch PWNED2) `touch PWNED3` $$HOME"
    proc = scons("board=host", f"build={build}", "run=1", f"query={nasty}", check=False)
    assert proc.returncode == 0 and json.loads(proc.stdout.splitlines()[-1])["prompt_tokens"] > 126, proc.stdout
    assert not list(ROOT.glob("PWNED*"))
    demo_run = json.loads(scons("board=host", f"build={build}", "run=1").stdout.splitlines()[-1])
    assert demo_run["function_calls"] == [{"name": "get_weather", "arguments": {"city": "Lagos"}}]
    refused = scons("board=host", f"build={build}", "query=hello", check=False)
    assert refused.returncode == 2 and "query= goes with run=1" in refused.stderr


def test_an_archive_with_kv_window_0_is_warned_and_scons_c_removes_everything(tmp_path):
    """A user archive whose header says 0 still gets the warning; `scons -c` with the same
    options leaves nothing of the build (objects, .su/.ci, memory.txt, compile_commands.json,
    the generated sources, the signature database)."""
    archive = tmp_path / "zero.cact"
    subprocess.run([sys.executable, "-m", "generator", "synth", "--preset", "tiny", "--kv-window", "0",
                    "-o", str(archive)], cwd=ROOT, check=True, capture_output=True)
    build = tmp_path / "b"
    built = scons("board=host", f"archive={archive}", f"build={build}")
    assert "warning: header kv_window is 0: sized from the" in built.stdout
    assert list(build.rglob("*.su")) and list(build.rglob("*.ci"))
    scons("board=host", f"archive={archive}", f"build={build}", "-c")
    assert not build.exists() or not [p for p in build.rglob("*") if not p.is_dir()]


def test_another_archive_builds_into_its_own_directory(tmp_path):
    """build/<board> is the demo's; another archive's default is build/<board>-<its name>; build= wins."""
    mine = tmp_path / "my-model.cact"
    mine.write_bytes((ROOT / "demo" / "needle2-demo.cact").read_bytes())
    other = scons("board=host", f"archive={mine}", "-n").stdout.splitlines()
    assert "LINK build/host-my-model/needle" in other
    demo_again = scons("board=host", "archive=demo/needle2-demo.cact", "-n").stdout.splitlines()
    assert not [line for line in demo_again if "host-" in line]
    explicit = scons("board=host", f"archive={mine}", f"build={tmp_path / 'b'}", "-n").stdout.splitlines()
    assert f"LINK {tmp_path / 'b' / 'needle'}" in explicit


def test_a_settings_file_gives_options_and_the_command_line_wins(tmp_path):
    settings = tmp_path / "settings.py"
    settings.write_text(f'board = "host"\nbuild = {str(tmp_path / "s")!r}\nverbose = True\n')
    from_file = scons(f"settings={settings}", "-n").stdout.splitlines()
    assert any(line.startswith(f"gcc -o {tmp_path / 's' / 'obj'}") for line in from_file)
    overridden = scons(f"settings={settings}", "verbose=0", f"build={tmp_path / 't'}", "-n").stdout.splitlines()
    assert f"LINK {tmp_path / 't' / 'needle'}" in overridden and "CC needle_model.c" in overridden
    missing = scons(f"settings={tmp_path / 'none.py'}", "-n", check=False)
    assert missing.returncode == 2 and "settings=" in missing.stderr and "does not exist" in missing.stderr


def test_board_all_goes_on_past_a_failing_board_and_ends_with_the_table(tmp_path):
    """Three boards: the host, the host with a flag the compiler refuses (fails), and one whose
    compiler is missing (skipped); the host still builds, the table says which is which, exit 2."""
    boards_dir = tmp_path / "boards"
    boards_dir.mkdir()
    host = (ROOT / "boards" / "host.toml").read_text()
    (boards_dir / "host.toml").write_text(host)
    (boards_dir / "host-broken.toml").write_text(
        host.replace('name = "host"', 'name = "host-broken"').replace("arch_flags = []", 'arch_flags = ["-mno-such-flag"]'))
    (boards_dir / "host-nocc.toml").write_text(
        host.replace('name = "host"', 'name = "host-nocc"').replace('toolchain_prefix = ""', 'toolchain_prefix = "nosuch-"'))
    tiny = ROOT / "host_tests" / "golden" / "tiny" / "archive.cact"
    proc = subprocess.run([sys.executable, "-m", "SCons", "-Q", "-j2", "board=all", f"archive={tiny}",
                           f"build={tmp_path / 'out'}"], cwd=ROOT, capture_output=True, text=True,
                          env=env_with_boards(boards_dir, tmp_path), timeout=600)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["board", "flash"])
    rows = {line.split()[0]: line.split() for line in lines[start + 2:start + 5]}
    assert rows["host"][-1] == "OK" and rows["host-broken"][-1] == "FAILED" and rows["host-nocc"][-1] == "SKIPPED"
    assert lines[start + 5] == "1 of 3 boards OK"
    assert (tmp_path / "out" / "host" / "memory.txt").is_file()


def test_an_edited_budget_reruns_the_post_link_check(tmp_path):
    """The post-link check depends on the board's file chain: the flash budget lowered in the
    file a board inherits from fails the next build (one line, the image deleted) although the
    image itself is unchanged (the engine is generated again, the same: nothing is compiled or
    linked), and raised again passes it."""
    boards_dir = tmp_path / "boards"
    boards_dir.mkdir()
    host = (ROOT / "boards" / "host.toml").read_text()
    assert "flash_bytes = 268435456 " in host
    (boards_dir / "host.toml").write_text(host)
    (boards_dir / "host-child.toml").write_text('inherits = "host"\nname = "host-child"\n'
                                                'description = "the host, through inheritance"\n')
    env = env_with_boards(boards_dir, tmp_path)
    build = tmp_path / "b"
    args = ("board=host-child", f"archive={ROOT / 'host_tests' / 'golden' / 'tiny' / 'archive.cact'}", f"build={build}")
    first = scons(*args, env=env)
    flash, _ram = summary.report_totals(str(build / "memory.txt"))
    assert f"CHECK {build / 'needle'}" in first.stdout.splitlines()
    (boards_dir / "host.toml").write_text(host.replace("flash_bytes = 268435456 ", f"flash_bytes = {flash - 1} "))
    over = scons(*args, env=env, check=False)
    assert over.returncode == 2, over.stdout + over.stderr
    assert not [line for line in over.stdout.splitlines() if line.startswith(("CC", "LINK"))], over.stdout
    errors = [line for line in over.stderr.splitlines() if line.startswith("scons: error:")]
    assert len(errors) == 1 and f"flash over budget on board host-child: {flash:,} bytes" in errors[0], over.stderr
    assert not (build / "needle").exists()
    (boards_dir / "host.toml").write_text(host.replace("flash_bytes = 268435456 ", f"flash_bytes = {flash} "))
    fits = scons(*args, env=env)
    assert f"CHECK {build / 'needle'}" in fits.stdout.splitlines()
    assert summary.report_totals(str(build / "memory.txt"))[0] == flash


# ---- no build ---------------------------------------------------------------------------------

@pytest.mark.quick
def test_the_summary_table():
    rows = [summary.Row("host", "OK", flash=567_097, ram=1_479_832, flash_budget=1 << 28, ram_budget=1 << 28),
            summary.Row("watch-m4", "FAILED", why="needle.elf: RAM overflow"),
            summary.Row("router-ath79", "SKIPPED", why="no zig")]
    out = summary.table(rows)
    assert out[0].split() == ["board", "flash", "used", "RAM", "used", "headroom", "result"]
    assert out[2].split() == ["host", "553.8", "KiB", "1.4", "MiB", "99%", "RAM", "OK"]
    assert out[3].split()[-1] == "FAILED" and out[4].split()[-1] == "SKIPPED"
    assert out[5] == "1 of 3 boards OK"
    assert out[6:] == ["  watch-m4: needle.elf: RAM overflow", "  router-ath79: no zig"]
    assert not summary.all_ok(rows) and summary.all_ok(rows[:1])


@pytest.mark.quick
def test_failures_are_matched_to_their_board(tmp_path):
    class Node:
        def __init__(self, path):
            self.abspath = path

        def __str__(self):
            return self.abspath

    class Failure:
        def __init__(self, path):
            self.node, self.errstr = Node(path), "Error 1"

    fails = [Failure(str(tmp_path / "a" / "obj" / "x.o")), Failure(str(tmp_path / "ab" / "needle"))]
    assert summary.failed_under(fails, str(tmp_path / "a"), "a") == fails[:1]
    assert summary.failed_under(fails, str(tmp_path / "c"), "c") == []
    report = tmp_path / "memory.txt"
    report.write_text("memory report (host):\n  flash      567,097 bytes = code 1\n  RAM      1,479,832 bytes = x\n")
    assert summary.report_totals(str(report)) == (567_097, 1_479_832)
    assert summary.report_totals(str(tmp_path / "none")) == (None, None)


@pytest.mark.quick
def test_progress_is_plain_lines_off_a_terminal_and_one_line_on_it():
    plain = io.StringIO()
    p = progress.Progress(3, "eval", stream=plain, tty=False)
    for i in range(1, 4):
        p.step(i, f"line {i}")
    assert plain.getvalue() == "[1/3] eval line 1\n[2/3] eval line 2\n[3/3] eval line 3\n"
    term = io.StringIO()
    p = progress.Progress(2, "eval", stream=term, tty=True)
    p.step(1)
    p.note("line 4: failed")
    p.step(2)
    assert term.getvalue() == "\r\x1b[K[1/2] eval\nline 4: failed\n\r\x1b[K[2/2] eval\n"
