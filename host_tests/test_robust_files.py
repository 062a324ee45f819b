"""No command destroys a file it was given to read, or a file it did not write (issue 41,
items 1, 2, 3, 4, 12, 13, 25, 26).

* 1: a placement-file engine (router-mt7621 under qemu-user) refuses --logits / --heads naming
  its --archive, compared by device and inode (a hard link, a symbolic link, another spelling);
* 2: `synth -o` / `rung -o` onto a FIFO or a character device write through it, never rename
  over it (nodes made here, in a scratch directory: never the machine's /dev entries);
* 3: every generator command refuses an output path that is one of its inputs, before work;
* 4: `golden -o DIR` writes only into a new, empty or golden directory of ours and deletes
  only case files its own cases.json lists;
* 12: `emit --head-tokens -1` is refused in one line by the check SCons makes;
* 13: the OpenWrt package takes only an ELF with the board's machine, class, byte order and ABI;
* 25: an archive argument that is a directory, a FIFO or a device is named as such;
* 26: the C CLI's file arguments: "is a directory" / "is not a regular file".

Every refusal is one line on stderr, a non-zero exit, and leaves the inputs as they were."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from generator.build import boards, elfcheck
from generator.errors import CactError
from generator.files import refuse_output_is_input, write_atomic
from host_tests import elf_stub
from host_tests.scons_run import scons

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "host_tests" / "golden"
TINY = GOLDEN / "tiny" / "archive.cact"
N3_SMALL = GOLDEN / "n3-small" / "archive.cact"
HELDOUT = ROOT / "demo" / "eval" / "heldout.jsonl"


def gen(*args, module: str = "generator", timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def one_line(proc: subprocess.CompletedProcess, code: int, *words: str) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stderr.count("\n") == 1 and proc.stderr.endswith("\n"), proc.stderr
    assert "Traceback" not in proc.stderr
    for w in words:
        assert w in proc.stderr, proc.stderr


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def char_device(path: Path) -> Path:
    """A node like /dev/null (character device 1:3), made in the scratch directory; skip where
    this process may not make device nodes (no CAP_MKNOD, e.g. an unprivileged container)."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except (PermissionError, OSError) as exc:
        pytest.skip(f"cannot make a character device here: {exc.strerror}")
    return path


class FifoReader:
    """Reads a FIFO whole in a thread (the writer's open() waits for it)."""

    def __init__(self, path: Path):
        self.data = b""
        self.thread = threading.Thread(target=self._read, args=(path,), daemon=True)
        self.thread.start()

    def _read(self, path: Path) -> None:
        with open(path, "rb") as fh:
            self.data = fh.read()

    def result(self) -> bytes:
        self.thread.join(timeout=120)
        assert not self.thread.is_alive(), "the FIFO was never written and closed"
        return self.data


# ---- builds (shared by items 1, 13 and 26) ---------------------------------------------------

@pytest.fixture(scope="module")
def host_needle(tmp_path_factory) -> Path:
    build = tmp_path_factory.mktemp("files-host")
    scons("board=host", f"archive={TINY}", f"build={build}")
    return build / "needle"


@pytest.fixture(scope="module")
def router_needle(tmp_path_factory) -> Path:
    """router-mt7621 (placement file: --archive PATH, mapped while it runs), with probe heads."""
    why = boards.missing_tools(boards.load("router-mt7621"), run=True)
    if why:
        pytest.skip(why)
    build = tmp_path_factory.mktemp("files-mt7621")
    scons("board=router-mt7621", f"archive={TINY}", f"build={build}", "head_tokens=4")
    return build / "needle"


# ---- 1: an output of the router CLI that is its archive --------------------------------------

@pytest.mark.parametrize("flag", ["--logits", "--heads"])
def test_router_output_that_is_the_archive_is_refused(router_needle, tmp_path, flag, board_runner):
    d = tmp_path / "usb"
    d.mkdir()
    archive = d / "model.cact"
    archive.write_bytes(TINY.read_bytes())
    os.link(archive, d / "hard.cact")
    os.symlink("model.cact", d / "sym.cact")
    want = sha(TINY)
    spellings = [archive, d / "hard.cact", d / "sym.cact", d / "." / "model.cact", d / ".." / "usb" / "model.cact",
                 "model.cact"]                               # relative, run from d
    for out in spellings:
        proc = board_runner("router-mt7621", router_needle, archive).run(["--tokens", "2,5,7", flag, out],
                                                                         timeout=600, cwd=d)
        one_line(proc, 2, f"{flag} {out} is the archive file (--archive {archive})", "write to another file")
        assert proc.stdout == ""
        assert sha(archive) == want and archive.stat().st_size == TINY.stat().st_size, out
    # the archive named through the link, the output by its own name
    proc = board_runner("router-mt7621", router_needle, d / "sym.cact").run(["--tokens", "2,5", flag, archive],
                                                                            timeout=600)
    one_line(proc, 2, "is the archive file")
    assert sha(archive) == want
    # another file is written as before
    out = tmp_path / "out.f32"
    ok = board_runner("router-mt7621", router_needle, archive).run(["--tokens", "2,5,7", flag, out], timeout=600)
    assert ok.returncode == 0, ok.stderr
    assert out.stat().st_size > 0 and sha(archive) == want


