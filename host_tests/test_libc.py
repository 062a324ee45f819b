"""The C library in a program of your own on a bare-metal board (issue 49 item 1): the board
support library (libneedle_board.a, needle::board) carries newlib's system calls on the HAL
(firmware/baremetal/syscalls.c; picolibc's standard streams on the RISC-V twins,
syscalls_picolibc.c), so examples/printf's printf (%lld, %llx, %f, %e), fgets and
malloc work on every emulated watch, semihosting and UART consoles alike, and print what the
host's glibc prints.  The heap is the board file's heap_bytes: none by default (malloc
returns NULL with errno ENOMEM and printf's %f, which newlib's dtoa takes scratch for, is
skipped by the example), reserved by the linker script and counted by the memory report when
set.  The needle firmware itself still links none of it (heap-free).  examples/api, tools and
printf build with CMake too."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from generator.build import boards, sdk
from host_tests.scons_run import ROOT, env_with_boards, scons

EXAMPLES = ROOT / "examples"
# the emulated bare-metal boards; the -uart twins inherit their parent's heap_bytes
WATCHES = ["watch-m4", "watch-m7", "watch-m55", "watch-m4-uart", "watch-m55-uart",
           "esp32-c6-virt", "esp32-p4-virt"]      # the RISC-V twins: picolibc (syscalls_picolibc.c)
HEAP = 16384
QUERY, MAX_NEW, ALLOC = "set a timer for ten minutes", 3, 4000
LINE = "a line for fgets\n"


@pytest.fixture(scope="module")
def heap_boards(tmp_path_factory):
    """(env for scons, board dir): boards/ with heap_bytes = HEAP on the three watches."""
    work = tmp_path_factory.mktemp("heap-boards")
    d = work / "boards"
    shutil.copytree(ROOT / "boards", d)
    for name in ("watch-m4", "watch-m7", "watch-m55", "esp32-c6-virt", "esp32-p4-virt"):
        path = d / f"{name}.toml"
        text = path.read_text()
        table = text.index("\n[")          # a top-level key goes before the first table
        path.write_text(text[:table] + f"\nheap_bytes = {HEAP}" + text[table:])
    return env_with_boards(d, work), d


@pytest.fixture(scope="module")
def sdks(tiny_path, tmp_path_factory, heap_boards):
    """(board, heap?) -> its build directory with lib=1, built on first use."""
    root, built = tmp_path_factory.mktemp("libc-sdk"), {}

    def get(name: str, heap: bool) -> Path:
        if (name, heap) not in built:
            why = boards.missing_tools(boards.load(name), run=True)
            if why:
                pytest.skip(why)
            out = root / f"{name}{'-heap' if heap else ''}"
            scons(f"board={name}", f"archive={tiny_path}", f"build={out}", "lib=1",
                  env=heap_boards[0] if heap else None)
            built[name, heap] = out
        return built[name, heap]
    return get


def make(example: str, build: Path, out: Path) -> Path:
    proc = subprocess.run(["make", "-C", str(EXAMPLES / example), f"NEEDLE_SDK={build / sdk.SDK_DIR}", f"OUT={out}"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out / example


def cmake(example: str, build: Path, out: Path) -> Path:
    if not shutil.which("cmake"):
        pytest.skip("cmake is not installed: apt-get install cmake")
    toolchain = build / sdk.SDK_DIR / "share" / "needle" / "toolchain.cmake"
    proc = subprocess.run(["cmake", "-S", str(EXAMPLES / example), "-B", str(out),
                           f"-DCMAKE_TOOLCHAIN_FILE={toolchain}"], capture_output=True, text=True)
    if proc.returncode == 0:
        proc = subprocess.run(["cmake", "--build", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out / example


def run_printf(board: str, build: Path, program: Path, tmp_path, board_runner, alloc: int = ALLOC) -> list[str]:
    """examples/printf's output lines (a UART board's closing "needle: exit 0" checked and dropped);
    a partition board gets its SDK's archive image."""
    shipped = sdk.archive_file(boards.load(board))
    archive = build / sdk.SDK_DIR / "share" / "needle" / shipped if shipped else None
    got = board_runner(board, program, archive).run([QUERY, str(MAX_NEW), str(alloc)], stdin=LINE, cwd=tmp_path,
                                           timeout=600)
    assert got.returncode == 0, got.stdout + got.stderr
    lines = got.stdout.replace("\r\n", "\n").split("\n")
    if boards.load(board).get("console") == "uart":
        assert lines[-2:] == ["needle: exit 0", ""], got.stdout
        lines = lines[:-2] + [""]
    assert lines[-1] == "", got.stdout
    return lines[:-1]


