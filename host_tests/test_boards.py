"""Every board: cross-build the engine for the golden archives, run it under the board's
emulator, and compare with the goldens (teacher-forced logits) and the host (greedy text)."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from generator.build import boards, flags
from generator.commands import golden
from generator.errors import CactError
from host_tests.scons_run import scons

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "host_tests" / "golden"
# The goldens write logits to a host file (--logits FILE): boards without host files (a UART
# console, console = "uart") cannot, and host_tests/test_uart.py covers them instead.
# Boards without an emulator (emulator.command = []: the real development boards, e.g.
# rp2350-pico-plus2, stm32h750b-dk) are built and checked by the `built` fixture (board=all)
# but cannot run here: host_tests/test_flash.py covers them.
BOARDS = [b for b in boards.names() if b != "host" and boards.has_host_files(boards.load(b))
          and boards.load(b)["emulator"]["command"]]
ARCHIVES = ["tiny", "small", "tiny-wrap-kv4", "n3-tiny", "n3-small", "n3-rung"]
TOL = 1e-3


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


def engine_of(board: dict, build_dir: Path, archive: str = "tiny") -> tuple[Path, Path | None]:
    """(the build's engine, its archive): the partition image (archive.bin beside the
    firmware) or, on placement-file boards, the file (--archive)."""
    binary = build_dir / ("needle.elf" if board["os"] == "none" else "needle")
    image = build_dir / "archive.bin"
    if board["archive"]["placement"] == "file":
        image = GOLDEN / archive / "archive.cact"
    return binary, image if image.exists() else None


@pytest.mark.parametrize("name", ARCHIVES)
@pytest.mark.parametrize("board_name", BOARDS)
def test_board_matches_goldens(built, board_name, name, tmp_path, board_runner):
    board = boards.load(board_name)
    engine = board_runner(board, *engine_of(board, built[board_name, name], name))
    meta, logits = golden.load(GOLDEN / name)
    proc = engine.run(["--tokens", ",".join(map(str, meta["tokens"])), "--logits", "logits.f32"], cwd=tmp_path,
                      timeout=1800)
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
    greedy = engine.run(["--prompt", meta["prompt"], "--max-new", meta["recipe"]["max_new"], "--ids"], cwd=tmp_path,
                        timeout=1800)
    assert greedy.returncode == 0, greedy.stderr
    assert [int(x) for x in greedy.stdout.strip().split(",") if x] == meta["greedy"]["a8"]
    # batched prefill (the board's own chunk) of all but the last 3 tokens, then 3 steps: the
    # same rows (host_tests/test_prefill.py covers chunk sizes, threads and both GEMM forms)
    k = len(meta["tokens"]) - 3
    proc = engine.run(["--tokens", ",".join(map(str, meta["tokens"])), "--prefill", k, "--logits", "prefill.f32"],
                      cwd=tmp_path, timeout=1800)
    assert proc.returncode == 0, proc.stderr
    got = np.fromfile(tmp_path / "prefill.f32", dtype="<f4").reshape(4, want.shape[1])
    assert np.array_equal(got, want[k - 1:])


_TWIN: dict = {}
# the demo list, and a fixed list that walks what the demo does not: a pattern, a unique enum
# array, const, a number with multipleOf, a tool without parameters (the property tests on
# the host draw thousands; this subset runs on every board)
CALLS = {"demo": (ROOT / "demo" / "tools.json", "set a timer for ten minutes"),
         "pattern": (ROOT / "host_tests" / "data" / "tools_pattern.json", "alarm 06:30 mo tu")}


def _twin_envelope(name: str, tools: str) -> dict:
    """The Python twin's envelope of a forced call (generator/tools/decode.py), once per archive."""
    if (name, tools) not in _TWIN:
        from host_tests.test_tool_call import _reference, python_envelope
        model, tok = _reference(name)
        path, query = CALLS[tools]
        _TWIN[name, tools] = python_envelope(model, tok, path.read_text(), query, 64, True)
    return _TWIN[name, tools]


@pytest.mark.parametrize("tools", sorted(CALLS))
@pytest.mark.parametrize("name", ["tiny", "n3-tiny"])
@pytest.mark.parametrize("board_name", BOARDS)
def test_board_constrained_call_equals_the_twin(built, board_name, name, tools, tmp_path, board_runner):
    """A forced tool call, constrained, under the board's emulator: the envelope (timings and
    memory aside) is the Python twin's, token for token (docs/grammar.md)."""
    from host_tests.test_tool_call import ENVELOPE_KEYS
    import json
    board = boards.load(board_name)
    path, query = CALLS[tools]
    proc = board_runner(board, *engine_of(board, built[board_name, name], name)).run(
        ["--tools", str(path), "--query", query, "--force-call", "--max-new", "64"], cwd=tmp_path, timeout=1800)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert {k: got[k] for k in ENVELOPE_KEYS} == _twin_envelope(name, tools)
    assert got["type"] == "call" and got["function_calls"]