# ---- 26: file arguments of the C CLI that are not files --------------------------------------

def test_tools_directory_is_named(host_needle, tmp_path):
    proc = subprocess.run([str(host_needle), "--tools", str(tmp_path), "--query", "hi"], capture_output=True,
                          text=True, timeout=300)
    one_line(proc, 2, f"cannot read {tmp_path}: is a directory")
    assert proc.stdout == ""


def test_tools_directory_is_named_on_the_router(router_needle, tmp_path, board_runner):
    proc = board_runner("router-mt7621", router_needle, TINY).run(["--tools", tmp_path, "--query", "hi"], timeout=600)
    one_line(proc, 2, f"cannot read {tmp_path}: is a directory")


def test_tools_device_is_not_a_regular_file(host_needle, tmp_path):
    node = char_device(tmp_path / "null")
    proc = subprocess.run([str(host_needle), "--tools", str(node), "--query", "hi"], capture_output=True,
                          text=True, timeout=300)
    one_line(proc, 2, f"cannot read {node}: is not a regular file")


def test_tools_from_a_pipe_still_work(host_needle, tmp_path):
    """A FIFO (what `--tools <(...)` hands the program) is read as before."""
    fifo = tmp_path / "tools.fifo"
    os.mkfifo(fifo)
    text = (ROOT / "demo" / "tools.json").read_bytes()

    def feed():
        with open(fifo, "wb") as fh:
            fh.write(text)
    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    proc = subprocess.run([str(host_needle), "--tools", str(fifo), "--query", "weather in Lagos", "--max-new", "24"],
                          capture_output=True, text=True, timeout=300)
    writer.join(timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("{") and proc.stderr == ""


# ---- 2: synth / rung onto a FIFO or a device ---------------------------------------------------

def test_synth_writes_through_a_fifo(tmp_path):
    regular = tmp_path / "tiny.cact"
    assert gen("synth", "--preset", "tiny", "--seed", "1", "-o", regular).returncode == 0
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = FifoReader(fifo)
    proc = gen("synth", "--preset", "tiny", "--seed", "1", "-o", fifo)
    assert proc.returncode == 0, proc.stderr
    assert reader.result() == regular.read_bytes()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)                       # still the FIFO
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe", "tiny.cact"]   # no temporary left


def test_rung_writes_through_a_fifo(tmp_path):
    regular = tmp_path / "rung.cact"
    assert gen("rung", N3_SMALL, "--layers", "3", "-o", regular).returncode == 0
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = FifoReader(fifo)
    proc = gen("rung", N3_SMALL, "--layers", "3", "-o", fifo)
    assert proc.returncode == 0, proc.stderr
    assert reader.result() == regular.read_bytes()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_synth_onto_a_character_device_keeps_the_node(tmp_path):
    node = char_device(tmp_path / "null")
    proc = gen("synth", "--preset", "tiny", "-o", node)
    assert proc.returncode == 0, proc.stderr
    st = os.lstat(node)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)
    assert [p.name for p in tmp_path.iterdir()] == ["null"]


def test_synth_onto_a_directory_is_refused(tmp_path):
    (tmp_path / "d").mkdir()
    proc = gen("synth", "--preset", "tiny", "-o", tmp_path / "d")
    one_line(proc, 2, f"cannot write {tmp_path / 'd'}: it is a directory, not a regular file")
    assert list((tmp_path / "d").iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]


def test_write_atomic_replaces_a_regular_file_whole(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"old")
    inode = path.stat().st_ino
    write_atomic(str(path), b"new")
    assert path.read_bytes() == b"new" and path.stat().st_ino != inode      # a rename, not a rewrite
    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask                    # what open() gives
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


