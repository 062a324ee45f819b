"""The engine as a library (issue 12 item 6): `scons board=X lib=1` writes build/X/sdk, and
examples/hello, built outside SCons with its plain Makefile (pkg-config) and with CMake
against that SDK, runs on the host, on Linux boards under qemu-user and on a watch under
qemu-system-arm.  Its greedy continuation must be the board's own CLI's, token for token
and byte for byte: the library is the firmware's engine, not a copy of it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from generator.build import boards, sdk, sources
from host_tests.scons_run import ROOT, scons

EXAMPLE = ROOT / "examples" / "hello"
QUERY, MAX_NEW = "set a timer for ten minutes", 16
# (board, how the example is built); the SDK of each board is written once per session
CASES = [("host", "make"), ("host", "cmake"), ("rpi-zero", "make"), ("rpi-zero", "cmake"),
         ("watch-m4", "make"), ("watch-m4", "cmake"), ("router-mt7621", "make")]


def example_tools() -> str:
    """The example's built-in tool list (TOOLS in examples/hello/main.c), as JSON text."""
    m = re.search(r'static const char TOOLS\[\] = "(.*)";', (EXAMPLE / "main.c").read_text())
    return m.group(1).replace('\\"', '"')


@pytest.fixture(scope="session")
def sdks(tiny_path, tmp_path_factory):
    """board -> its build directory with lib=1 (built on first use)."""
    root, built = tmp_path_factory.mktemp("sdk"), {}

    def get(name: str) -> Path:
        if name not in built:
            why = boards.missing_tools(boards.load(name), run=True)
            if why:
                pytest.skip(why)
            scons(f"board={name}", f"archive={tiny_path}", f"build={root / name}", "lib=1")
            built[name] = root / name
        return built[name]
    return get


