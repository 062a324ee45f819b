"""Debugging aids: `scons debug=1` adds debug information and nothing else (the engine
computes the same bytes), and every board build writes compile_commands.json (SCons'
compilation_db tool) with the board's own compiler command."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from generator.build import boards, flags
from host_tests.scons_run import scons

ROOT = Path(__file__).resolve().parent.parent
ARCHIVE = ROOT / "host_tests" / "golden" / "tiny" / "archive.cact"


def has_debug_info(path: Path) -> bool:
    with open(path, "rb") as fh:
        return ELFFile(fh).get_section_by_name(".debug_info") is not None


def database(build: Path) -> list[dict]:
    entries = json.loads((build / "compile_commands.json").read_text())
    assert entries and all({"command", "directory", "file", "output"} <= set(e) for e in entries)
    return entries


def test_debug_adds_debug_info_and_changes_no_numbers(tmp_path):
    logits = {}
    for debug in ("0", "1"):
        build = tmp_path / f"debug{debug}"
        scons("board=host", f"archive={ARCHIVE}", f"build={build}", f"debug={debug}")
        assert has_debug_info(build / "needle") == (debug == "1")
        out = tmp_path / f"logits{debug}.f32"
        proc = subprocess.run([str(build / "needle"), "--tokens", "2,17,5,9", "--logits", str(out)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        logits[debug] = out.read_bytes()
    assert logits["0"] == logits["1"] and len(logits["0"]) > 0
    # the compile commands differ by -g alone (optimisation and numerics flags unchanged)
    plain, debug = (database(tmp_path / f"debug{d}") for d in ("0", "1"))
    assert flags.DEBUG == ["-g"] and "-g" not in flags.NUMERICS
    strip = {str(tmp_path / "debug0"): "B", str(tmp_path / "debug1"): "B"}

    def words(entry):
        cmd = entry["command"]
        for k, v in strip.items():
            cmd = cmd.replace(k, v)
        return shlex.split(cmd)
    assert len(plain) == len(debug)
    for p, d in zip(plain, debug):
        wd, wp = words(d), words(p)
        assert wd.count("-g") == 1 and [w for w in wd if w != "-g"] == wp
        assert all(f in wd for f in flags.NUMERICS)


@pytest.mark.parametrize("name", ["host", "watch-m4", "router-mt7621"])
def test_every_build_writes_a_compilation_database(tmp_path, name):
    """router-mt7621 compiles with `python -m ziglang cc -target ...`: a command with spaces."""
    board = boards.load(name)
    build = tmp_path / "b"
    scons(f"board={name}", f"archive={ARCHIVE}", f"build={build}")
    entries = database(build)
    model = [e for e in entries if Path(e["file"]).name == "needle_model.c"]
    assert len(model) == 1
    argv = shlex.split(model[0]["command"])
    cc = boards.compiler_argv(board)
    assert argv[:len(cc)] == cc, (argv[:6], cc)
    assert model[0]["directory"] == str(ROOT)
    assert "-c" in argv and model[0]["file"] in argv
    # only this build's objects: every entry's output is under its obj/ directory
    assert all(Path(ROOT, e["output"]).resolve().parent == (build / "obj").resolve() for e in entries)
    assert {Path(e["file"]).name for e in entries} >= {"needle_model.c", "main.c", "format.c"}


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("board_name", ["watch-m4", "router-mt7621"])
def test_gdb_starts_the_emulator_with_its_stub_and_prints_the_attach_command(board_name, tmp_path):
    """`scons gdb=1`: qemu-system (-gdb tcp::PORT -S) or qemu-user (-g PORT) waits for gdb."""
    import socket
    import sys
    import time
    why = boards.missing_tools(boards.load(board_name), run=True)
    if why:
        pytest.skip(why)
    port = _free_port()
    build = tmp_path / "b"
    scons(f"board={board_name}", f"archive={ARCHIVE}", f"build={build}")      # build first, not under the clock
    proc = subprocess.Popen([sys.executable, "-m", "SCons", "-Q", f"board={board_name}", f"archive={ARCHIVE}",
                             f"build={build}", "gdb=1", f"gdb_port={port}"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        binary = build / ("needle.elf" if board_name.startswith("watch") else "needle")
        want = f"attach with: gdb-multiarch {binary} -ex 'target remote localhost:{port}'"
        seen = []
        for line in proc.stdout:
            seen.append(line.rstrip())
            if line.startswith("attach with"):
                break
        assert want in seen, seen[-5:]
        deadline = time.monotonic() + 60
        while True:                       # the stub listens while the core waits for gdb
            try:
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the gdb stub never listened"
                time.sleep(0.2)
        assert proc.poll() is None        # still waiting: the core is halted
    finally:
        import os
        import signal
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_gdb_refusals_are_one_line(tmp_path):
    proc = scons("board=all", "gdb=1", f"build={tmp_path / 'a'}", check=False)
    assert proc.returncode == 2 and proc.stderr.strip() == "scons: error: gdb=1 debugs one board: pass board=NAME"
    proc = scons("board=host", f"archive={ARCHIVE}", "gdb=1", f"build={tmp_path / 'h'}", check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("scons: error: board host runs natively: debug it with gdb --args ")