# ---- 3: an output that is an input -------------------------------------------------------------

@pytest.fixture()
def data_copy(tmp_path) -> Path:
    path = tmp_path / "data.jsonl"
    path.write_bytes(HELDOUT.read_bytes())
    return path


def test_eval_json_onto_its_data_is_refused(tmp_path, data_copy):
    want = sha(data_copy)
    os.link(data_copy, tmp_path / "hard.jsonl")
    os.symlink("data.jsonl", tmp_path / "sym.jsonl")
    for out in (data_copy, tmp_path / "hard.jsonl", tmp_path / "sym.jsonl", tmp_path / "." / "data.jsonl"):
        proc = gen("eval", "--archive", TINY, "--data", data_copy, "--json", out, "--limit", "1")
        one_line(proc, 2, f"--json {out} is the same file as the input --data {data_copy}",
                 "choose another output path")
        assert proc.stdout == ""           # refused before the evaluation ran
        assert sha(data_copy) == want
    archive = tmp_path / "a.cact"
    archive.write_bytes(TINY.read_bytes())
    proc = gen("eval", "--archive", archive, "--data", data_copy, "--json", archive, "--limit", "1")
    one_line(proc, 2, f"--json {archive} is the same file as the input --archive {archive}")
    assert sha(archive) == sha(TINY)


def test_eval_board_json_onto_its_data_is_refused(data_copy):
    want = sha(data_copy)
    proc = gen("eval", "--data", data_copy, "--archive", TINY, "--board", "host", "--engine", "/nonexistent/needle",
               "--json", data_copy)
    one_line(proc, 2, f"--json {data_copy} is the same file as the input --data {data_copy}")
    assert sha(data_copy) == want


def test_synth_and_rung_onto_their_input_are_refused(tmp_path):
    archive = tmp_path / "a.cact"
    archive.write_bytes(TINY.read_bytes())
    os.link(archive, tmp_path / "hard.cact")
    proc = gen("synth", "--like", archive, "-o", tmp_path / "hard.cact")
    one_line(proc, 2, f"-o {tmp_path / 'hard.cact'} is the same file as the input --like {archive}")
    assert sha(archive) == sha(TINY)
    n3 = tmp_path / "n3.cact"
    n3.write_bytes(N3_SMALL.read_bytes())
    proc = gen("rung", n3, "--layers", "3", "-o", n3)
    one_line(proc, 2, f"-o {n3} is the same file as the input archive {n3}")
    assert sha(n3) == sha(N3_SMALL)


def test_emit_onto_its_archive_is_refused(tmp_path):
    out = tmp_path / "gen"
    out.mkdir()
    archive = out / "needle_model.h"             # the archive under the name of an engine file
    archive.write_bytes(TINY.read_bytes())
    proc = gen("emit", archive, "-o", out)
    one_line(proc, 2, f"the engine file {archive} is the same file as the input archive {archive}")
    assert sha(archive) == sha(TINY) and [p.name for p in out.iterdir()] == ["needle_model.h"]


def test_package_onto_its_binary_is_refused(tmp_path):
    from generator.build import package
    board = boards.load("router-mt7621")
    out = tmp_path / "o"
    out.mkdir()
    binary = out / package.package_name(board)
    binary.write_bytes(elf_stub.for_board(board))
    want = sha(binary)
    proc = gen("--board", "router-mt7621", "--binary", binary, "-o", out, module="generator.build.package")
    one_line(proc, 2, f"the package {binary} is the same file as the input --binary {binary}")
    assert sha(binary) == want


def test_golden_onto_its_archive_is_refused(tmp_path):
    d = tmp_path / "g"
    assert gen("golden", "--archive", TINY, "--tokens", "2,5", "-o", d).returncode == 0
    (d / "case-1.f32").write_bytes(TINY.read_bytes())         # the user moved the archive in, by that name
    proc = gen("golden", "--archive", d / "case-1.f32", "--tokens", "2,5", "-o", d)
    one_line(proc, 2, f"-o {d / 'case-1.f32'} is the same file as the input --archive {d / 'case-1.f32'}")
    assert sha(d / "case-1.f32") == sha(TINY)


def test_refuse_output_is_input_compares_files_not_names(tmp_path):
    a = tmp_path / "a"
    a.write_text("x")
    os.symlink("a", tmp_path / "s")
    with pytest.raises(CactError, match=r"^-o .*/s is the same file as the input --in .*/a: "):
        refuse_output_is_input({"-o": tmp_path / "s"}, {"--in": a})
    refuse_output_is_input({"-o": tmp_path / "new"}, {"--in": a, "--other": None})   # a new file: fine
    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    refuse_output_is_input({"-o": fifo}, {"--in": fifo})    # a FIFO is not destroyed by writing it


