"""Every board: cross-build the engine for the golden archives, run it under the board's
emulator, and compare with the goldens (teacher-forced logits) and the host (greedy text)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from generator.build import boards
from generator.codegen import pipeline as engine
from generator.commands import golden
from generator.codegen import plan
from generator.errors import CactError

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "host_tests" / "golden"
BOARDS = [b for b in boards.names() if b != "host"]
ARCHIVES = ["tiny", "small", "tiny-wrap-kv4", "n3-tiny", "n3-small", "n3-rung"]
TOL = 1e-3


def scons(*args, check=True, env=None) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "SCons", "-Q", "-j2", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800, env=env)
    if check and proc.returncode:
        raise AssertionError(f"scons {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    """(board, archive) -> (build dir, board data); one scons run per golden archive builds
    every board (board=all)."""
    root = tmp_path_factory.mktemp("boards")
    out = {}
    for name in ARCHIVES:
        scons("board=all", f"archive={GOLDEN / name / 'archive.cact'}", f"build={root / name}")
        for b in BOARDS:
            out[b, name] = root / name / b
    return out


def run_on(board: dict, build_dir: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    binary = build_dir / ("needle.elf" if board["kernel"] == "none" else "needle")
    image = build_dir / "archive.bin"
    cmd = boards.run_command(board, str(binary), [str(a) for a in args],
                             str(image) if image.exists() else None)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=cwd)


@pytest.mark.parametrize("name", ARCHIVES)
@pytest.mark.parametrize("board_name", BOARDS)
def test_board_matches_goldens(built, board_name, name, tmp_path):
    board = boards.load(board_name)
    meta, logits = golden.load(GOLDEN / name)
    proc = run_on(board, built[board_name, name],
                  ["--tokens", ",".join(map(str, meta["tokens"])), "--logits", "logits.f32"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    got = np.fromfile(tmp_path / "logits.f32", dtype="<f4").reshape(logits["a8"].shape)
    want = logits["a8"]
    rel = (np.abs(got - want).max(axis=1) / np.abs(want).max(axis=1)).max()
    print(f"\n{board_name} {name}: max rel |Δlogit| {rel:.3g}, bit-identical "
          f"{np.array_equal(got, want)}", file=sys.stderr)
    assert rel <= TOL
    # goal: the integer kernels are exact and every float step has one order, so the
    # logits are bit-identical to the host's on every board
    assert np.array_equal(got, want)
    greedy = run_on(board, built[board_name, name],
                    ["--prompt", meta["prompt"], "--max-new", meta["recipe"]["max_new"], "--ids"], tmp_path)
    assert greedy.returncode == 0, greedy.stderr
    assert [int(x) for x in greedy.stdout.strip().split(",") if x] == meta["greedy"]["a8"]


@pytest.mark.parametrize("board_name", BOARDS)
def test_board_boot_check_and_errors(built, board_name, tmp_path):
    """Errors are one line with a real exit status under emulation too."""
    board = boards.load(board_name)
    proc = run_on(board, built[board_name, "tiny"], ["--tokens", "2,99999"], tmp_path)
    assert proc.returncode == 2
    assert "is not a token id" in proc.stderr and proc.stderr.count("\n") == 1


def test_partition_board_refuses_a_different_archive(built, tmp_path):
    """watch-m7 flashes the archive separately: flashing another one must be refused."""
    board = boards.load("watch-m7")
    build_dir = built["watch-m7", "tiny"]
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(build_dir / "needle.elf", other / "needle.elf")
    shutil.copy(GOLDEN / "tiny-wrap-kv4" / "archive.cact", other / "archive.bin")
    proc = run_on(board, other, ["--info"], tmp_path)
    assert proc.returncode == 3
    assert "differs from the one this engine was generated for" in proc.stderr


def test_images_are_reproducible(tmp_path):
    archive = GOLDEN / "tiny" / "archive.cact"
    images = []
    for _ in range(2):
        scons("board=watch-m4", f"archive={archive}", f"build={tmp_path / 'b'}")
        images.append(((tmp_path / "b" / "needle.bin").read_bytes(),
                       (tmp_path / "b" / "needle.elf").read_bytes()))
        scons("board=watch-m4", f"archive={archive}", f"build={tmp_path / 'b'}", "-c")
    assert images[0] == images[1]


def test_archive_too_big_for_the_board_fails_with_numbers(tmp_path):
    big = tmp_path / "base.cact"
    subprocess.run([sys.executable, "-m", "generator", "synth", "--preset", "small", "--seed", "1",
                    "-o", str(big)], cwd=ROOT, check=True, capture_output=True)
    board = boards.load("watch-m4")
    board["memory"]["regions"][2]["length"] = 65536
    with pytest.raises(CactError, match=r"archive is [\d,]+ bytes but board watch-m4's ARCHIVE region "
                                        r"holds 65,536 \([\d,]+ over\): use a shallower ladder rung"):
        engine.generate(str(big), str(tmp_path / "gen"), plan.Options.for_board(board))


def test_ram_overflow_fails_the_link_with_the_remedy(tmp_path):
    """A KV ring larger than the board's RAM stops the link (linker ASSERT / region overflow)."""
    base = tmp_path / "base.cact"
    subprocess.run([sys.executable, "-m", "generator", "synth", "--preset", "needle2-base", "--seed", "1",
                    "-o", str(base)], cwd=ROOT, check=True, capture_output=True)
    proc = scons("board=watch-m4", f"archive={base}", f"build={tmp_path / 'b'}", check=False)
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert "region `RAM' overflowed by" in text
    assert "RAM overflow: .data + .bss (engine state, KV cache) + stack exceed the RAM region; build " \
           "with a smaller kv_window=N or a shallower archive" in text
    assert not (tmp_path / "b" / "needle.elf").exists()
    # the remedy works: a 128-position ring fits the 4 MiB of SSRAM
    fixed = scons("board=watch-m4", f"archive={base}", f"build={tmp_path / 'b'}", "kv_window=128")
    assert "warning: kv_window=128 is smaller than the trained window 256" in fixed.stdout
    assert "memory report (watch-m4)" in fixed.stdout


def test_missing_toolchain_names_the_package(tmp_path):
    env = dict(os.environ, PATH=str(Path(sys.executable).parent))
    proc = scons("board=watch-m4", f"build={tmp_path / 'b'}", check=False, env=env)
    assert proc.returncode == 2
    assert ("board watch-m4 needs the compiler arm-none-eabi-gcc: apt-get install gcc-arm-none-eabi "
            "libnewlib-arm-none-eabi") in proc.stdout
    # with the compiler present but not the emulator, run=1 names the emulator's package
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "arm-linux-gnueabi-gcc").symlink_to(shutil.which("arm-linux-gnueabi-gcc"))
    env2 = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{fake}")
    proc = scons("board=rpi-zero", "run=1", f"build={tmp_path / 'd'}", check=False, env=env2)
    assert proc.returncode == 2
    assert "board rpi-zero runs under qemu-arm: apt-get install qemu-user" in proc.stdout


def test_every_board_file_is_valid():
    for name in boards.names():
        b = boards.load(name)
        assert b["name"] == name
