"""Debugging aids: `scons debug=1` adds debug information and nothing else (the engine
computes the same bytes), and every board build writes compile_commands.json (SCons'
compilation_db tool) with the board's own compiler command."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from generator.build import boards, flags

ROOT = Path(__file__).resolve().parent.parent
ARCHIVE = ROOT / "host_tests" / "golden" / "tiny" / "archive.cact"


def scons(*args) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "SCons", "-Q", "-j4", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    return proc


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