# ---- 4: golden -o DIR writes only where it may ---------------------------------------------

def test_golden_refuses_a_directory_that_is_not_ours(tmp_path):
    d = tmp_path / "mine"
    d.mkdir()
    (d / "cases.json").write_text('{"my": "notes"}\n')
    (d / "case-9.f32").write_bytes(b"mine")
    proc = gen("golden", "--archive", TINY, "--tokens", "2,5", "-o", d)
    one_line(proc, 2, f"-o {d} is not empty and holds no cases.json written by python -m generator golden")
    assert (d / "cases.json").read_text() == '{"my": "notes"}\n' and (d / "case-9.f32").read_bytes() == b"mine"
    assert sorted(p.name for p in d.iterdir()) == ["case-9.f32", "cases.json"]
    (d / "cases.json").unlink()                                 # non-empty without any cases.json
    proc = gen("golden", "--archive", TINY, "--tokens", "2,5", "-o", d)
    one_line(proc, 2, "is not empty")
    assert [p.name for p in d.iterdir()] == ["case-9.f32"]


def test_golden_rewrites_its_own_directory_and_deletes_only_its_cases(tmp_path):
    d = tmp_path / "g"
    proc = gen("golden", "--archive", TINY, "--tokens", "2,5", "--tokens", "2,6,7", "--tokens", "3", "-o", d)
    assert proc.returncode == 0, proc.stderr
    (d / "notes.txt").write_text("keep me")
    proc = gen("golden", "--archive", TINY, "--tokens", "2,5", "-o", d)       # shorter: case 2, 3 go
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in d.iterdir()) == ["case-1.f32", "cases.json", "notes.txt"]
    (d / "case-2.f32").write_bytes(b"not ours")                 # a file cases.json does not list
    proc = gen("golden", "--archive", TINY, "--tokens", "2,5", "--tokens", "4,4", "-o", d)
    one_line(proc, 2, f"{d / 'case-2.f32'} is not a case file of {d / 'cases.json'}")
    assert (d / "case-2.f32").read_bytes() == b"not ours"
    (d / "case-2.f32").unlink()
    (d / "case-7.f32").write_bytes(b"not ours either")          # beyond the run's cases: left alone
    proc = gen("golden", "--archive", TINY, "--tokens", "2,5", "--tokens", "4,4", "-o", d)
    assert proc.returncode == 0, proc.stderr
    assert (d / "case-7.f32").read_bytes() == b"not ours either" and (d / "notes.txt").read_text() == "keep me"


def test_golden_recipe_mode_refuses_a_foreign_directory(tmp_path):
    d = tmp_path / "goldens" / "tiny"
    d.mkdir(parents=True)
    (d / "meta.json").write_text('{"name": "something else"}')
    proc = gen("golden", "tiny", "-o", tmp_path / "goldens")
    one_line(proc, 2, f"{d} is not empty and is not the golden of recipe tiny")
    assert [p.name for p in d.iterdir()] == ["meta.json"]


# ---- 12: emit --head-tokens -1 ----------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["--head-tokens", "-1"], "head_tokens=-1 must be a non-negative integer"),
    (["--kv-window", "0"], "kv_window=0 must be a positive integer"),
    (["--kv-window", "-3"], "kv_window=-3 must be a positive integer"),
])
def test_emit_refuses_negative_counts_as_scons_does(tmp_path, args, message):
    out = tmp_path / "gen"
    proc = gen("emit", TINY, "-o", out, *args)
    one_line(proc, 2, message)
    assert not out.exists()


def test_scons_and_emit_share_the_count_check():
    proc = scons("board=host", "head_tokens=-1", check=False, timeout=300)
    assert proc.returncode == 2 and "head_tokens=-1 must be a non-negative integer" in proc.stderr, proc.stderr
    for value in ("-1", "²", " 3", "1.5", ""):
        with pytest.raises(CactError, match=rf"^head_tokens={value} must be a non-negative integer$"):
            boards.count_option("head_tokens", value, 0)
    assert boards.count_option("head_tokens", "0", 0) == 0 and boards.count_option("kv_window", 16, 1) == 16


# ---- 13: the package takes only the board's executable --------------------------------------