@pytest.mark.parametrize("board_name", BOARDS)
def test_board_boot_check_and_errors(built, board_name, tmp_path, board_runner):
    """Errors are one line with a real exit status under emulation too."""
    board = boards.load(board_name)
    proc = board_runner(board, *engine_of(board, built[board_name, "tiny"])).run(["--tokens", "2,99999"],
                                                                                  cwd=tmp_path, timeout=1800)
    assert proc.returncode == 2
    assert "is not a token id" in proc.stderr and proc.stderr.count("\n") == 1


def test_an_rvv_engine_on_a_core_without_v_says_so(built, tmp_path):
    """The rvv kernels enable V on their own functions only, so the start-up reads HWCAP before
    any vector instruction: one line and exit 2 on a core without V, not SIGILL."""
    board = boards.load("riscv64-k1")
    why = boards.missing_tools(board, run=True)
    if why:
        pytest.skip(why)
    proc = subprocess.run(["qemu-riscv64", "-cpu", "rv64,v=false", str(built["riscv64-k1", "tiny"] / "needle"),
                           "--prompt", "hi", "--max-new", "2"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr == ("needle: this engine was built for RISC-V cores with the vector extension (RVV 1.0) "
                           "and this CPU has none: rebuild it with kernels=scalar\n")


def test_partition_board_refuses_a_different_archive(built, tmp_path, board_runner):
    """watch-m7 flashes the archive separately: flashing another one must be refused."""
    board = boards.load("watch-m7")
    build_dir = built["watch-m7", "tiny"]
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(build_dir / "needle.elf", other / "needle.elf")
    shutil.copy(GOLDEN / "tiny-wrap-kv4" / "archive.cact", other / "archive.bin")
    proc = board_runner(board, *engine_of(board, other)).run(["--info"], cwd=tmp_path, timeout=1800)
    assert proc.returncode == 3
    assert "differs from the one this engine was generated for" in proc.stderr


def test_images_are_reproducible(tmp_path):
    """Building twice gives the same image set: the ELF, the HEX, each region's image and
    the manifest (images.json), byte for byte."""
    archive = GOLDEN / "tiny" / "archive.cact"
    images = []
    for _ in range(2):
        scons("board=watch-m4", f"archive={archive}", f"build={tmp_path / 'b'}")
        out = tmp_path / "b"
        names = sorted(p.name for p in out.glob("*.bin")) + ["images.json", "needle.elf", "needle.hex"]
        assert len(names) == 5, names          # the FLASH and ARCHIVE region images
        images.append({n: (out / n).read_bytes() for n in names})
        scons("board=watch-m4", f"archive={archive}", f"build={tmp_path / 'b'}", "-c")
        assert not list(out.glob("*.bin")) and not (out / "images.json").exists()
    assert images[0] == images[1]


def test_archive_too_big_for_the_board_fails_with_numbers(tmp_path):
    big = tmp_path / "base.cact"
    subprocess.run([sys.executable, "-m", "generator", "synth", "--preset", "small", "--seed", "1",
                    "-o", str(big)], cwd=ROOT, check=True, capture_output=True)
    board = boards.load("watch-m4")
    board["memory"]["regions"][2]["length"] = 65536
    with pytest.raises(CactError, match=r"archive is [\d,]+ bytes but board watch-m4's ARCHIVE region "
                                        r"holds 65,536 \([\d,]+ over\): use a shallower ladder rung"):
        boards.generate_engine(board, str(big), str(tmp_path / "gen"))


def test_ram_overflow_fails_the_link_with_the_remedy(tmp_path):
    """A KV ring larger than the board's RAM stops the link (linker ASSERT / region overflow):
    needle2-base at a window of 280, which the plan's estimate of the KV ring alone lets
    through (a larger one is refused before anything compiles; at its trained 256 it fits
    the 4 MiB since numerics version 4's f16 KV scales)."""
    base = tmp_path / "base.cact"
    subprocess.run([sys.executable, "-m", "generator", "synth", "--preset", "needle2-base", "--seed", "1",
                    "--kv-window", "280", "-o", str(base)], cwd=ROOT, check=True, capture_output=True)
    proc = scons("board=watch-m4", f"archive={base}", f"build={tmp_path / 'b'}", check=False)
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert "region `RAM' overflowed by" in text
    assert "RAM overflow: .data + .bss (engine state, KV cache) + stack exceed the RAM region; build " \
           "with a smaller kv_window=N or a shallower archive" in text
    assert not (tmp_path / "b" / "needle.elf").exists()
    # the remedy works: a 128-position ring fits the 4 MiB of SSRAM
    fixed = scons("board=watch-m4", f"archive={base}", f"build={tmp_path / 'b'}", "kv_window=128")
    assert "warning: kv_window=128 is smaller than the trained window 280" in fixed.stdout
    assert "memory report (watch-m4)" in fixed.stdout


def test_missing_toolchain_names_the_package(tmp_path):
    env = dict(os.environ, PATH=str(Path(sys.executable).parent))
    proc = scons("board=watch-m4", f"build={tmp_path / 'b'}", check=False, env=env)
    assert proc.returncode == 2
    assert ("board watch-m4 needs the compiler arm-none-eabi-gcc: apt-get install gcc-arm-none-eabi "
            "libnewlib-arm-none-eabi") in proc.stderr
    # with the compiler present but not the emulator, run=1 names the emulator's package
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "arm-linux-gnueabi-gcc").symlink_to(shutil.which("arm-linux-gnueabi-gcc"))
    env2 = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{fake}")
    proc = scons("board=rpi-zero", "run=1", f"build={tmp_path / 'd'}", check=False, env=env2)
    assert proc.returncode == 2
    assert "board rpi-zero runs under qemu-arm: apt-get install qemu-user" in proc.stderr


def test_every_board_file_is_valid():
    for name in boards.names():
        b = boards.load(name)
        assert b["name"] == name


# ---- board files: schema, inheritance, and emit loading a board like SCons does ---------

@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace('os = "none"', 'os = "none"\ncpu = "cortex-m4"'), "unknown key 'cpu'"),
    (lambda t: t.replace("[memory]", "[memory]\nram = 1"), "unknown key memory.ram"),
    (lambda t: t.replace("[archive]", "[archive]\nplacment = 'linked'"), "unknown key archive.placment"),
    (lambda t: t.replace("package = \"qemu-system-arm\"", "package = \"qemu-system-arm\"\ncpu = 1"),
     "unknown key emulator.cpu"),
    (lambda t: t.replace('use = "code" }', 'use = "code", size = 1 }'), "unknown key memory.regions.size"),
    (lambda t: t.replace('os = "none"', 'os = "freertos"'), "os must be linux or none"),
    (lambda t: t.replace('os = "none"', 'kernel = "none"'), "unknown key 'kernel'"),
])
def test_board_file_errors_name_the_file_and_key(board_error, edit, message):
    assert message in board_error("watch-m4", edit)


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace("vlen = 256", "vlen = 64"), "vlen = 64: the rvv kernels need a power of two from 128"),
    (lambda t: t.replace("vlen = 256", "vlen = 384"), "vlen = 384: the rvv kernels need a power of two from 128"),
    (lambda t: t.replace("vlen = 256", "# no V"), 'kernels = "rvv" needs a core with the vector extension: '
                                                  'give the board its vlen'),
    (lambda t: t.replace("vlen=256", "vlen=128"), "vlen = 256 but the emulator does not run at it"),
    (lambda t: t.replace('kernels = "rvv"', 'kernels = "neon64"'), 'kernels = neon64 is aarch64 code and board '
                                                                    'riscv64-k1 is riscv64: choose one of rvv, scalar'),
])
def test_riscv_vector_boards_are_refused_in_one_line(board_error, edit, message):
    """A vector length the rvv kernels are not written for, a board that asks for them without
    saying its core has V, or an emulator at another length: refused naming the fix."""
    assert message in board_error("riscv64-k1", edit)