@pytest.fixture(scope="module")
def host_lines(sdks, tmp_path_factory):
    """What examples/printf prints on the host (glibc's printf), from its "token" lines on."""
    tmp = tmp_path_factory.mktemp("printf-host")
    program = make("printf", sdks("host", False), tmp)
    got = subprocess.run([str(program), QUERY, str(MAX_NEW), str(ALLOC)], input=LINE, capture_output=True,
                         text=True, check=True)
    lines = got.stdout.split("\n")[:-1]
    return lines[1:]


@pytest.mark.parametrize("name", WATCHES)
def test_printf_floats_long_long_and_fgets_as_on_the_host(name, sdks, host_lines, tmp_path, board_runner):
    """With a heap, the watch prints what glibc prints: the same ids (the engine is bit-exact
    across boards), the same %lld/%llx checksum, the same %f/%e probabilities."""
    build = sdks(name, True)
    program = make("printf", build, tmp_path / "out")
    lines = run_printf(name, build, program, tmp_path, board_runner)
    assert lines[0].startswith("state: ") and lines[0].endswith(" bytes")
    assert lines[1:] == host_lines
    assert f"malloc({ALLOC}): ok" in lines and f"stdin: {LINE.strip()}" in lines
    assert any(line.startswith("p[0] = 0.") for line in lines)
    assert any(line.startswith("checksum: ") and "half negated -" in line for line in lines)


@pytest.mark.parametrize("name", ["watch-m4", "esp32-c6-virt"])
def test_no_heap_by_default_malloc_returns_null(name, sdks, host_lines, tmp_path, board_runner):
    """heap_bytes unset (0): malloc fails cleanly with ENOMEM (on RISC-V picolibc's errno is
    thread-local: start-up points tp at the TLS block); printf's integer conversions do not
    need the heap; the linker script reserves nothing and the report shows no heap."""
    build = sdks(name, False)
    assert "HEAP_BYTES = 0;" in (build / sdk.SDK_DIR / "share" / "needle" / "needle.ld").read_text()
    assert " heap " not in (build / "memory.txt").read_text()
    program = make("printf", build, tmp_path / "out")
    lines = run_printf(name, build, program, tmp_path, board_runner)
    want = [line for line in host_lines if not line.startswith(("p[", "malloc("))]
    floats = "floats: no heap for printf's %f (set heap_bytes in the board file)"
    assert lines[1:] == want[:-1] + [f"malloc({ALLOC}): NULL (ENOMEM)", floats, want[-1]]


def test_heap_is_reserved_and_reported(sdks, tmp_path, board_runner):
    """heap_bytes = 16384: the linker script reserves it after .bss, the memory report counts
    it, malloc gets it (and not one byte more: a larger request fails)."""
    build = sdks("watch-m4", True)
    report = (build / "memory.txt").read_text()
    assert f"+ heap {HEAP:,} + stack reserved" in report, report
    plain = (sdks("watch-m4", False) / "memory.txt").read_text()

    def ram(text):
        return int(next(line for line in text.splitlines() if line.strip().startswith("RAM")).split()[1].replace(",", ""))
    assert ram(report) == ram(plain) + HEAP
    program = make("printf", build, tmp_path / "out")
    nm = subprocess.run(["arm-none-eabi-nm", str(program)], capture_output=True, text=True, check=True).stdout
    sym = {line.split()[2]: int(line.split()[0], 16) for line in nm.splitlines() if len(line.split()) == 3}
    assert sym["__heap_end"] - sym["__heap_start"] == HEAP and sym["__heap_start"] >= sym["__bss_end"]
    lines = run_printf("watch-m4", build, program, tmp_path, board_runner, alloc=HEAP + 1)
    assert f"malloc({HEAP + 1}): NULL (ENOMEM)" in lines and any(line.startswith("p[0] = ") for line in lines)