def build_example(how: str, sdk_dir: Path, out: Path) -> Path:
    """examples/hello built against sdk_dir into out/; returns the program."""
    if how == "make":
        proc = subprocess.run(["make", "-C", str(EXAMPLE), f"NEEDLE_SDK={sdk_dir}", f"OUT={out}"],
                              capture_output=True, text=True)
    else:
        if not shutil.which("cmake"):
            pytest.skip("cmake is not installed: apt-get install cmake")
        toolchain = sdk_dir / "share" / "needle" / "toolchain.cmake"
        proc = subprocess.run(["cmake", "-S", str(EXAMPLE), "-B", str(out), f"-DCMAKE_TOOLCHAIN_FILE={toolchain}"],
                              capture_output=True, text=True)
        if proc.returncode == 0:
            proc = subprocess.run(["cmake", "--build", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out / "hello"


@pytest.mark.parametrize("name,how", CASES, ids=[f"{b}-{h}" for b, h in CASES])
def test_example_equals_the_board_cli(name, how, sdks, tmp_path, board_runner):
    build = sdks(name)
    board = boards.load(name)
    sdk_dir = build / sdk.SDK_DIR
    program = build_example(how, sdk_dir, tmp_path / "out")
    shipped = sdk.archive_file(board)
    archive = sdk_dir / "share" / "needle" / shipped if shipped else None
    # the example maps $NEEDLE_ARCHIVE: no --archive for it (the CLI below takes one; both get
    # NEEDLE_ARCHIVE, as the example's users set it)
    example = board_runner(board, program, None if board["archive"]["placement"] == "file" else archive)
    env = {"NEEDLE_ARCHIVE": str(archive or "")}
    got = example.run([QUERY, str(MAX_NEW)], cwd=tmp_path, timeout=600, text=False, env=env)
    assert got.returncode == 0, got.stdout + got.stderr
    lines = got.stdout.decode("utf-8", "surrogateescape").split("\n")
    assert lines[0].startswith("ids: ") and lines[1].startswith("text: ") and lines[2:] == [""], got.stdout

    tools = tmp_path / "tools.json"
    tools.write_text(example_tools())
    cli = board_runner(board, build / ("needle.elf" if board["os"] == "none" else "needle"), archive)
    common = ["--tools", str(tools), "--query", QUERY, "--max-new", str(MAX_NEW)]
    ids = cli.run(common + ["--ids"], cwd=tmp_path, timeout=600, text=False, env=env)
    text = cli.run(common + ["--raw"], cwd=tmp_path, timeout=600, text=False, env=env)
    assert ids.returncode == 0 and text.returncode == 0, ids.stderr + text.stderr
    assert lines[0] == "ids: " + ids.stdout.decode().strip()
    assert len(lines[0].split(",")) == MAX_NEW          # the random demo weights never pick EOS
    assert got.stdout.split(b"\n")[1] == b"text: " + text.stdout.rstrip(b"\n")


def test_sdk_layout_is_relocatable_and_names_no_absolute_path(sdks, tmp_path, board_runner):
    """Every generated file names paths relative to itself: a copy elsewhere builds and runs,
    and no text file of the SDK holds the build directory's or the repository's path."""
    build = sdks("watch-m4")
    sdk_dir = build / sdk.SDK_DIR
    files = sorted(p.relative_to(sdk_dir).as_posix() for p in sdk_dir.rglob("*") if p.is_file())
    assert files == ["include/needle.h", "include/needle_bindings.h", "include/needle_hal.h", "include/needle_model.h",
                     "include/needle_retrieval.h", "include/needle_session.h", "include/needle_tokenizer.h",
                     "include/needle_tool_call.h",
                     "include/needle_tool_grammar.h", "include/needle_tool_prompt.h",
                     "lib/cmake/needle/needle-config-version.cmake", "lib/cmake/needle/needle-config.cmake",
                     "lib/libneedle.a", "lib/libneedle_board.a", "lib/pkgconfig/needle-board.pc",
                     "lib/pkgconfig/needle.pc", "share/needle/needle.ld", "share/needle/toolchain.cmake"]
    for rel in files:
        if rel.endswith(".a"):
            continue
        text = (sdk_dir / rel).read_text()
        assert str(build) not in text and str(ROOT) not in text, rel
    members = subprocess.run(["arm-none-eabi-ar", "t", str(sdk_dir / "lib" / "libneedle.a")], capture_output=True,
                             text=True, check=True).stdout.split()
    assert members == ["needle_model.o", "needle_kernels.o", "needle_tokenizer.o", "needle_archive.o"] + [
        Path(p).stem + ".o" for p in sources.LIBRARY_SOURCES]

    moved = tmp_path / "elsewhere" / "sdk"
    shutil.copytree(sdk_dir, moved)
    shutil.rmtree(sdk_dir)                 # nothing may still point into the build directory
    try:
        program = build_example("make", moved, tmp_path / "out")
        got = board_runner("watch-m4", program).run([QUERY, "4"], cwd=tmp_path, timeout=600, text=False)
        assert got.returncode == 0 and got.stdout.startswith(b"ids: "), got.stdout + got.stderr
    finally:
        shutil.copytree(moved, sdk_dir)


def test_pkg_config_and_cmake_versions(sdks, tmp_path):
    """pkg-config reads the board's compiler, flags and libraries; CMake refuses another major
    version."""
    from generator import __version__
    sdk_dir = sdks("watch-m4") / sdk.SDK_DIR
    env = {"PKG_CONFIG_LIBDIR": str(sdk_dir / "lib" / "pkgconfig"), "PATH": subprocess.os.environ["PATH"]}

    def pkg(*args):
        return subprocess.run(["pkg-config", *args], capture_output=True, text=True, env=env, check=True).stdout.split()
    assert pkg("--variable=cc", "needle") == ["arm-none-eabi-gcc"]
    assert pkg("--modversion", "needle") == [__version__]
    assert "-mcpu=cortex-m4" in pkg("--cflags", "needle")
    libs = pkg("--libs", "needle-board")
    assert libs.index("-lneedle_board") < libs.index("-lneedle") < libs.index("-lm")
    assert "-Wl,--undefined=Reset_Handler" in libs and any(f.endswith("/share/needle/needle.ld") for f in libs)
    if not shutil.which("cmake"):
        pytest.skip("cmake is not installed: apt-get install cmake")
    app = tmp_path / "app"
    app.mkdir()
    major = int(__version__.split(".")[0])
    (app / "CMakeLists.txt").write_text(f"cmake_minimum_required(VERSION 3.16)\nproject(v C)\n"
                                        f"find_package(needle {major + 1}.0 REQUIRED)\n")
    proc = subprocess.run(["cmake", "-S", str(app), "-B", str(tmp_path / "b"),
                           f"-DCMAKE_TOOLCHAIN_FILE={sdk_dir / 'share/needle/toolchain.cmake'}"],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and 'package "needle"' in proc.stderr
    assert f"needle-config.cmake, version: {__version__}" in proc.stderr


def test_partition_board_ships_its_archive_image(tiny_path, tmp_path):
    """A partition board's library leaves the archive out (needle_cact is the partition's
    address in needle.ld) and ships the image to flash there."""
    board = boards.load("watch-m7")
    why = boards.missing_tools(board)
    if why:
        pytest.skip(why)
    scons("board=watch-m7", f"archive={tiny_path}", f"build={tmp_path}", "lib=1")
    sdk_dir = tmp_path / sdk.SDK_DIR
    assert (sdk_dir / "share" / "needle" / "archive.bin").read_bytes() == tiny_path.read_bytes()
    members = subprocess.run(["arm-none-eabi-ar", "t", str(sdk_dir / "lib" / "libneedle.a")], capture_output=True,
                             text=True, check=True).stdout.split()
    assert "needle_archive.o" not in members
    assert "needle_cact = ORIGIN(ARCHIVE)" in (sdk_dir / "share" / "needle" / "needle.ld").read_text()
    assert "flash share/needle/archive.bin at 0x60000000" in (sdk_dir / "include" / "needle.h").read_text()


def test_makefile_without_an_sdk_says_how_to_make_one(tmp_path):
    proc = subprocess.run(["make", "-C", str(EXAMPLE), f"NEEDLE_SDK={tmp_path / 'none'}", f"OUT={tmp_path}"],
                          capture_output=True, text=True)
    assert proc.returncode != 0
    assert "no needle SDK at" in proc.stderr and "scons board=host lib=1" in proc.stderr
    assert not (tmp_path / "hello").exists()


# ---- the SDK from C++, and the library's public surface ------------------------------------

CONSUMER = ROOT / "host_tests" / "c" / "sdk_consumer.cc"
CONSUMER_TOOLS = ('[{"name":"set_timer","description":"Start a countdown timer","parameters":{"type":"object",'
                  '"properties":{"minutes":{"type":"integer","minimum":1}},"required":["minutes"]}}]')


def test_cpp_program_includes_the_sdk_headers_and_links_the_library(sdks, tmp_path):
    """host_tests/c/sdk_consumer.cc, compiled by g++ -pedantic -Werror with the flags the SDK's
    needle.pc gives: every installed header compiles as C++ and the library's C functions link
    under C++ (without extern "C" the link fails on mangled names).  What it prints is the
    Python twins' (the prompt, the shortest call list) and the board CLI's (the first token)."""
    from generator.tools.prompt import render_prompt
    from generator.tools.schema import compile_tools
    if not shutil.which("g++"):
        pytest.skip("g++ is not installed: apt-get install g++")
    build = sdks("host")
    sdk_dir = build / sdk.SDK_DIR
    env = {"PKG_CONFIG_LIBDIR": str(sdk_dir / "lib" / "pkgconfig"), "PATH": subprocess.os.environ["PATH"]}

    def pkg(*args):
        return subprocess.run(["pkg-config", *args, "needle"], capture_output=True, text=True, env=env,
                              check=True).stdout.split()
    exe = tmp_path / "sdk_consumer"
    proc = subprocess.run(["g++", "-std=c++11", "-O1", "-Wall", "-Wextra", "-Werror", "-pedantic", *pkg("--cflags"),
                           str(CONSUMER), "-o", str(exe), *pkg("--libs")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = subprocess.run([str(exe), QUERY], capture_output=True, timeout=600)
    assert got.returncode == 0, got.stderr
    text, rest = got.stdout.split(b"\0")
    assert text.decode("utf-8") == render_prompt(CONSUMER_TOOLS, QUERY)
    lines = rest.decode().splitlines()
    g = compile_tools(CONSUMER_TOOLS, force_call=True)
    assert lines[0] == f"list_min {g.nodes[g.root].min_bytes}"

    tools = tmp_path / "tools.json"
    tools.write_text(CONSUMER_TOOLS)
    cli = subprocess.run([str(build / "needle"), "--tools", str(tools), "--query", QUERY, "--ids", "--max-new", "1"],
                         capture_output=True, text=True, timeout=600)
    assert cli.returncode == 0, cli.stderr
    assert lines[1].split()[:2] == ["first", cli.stdout.strip()]


def defined_globals(archive: Path) -> dict[str, list[str]]:
    """Member object -> the global symbols it defines (nm: text, data, bss, read-only, weak)."""
    out = subprocess.run(["nm", "-g", "--defined-only", str(archive)], capture_output=True, text=True,
                         check=True).stdout
    members, member = {}, None
    for line in out.splitlines():
        if line.endswith(":"):
            member = line[:-1]
            members[member] = []
        elif line.strip():
            members[member].append(line.split()[-1])
    return members


def test_library_exports_only_needle_symbols(sdks):
    """The public surface of libneedle.a, a static archive, is every global symbol its members
    define: what a program linking it can call and what can collide with the program's own
    names.  Every member defines only needle_* names: the hand-written library (firmware/lib,
    generator/build/sources.py) and the generated engine, whose kernel interface between
    needle_model.o and needle_kernels.o is linked as needle_nk_* (needle_kernels.h)."""
    lib = sdks("host") / sdk.SDK_DIR / "lib" / "libneedle.a"
    members = defined_globals(lib)
    ours = {Path(p).stem + ".o" for p in sources.LIBRARY_SOURCES}
    assert ours <= set(members), sorted(ours - set(members))
    for member, names in members.items():
        stray = [n for n in names if not n.startswith("needle_")]
        assert not stray, f"{member} exports {stray}: make them static, or name them needle_*"
    assert any(n.startswith("needle_json_") for n in members["needle_json_scan.o"])
    assert "needle_nk_gemv_a8" in members["needle_kernels.o"]