@pytest.mark.parametrize("name, edit, message", [
    ("esp32-c6-virt", lambda t: t.replace('"-mabi=ilp32"', '"-mabi=ilp32f"'),
     "-mabi=ilp32f passes floats in FPU registers but -march=rv32imac has no F extension: use -mabi=ilp32 "
     "(soft float) on a core without an FPU"),
    ("esp32-p4-virt", lambda t: t.replace('"-mabi=ilp32f"', '"-mabi=ilp32d"'),
     "-mabi=ilp32d passes floats in FPU registers but -march=rv32imafc has no D extension"),
    ("esp32-c6-virt", lambda t: t.replace('kernels = "scalar"', 'kernels = "rvv"'),
     "kernels = rvv is riscv64 code and board esp32-c6-virt is riscv32: choose one of scalar"),
])
def test_riscv32_float_abi_and_family_refused_in_one_line(board_error, name, edit, message):
    """An FPU-less core with a hard-float ABI (GCC would build code that traps on the first
    float), or a vector family on an RV32 core without V: refused when the board file loads."""
    assert message in board_error(name, edit)


def test_riscv32_image_of_another_float_abi_is_refused(built):
    """The ELF's float ABI (e_flags) against the board's: the P4 twin's hard-float image is
    refused for the C6 twin in one line, and each twin's own image passes."""
    from generator.build import elfcheck
    p4 = built["esp32-p4-virt", "tiny"] / "needle.elf"
    with open(p4, "rb") as fh, pytest.raises(CactError) as err:
        elfcheck.check_binary(fh, str(p4), boards.load("esp32-c6-virt"))
    assert "is built for the single-float ABI, but board esp32-c6-virt uses soft float" in str(err.value)
    for name in ("esp32-c6-virt", "esp32-p4-virt"):
        elf = built[name, "tiny"] / "needle.elf"
        with open(elf, "rb") as fh:
            elfcheck.check_binary(fh, str(elf), boards.load(name))