def test_needle_firmware_stays_heap_free(sdks):
    """The system calls are in libneedle_board.a only: the needle firmware of the same build
    links no _sbrk, no malloc (the post-link check would refuse one), and uses newlib-nano."""
    build = sdks("watch-m4", True)
    members = subprocess.run(["arm-none-eabi-ar", "t", str(build / sdk.SDK_DIR / "lib" / "libneedle_board.a")],
                             capture_output=True, text=True, check=True).stdout.split()
    assert "syscalls.o" in members
    nm = subprocess.run(["arm-none-eabi-nm", str(build / "needle.elf")], capture_output=True, text=True,
                        check=True).stdout
    kinds = {line.split()[-1]: line.split()[-2] for line in nm.splitlines()}
    assert not set(kinds) & {"_sbrk", "malloc", "_malloc_r", "_write", "exit"}
    assert kinds["hal_libc_exit"] == "w"          # hal_main's weak reference, never defined here
    libs = (build / sdk.SDK_DIR / "lib" / "pkgconfig" / "needle-board.pc").read_text()
    assert "-Wl,--undefined=_write" in libs and "nano.specs" not in libs


@pytest.mark.parametrize("value, message", [
    ("-8", "heap_bytes (the C library's heap for a program of your own; 0: none) must be a non-negative multiple of 8"),
    ("12", "must be a non-negative multiple of 8"),
    ('"big"', "'heap_bytes' must be an integer"),
])
def test_board_file_refuses_a_bad_heap(board_error, value, message):
    assert message in board_error("watch-m4", lambda t: t.replace("\nstack_bytes = ", f"\nheap_bytes = {value}\nstack_bytes = "))


def test_heap_is_for_bare_metal_boards(board_error):
    assert "stack_bytes, heap_bytes and memory.regions are for bare-metal boards" in board_error(
        "rpi-zero", lambda t: t.replace("\n[memory]", "heap_bytes = 4096\n\n[memory]", 1))


def test_examples_build_with_cmake(sdks, tiny_path, tmp_path, board_runner):
    """examples/printf (watch-m4, with a heap), examples/api and examples/tools (host SDKs with
    their tool lists) build with their CMakeLists.txt and run."""
    build = sdks("watch-m4", True)
    program = cmake("printf", build, tmp_path / "printf")
    lines = run_printf("watch-m4", build, program, tmp_path, board_runner)
    assert f"malloc({ALLOC}): ok" in lines

    api_build = tmp_path / "api-sdk"
    scons("board=host", f"archive={tiny_path}", f"build={api_build}", f"tools={ROOT / 'demo' / 'tools.json'}", "lib=1")
    api = cmake("api", api_build, tmp_path / "api")
    got = subprocess.run([str(api), "call", "set a timer for ten minutes"], capture_output=True, text=True)
    assert got.returncode == 0 and got.stdout.startswith("{"), got.stdout + got.stderr

    tools_build = tmp_path / "tools-sdk"       # the small archive: room for the tool list
    scons("board=host", f"archive={ROOT / 'host_tests' / 'golden' / 'small' / 'archive.cact'}", f"build={tools_build}",
          f"tools={EXAMPLES / 'tools' / 'tools.json'}", "lib=1")
    tools = cmake("tools", tools_build, tmp_path / "tools")
    got = subprocess.run([str(tools), "turn on the kitchen lights", "96", "0"], capture_output=True, text=True)
    assert got.returncode == 0 and got.stdout, got.stdout + got.stderr