def _package(tmp_path, board: str, binary: Path) -> subprocess.CompletedProcess:
    return gen("--board", board, "--binary", binary, "-o", tmp_path / "out", module="generator.build.package")


@pytest.mark.parametrize("board, make, message", [
    ("router-mt7621", lambda: b"#!/bin/sh\necho not an engine\n", "is not an ELF executable"),
    ("router-mt7621", lambda: Path(os.path.realpath(sys.executable)).read_bytes(),
     "executable, but board router-mt7621 runs MIPS (mipsel_24kc)"),
    ("router-mt7621", lambda: elf_stub.for_board(boards.load("router-ath79")),
     "is big-endian MIPS, but board router-mt7621 is little-endian"),
    ("router-ath79", lambda: elf_stub.for_board(boards.load("router-mt7621")),
     "is little-endian MIPS, but board router-ath79 is big-endian"),
    ("router-mt7621", lambda: elf_stub.for_board(boards.load("router-ipq40xx")),
     "is a 32-bit ARM executable, but board router-mt7621 runs MIPS"),
    ("router-mt7621", lambda: elf_stub.executable(elf_stub.EM_MIPS, True, elf_stub.MIPS32R2_O32,
                                                  elf_stub.MIPS_FP_DOUBLE),
     "is built for double-precision hard float, but board router-mt7621's core has no FPU"),
    ("router-mt7621", lambda: elf_stub.executable(elf_stub.EM_MIPS, True, elf_stub.MIPS32R2_O32 | 0x20,  # n32
                                                  elf_stub.MIPS_FP_SOFT),
     "is not built for the MIPS o32 ABI"),
    ("router-mt7621", lambda: elf_stub.executable(elf_stub.EM_MIPS, True, elf_stub.MIPS32R2_O32, elf_stub.MIPS_FP_SOFT,
                                                  e_type=1), "is an ELF ET_REL (an object file?), not an executable"),
    ("router-ipq40xx", lambda: elf_stub.executable(elf_stub.EM_ARM, True, elf_stub.ARM_EABI5_SOFT),
     "is not built for the ARM EABI version 5 with the hard-float ABI"),
    ("router-mt7621", lambda: elf_stub.for_board(boards.load("router-mt7621"))[:60], "is not a valid ELF file"),
])
def test_package_refuses_a_binary_for_another_machine(tmp_path, board, make, message):
    binary = tmp_path / "needle"
    binary.write_bytes(make())
    proc = _package(tmp_path, board, binary)
    one_line(proc, 2, message, "build it soft-float" if "FPU" in message else f"pass build/{board}/needle")
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_package_takes_the_real_router_build(router_needle, tmp_path):
    proc = _package(tmp_path, "router-mt7621", router_needle)
    assert proc.returncode == 0, proc.stderr
    with open(router_needle, "rb") as fh:
        elfcheck.check_binary(io.BytesIO(fh.read()), str(router_needle), boards.load("router-mt7621"))


# ---- 25: an archive argument that is not a regular file --------------------------------------

def test_inspect_names_a_directory_and_a_fifo(tmp_path):
    proc = gen("inspect", tmp_path)
    one_line(proc, 2, f"cannot read archive {tmp_path}: it is a directory, not a regular file")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)                           # no writer: opening it must not wait for one
    proc = gen("inspect", fifo, timeout=120)
    one_line(proc, 2, f"cannot read archive {fifo}: it is a FIFO (named pipe), not a regular file")


def test_inspect_names_a_character_device(tmp_path):
    node = char_device(tmp_path / "zero-like")
    proc = gen("inspect", node)
    one_line(proc, 2, f"cannot read archive {node}: it is a character device, not a regular file")


@pytest.mark.parametrize("command", [
    lambda a, t: ["synth", "--like", a, "-o", t / "x.cact"],
    lambda a, t: ["rung", a, "--layers", "2", "-o", t / "x.cact"],
    lambda a, t: ["emit", a, "-o", t / "gen"],
    lambda a, t: ["golden", "--archive", a, "--tokens", "2", "-o", t / "g"],
    lambda a, t: ["eval", "--archive", a, "--data", HELDOUT, "--limit", "1"],
    lambda a, t: ["call", "--archive", a, "--tools", ROOT / "demo" / "tools.json", "--query", "hi"],
])
def test_every_command_names_a_directory_archive(tmp_path, command):
    d = tmp_path / "arch"
    d.mkdir()
    proc = gen(*command(d, tmp_path))
    one_line(proc, 2, f"cannot read archive {d}: it is a directory, not a regular file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["arch"]