def test_riscv32_boards_are_soft_or_hard_float_as_their_abi_says():
    c6, p4 = boards.load("esp32-c6-virt"), boards.load("esp32-p4-virt")
    assert boards.board_arch(c6) == boards.board_arch(p4) == "riscv32"
    assert boards.soft_float(c6) and boards.runtime_sources(c6) == ["softfloat/softfloat.c"]
    assert not boards.soft_float(p4) and boards.runtime_sources(p4) == []
    assert boards.riscv_float_abi(p4) == ("f", "single") and boards.riscv_float_abi(boards.load("riscv64-k1")) is None


def test_watch_m7_inherits_watch_m4():
    m4, m7 = boards.load("watch-m4"), boards.load("watch-m7")
    assert [p.name for p in boards.files("watch-m7")] == ["watch-m7.toml", "watch-m4.toml"]
    assert "inherits" not in m7 and m7["name"] == "watch-m7" and "Cortex-M7" in m7["description"]
    # its own values
    assert m7["arch_flags"][0] == "-mcpu=cortex-m7" and "-mfpu=fpv5-d16" in m7["arch_flags"]
    assert m7["archive"]["placement"] == "partition"
    assert boards.region(m7, "archive")["origin"] == 0x60000000
    assert m7["emulator"]["command"][:3] == ["qemu-system-arm", "-M", "mps2-an500"]
    # watch-m4's, merged table by table
    for key in ("os", "endianness", "toolchain_prefix", "toolchain_package", "kernels", "stack_bytes",
                "max_text"):
        assert m7[key] == m4[key], key
    assert m7["memory"]["ram_bytes"] == m4["memory"]["ram_bytes"] == 4194304
    assert m7["memory"]["kv_budget_bytes"] == m4["memory"]["kv_budget_bytes"]
    assert m7["emulator"]["package"] == "qemu-system-arm" and m7["emulator"]["systick_hz"] == 25000000
    assert boards.region(m4, "archive")["origin"] == 0x21000000      # the parent is untouched


def test_inheritance_chains_merge_tables_and_replace_lists(board_dir):
    (board_dir / "watch-m7-big.toml").write_text(
        'inherits = "watch-m7"\nname = "watch-m7-big"\ndescription = "more RAM"\n'
        'arch_flags = ["-mcpu=cortex-m7", "-mthumb", "-mfloat-abi=hard"]\n'
        '[memory]\nram_bytes = 8388608\n')
    b = boards.load("watch-m7-big")
    assert [p.name for p in boards.files("watch-m7-big")] == ["watch-m7-big.toml", "watch-m7.toml",
                                                             "watch-m4.toml"]
    assert b["memory"]["ram_bytes"] == 8388608                          # own
    assert b["memory"]["kv_budget_bytes"] == 1048576                    # watch-m4's, same table
    assert boards.region(b, "archive")["origin"] == 0x60000000          # watch-m7's
    assert b["arch_flags"] == ["-mcpu=cortex-m7", "-mthumb", "-mfloat-abi=hard"]   # replaced, not appended
    assert b["description"] == "more RAM"


@pytest.mark.parametrize("files, message", [
    ({"a": 'inherits = "b"', "b": 'inherits = "a"'}, "board file a.toml: inherits cycle a -> b -> a"),
    ({"a": 'inherits = "a"'}, "board file a.toml: inherits cycle a -> a"),
    ({"a": 'inherits = "nope"'}, "board file a.toml: inherits unknown board 'nope'"),
    ({"a": 'inherits = "b"', "b": 'inherits = "gone"'}, "board file b.toml: inherits unknown board 'gone'"),
])
def test_inheritance_cycles_and_unknown_parents_are_one_line(board_dir, files, message):
    for name, text in files.items():
        (board_dir / f"{name}.toml").write_text(f'{text}\nname = "{name}"\ndescription = "x"\n')
    with pytest.raises(CactError) as err:
        boards.load("a")
    assert str(err.value) == message


def test_a_child_states_its_own_name(board_dir):
    (board_dir / "a.toml").write_text('inherits = "watch-m4"\ndescription = "x"\n')
    with pytest.raises(CactError, match=r"^board file a.toml: missing key 'name'"):
        boards.load("a")


def test_engine_options_come_from_the_board():
    m55 = boards.load("watch-m55")
    opts = boards.engine_options(m55, kv_window=32, head_tokens=4)
    assert (opts.board, opts.kv_window, opts.kv_budget, opts.max_text, opts.kernels, opts.head_tokens) == \
        ("watch-m55", 32, 1048576, 2048, "mve", 4)
    assert opts.board_data is m55
    assert boards.engine_options(m55, kernels="scalar").kernels == "scalar"


def test_x86_family_flags_are_stated_once():
    host = boards.load("host")
    assert "-mavx2" in flags.compile_flags(host, "x86")
    assert {"-mavx2", "-mavx512vnni", "-mavx512vl"} <= set(flags.compile_flags(host, "x86-vnni"))
    assert "-mavx2" not in flags.compile_flags(host, "scalar")
    # auto picks the fastest family the build machine's CPU runs
    native = boards.native_x86_families()
    assert boards.kernel_family(host) == (native[-1] if native else "scalar")
    assert native in ([], ["x86"], ["x86", "x86-vnni"])
    m4 = boards.load("watch-m4")
    assert flags.compile_flags(m4, "mdsp")[-2:] == ["-ffunction-sections", "-fdata-sections"]
    assert "-Tgen/link.ld" in flags.link_flags(m4, "gen/link.ld")


def emit(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "generator", "emit", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def test_emit_loads_the_board_like_scons(tmp_path):
    archive = GOLDEN / "tiny" / "archive.cact"
    proc = emit(archive, "-o", tmp_path / "m55", "--board", "watch-m55")
    assert proc.returncode == 0, proc.stderr
    m55 = tmp_path / "m55"
    assert (m55 / "link.ld").is_file() and "ORIGIN" in (m55 / "link.ld").read_text()
    assert '#define NK_KERNELS      "mve"' in (m55 / "needle_kernels.h").read_text()
    assert "arm_mve.h" in (m55 / "needle_kernels.c").read_text()
    assert "GNU-stack" not in (m55 / "needle_archive.S").read_text()
    assert re.search(r"#define NEEDLE_TOK_MAX_TEXT\s+2048u", (m55 / "needle_tokenizer.h").read_text())
    assert f"wrote {len(list(m55.iterdir()))} files" in proc.stdout
    # watch-m7 keeps its archive in a partition: a linker script, no .incbin file
    proc = emit(archive, "-o", tmp_path / "m7", "--board", "watch-m7")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "m7" / "link.ld").is_file() and not (tmp_path / "m7" / "needle_archive.S").exists()
    # the host: no linker script, a non-executable stack, its own family
    proc = emit(archive, "-o", tmp_path / "host", "--board", "host")
    assert proc.returncode == 0, proc.stderr
    host = tmp_path / "host"
    assert not (host / "link.ld").exists()
    assert "GNU-stack" in (host / "needle_archive.S").read_text()
    family = boards.kernel_family(boards.load("host"))
    assert f'#define NK_KERNELS      "{family}"' in (host / "needle_kernels.h").read_text()


@pytest.mark.parametrize("args, message", [
    (["--board", "no-such-board"], "error: unknown board 'no-such-board'; choose one of esp32-c6, esp32-c6-virt, "),
    (["--kernels", "bogus"], "error: --kernels bogus: choose one of "),
])
def test_emit_refuses_a_bad_board_with_one_line(tmp_path, args, message):
    proc = emit(GOLDEN / "tiny" / "archive.cact", "-o", tmp_path / "gen", *args)
    assert proc.returncode == 2
    assert proc.stderr.startswith(message) and proc.stderr.count("\n") == 1
    assert not (tmp_path / "gen").exists()


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="needs an x86-64 compiler")
@pytest.mark.parametrize("family, cflags, message", [
    ("x86", ["-mno-avx2"], "kernel family x86 needs AVX2: build with -mavx2"),
    ("x86-vnni", ["-mavx2"], "kernel family x86-vnni needs AVX512-VNNI on 256-bit vectors: "
                             "build with -mavx512vnni -mavx512vl"),
])
def test_x86_kernels_say_what_to_build_with(family, cflags, message, tmp_path):
    """Emitting needs no such CPU; compiling without the family's flags stops with one line."""
    proc = emit(GOLDEN / "tiny" / "archive.cact", "-o", tmp_path, "--board", "host", "--kernels", family)
    assert proc.returncode == 0, proc.stderr
    cc = subprocess.run(["gcc", "-std=c11", *cflags, "-c", str(tmp_path / "needle_kernels.c"),
                         "-o", str(tmp_path / "k.o")], capture_output=True, text=True)
    assert cc.returncode != 0 and message in cc.stderr


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 only")
def test_scons_refuses_to_run_a_family_the_cpu_lacks(tmp_path):
    """On a CPU without AVX512-VNNI (a stand-in /proc/cpuinfo with AVX2 only) the host picks
    x86; forcing x86-vnni still builds, but running it would die of SIGILL: one line instead."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n")
    env = dict(os.environ, NEEDLE_CPUINFO=str(cpuinfo))
    proc = scons("board=host", "kernels=x86-vnni", "run=1", f"build={tmp_path / 'b'}", check=False, env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "scons: error: kernels=x86-vnni: this machine's CPU lacks avx512_vnni avx512vl (/proc/cpuinfo), "
        "so the engine cannot run here: drop kernels= (this host's own family is x86) or drop "
        "run=/bench=/check=/eval="]
    assert not (tmp_path / "b" / "needle").exists()


# Imported while generating but unable to change the output: the reference models, which
# generator/model/__init__.py imports and codegen never calls.
NOT_IN_SIGNATURE = {"generator/model/__init__.py", "generator/model/needle2.py", "generator/model/needle3.py"}


def test_engine_signature_is_exactly_what_generation_runs(tmp_path):
    """SIGNATURE_SOURCES (scons_tool.py) lists every generator module a generation imports
    -- a bare-metal board (linker script) and the host -- and nothing else."""
    from generator.build import scons_tool
    code = ("import sys; from generator.build import boards\n"
            f"for b in ('watch-m7', 'host'):\n"
            f"    boards.generate_engine(boards.load(b), {str(GOLDEN / 'tiny' / 'archive.cact')!r}, "
            f"{str(tmp_path)!r} + '/' + b)\n"
            "print('\\n'.join(m.__file__ for m in list(sys.modules.values()) "
            "if getattr(m, '__file__', None)))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    loaded = {str(Path(f).resolve().relative_to(ROOT)) for f in proc.stdout.split()
              if Path(f).resolve().is_relative_to(ROOT / "generator")}
    listed = {str(p.relative_to(ROOT)) for p in scons_tool.signature_files() if p.suffix == ".py"}
    assert loaded - NOT_IN_SIGNATURE == listed
    templates = {str(p.relative_to(ROOT)) for p in scons_tool.signature_files() if p.suffix == ".j2"}
    assert "templates/link.ld.j2" in templates and "templates/kernels/mve.c.j2" in templates
    assert {"templates/model/needle2.c.j2", "templates/model/needle3.c.j2", "templates/model/_attention.c.j2"} <= templates
    assert not any(t.startswith("templates/bench/") for t in templates)   # the driver is no engine input


def test_engine_depends_on_the_inherited_board_file(tmp_path):
    if boards.missing_tools(boards.load("watch-m7")):
        pytest.skip(boards.missing_tools(boards.load("watch-m7")))
    proc = scons("board=watch-m7", f"build={tmp_path}", "--tree=prune", "-n",
                 str(tmp_path / "gen" / "needle_model.c"))
    assert "boards/watch-m7.toml" in proc.stdout and "boards/watch-m4.toml" in proc.stdout
    assert "templates/bench" not in proc.stdout and "generator/build/flags.py" not in proc.stdout
