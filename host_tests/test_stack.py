"""The stack on bare metal (firmware/baremetal/startup.c, templates/link.ld.j2,
generator/build/elfcheck.py): the guard below the stack trips on an overflow (an MPU region
on the Cortex-M4 and M7, MSPLIM on the Cortex-M55, a PMP region on RV32), the worst-stack figure counts library
functions (read from the image's disassembly), and the post-link check refuses a stack
smaller than the deepest path plus the exception reserve."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from generator.build import boards, elfcheck
from generator.codegen import pipeline
from generator.errors import CactError
from host_tests.scons_run import scons, env_with_boards
from host_tests.tiny_firmware import build_tiny

ROOT = Path(__file__).resolve().parent.parent
ARCHIVE = ROOT / "host_tests" / "golden" / "tiny" / "archive.cact"
OVERFLOW = "raise stack_bytes in the board file"

OVERFLOW_MAIN = r"""
#include "hal.h"
/* unbounded recursion, 64 bytes of its own per call: runs into the stack guard */
static volatile unsigned deepest;
__attribute__((noinline)) static unsigned dive(unsigned n)
{
    volatile unsigned char pad[64];
    pad[0] = (unsigned char)n;
    deepest = n;
    if (n == 0xFFFFFFFFu) return pad[0];
    return dive(n + 1) + pad[0];
}
int main(int argc, char **argv)
{
    (void)argc; (void)argv;
    hal_printf("about to overflow\n");
    return (int)dive(0);
}
"""


def symbols(board: dict, elf: Path) -> dict:
    nm = subprocess.run([board["toolchain_prefix"] + "nm", str(elf)], capture_output=True, text=True,
                        check=True).stdout
    return {line.split()[2]: int(line.split()[0], 16) for line in nm.splitlines() if len(line.split()) == 3}


@pytest.mark.parametrize("name, guard, first", [
    ("watch-m4", "mpu", "memory management fault (exception 4)"),
    ("watch-m7", "mpu", "memory management fault (exception 4)"),
    ("watch-m55", "msplim", "hard fault (exception 3)"),      # STKOF: a usage fault, escalated
])
def test_stack_guard_trips_on_overflow(name, guard, first, tmp_path, board_runner):
    board = boards.load(name)
    why = boards.missing_tools(board, run=True)
    if why:
        pytest.skip(why)
    assert pipeline.stack_guard_kind(board) == guard
    elf = build_tiny(board, OVERFLOW_MAIN, tmp_path)
    sym = symbols(board, elf)
    bottom = sym["__stack_bottom"]
    assert sym["__stack_top"] - bottom == board["stack_bytes"]
    assert sym["__stack_guard_end"] == bottom and sym["__fault_stack_top"] <= sym["__stack_guard_start"]
    if guard == "mpu":      # PMSAv7: a power of two, aligned to its size
        size = bottom - sym["__stack_guard_start"]
        assert size == pipeline.MPU_STACK_GUARD_BYTES and sym["__stack_guard_start"] % size == 0
    else:
        assert sym["__stack_guard_start"] == bottom
    archive = str(ARCHIVE) if board["archive"]["placement"] == "partition" else None
    proc = board_runner(board, elf, archive).run([], timeout=600, cwd=tmp_path)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert proc.stdout == "about to overflow\n"
    lines = proc.stderr.splitlines()
    assert lines[0] == f"needle: fault: {first}"
    assert lines[1].startswith("needle: fault: stack overflow (sp=0x") and lines[1].endswith(OVERFLOW)
    sp = int(lines[1].split("sp=0x")[1].split()[0], 16)
    assert lines[1] == (f"needle: fault: stack overflow (sp=0x{sp:x} at or below the stack's bottom "
                        f"0x{bottom:x}): {OVERFLOW}")
    # the core had no room to stack the registers: the dump says so instead of printing them
    assert lines[2].startswith("needle: fault: the core could not stack r0-r3")
    assert lines[3].startswith("needle: fault: cfsr=0x") and len(lines) == 4
    cfsr = int(lines[3].split("cfsr=0x")[1].split()[0], 16)
    if guard == "mpu":
        assert sym["__stack_guard_start"] <= sp < bottom
        assert cfsr & (1 << 1) and cfsr & (1 << 4)      # DACCVIOL, MSTKERR
        mmfar = int(lines[3].split("mmfar=0x")[1].split()[0], 16)
        assert sym["__stack_guard_start"] <= mmfar < bottom
    else:
        assert sp == bottom and cfsr & (1 << 20)        # STKOF; SP left at the limit


@pytest.mark.parametrize("name", ["esp32-c6-virt", "esp32-p4-virt"])
def test_pmp_stack_guard_trips_on_overflow(name, tmp_path, board_runner):
    """RV32 (startup_riscv.c): a locked PMP entry with no permissions below the stack; the first
    store into it is a store access fault, dumped from the trap handler's own stack."""
    board = boards.load(name)
    why = boards.missing_tools(board, run=True)
    if why:
        pytest.skip(why)
    assert pipeline.stack_guard_kind(board) == "pmp"
    elf = build_tiny(board, OVERFLOW_MAIN, tmp_path)
    sym = symbols(board, elf)
    bottom, guard = sym["__stack_bottom"], sym["__stack_guard_start"]
    assert sym["__stack_top"] - bottom == board["stack_bytes"]
    assert sym["__stack_guard_end"] == bottom and sym["__fault_stack_top"] <= guard
    size = bottom - guard        # NAPOT: a power of two, aligned to its size
    assert size == pipeline.MPU_STACK_GUARD_BYTES and guard % size == 0
    proc = board_runner(board, elf, None).run([], timeout=600, cwd=tmp_path)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert proc.stdout == "about to overflow\n"
    lines = proc.stderr.splitlines()
    assert lines[0] == "needle: fault: store access fault (mcause 7)" and len(lines) == 3
    sp = int(lines[1].split("sp=0x")[1].split()[0], 16)
    assert guard <= sp < bottom
    assert lines[1] == (f"needle: fault: stack overflow (sp=0x{sp:x} at or below the stack's bottom "
                        f"0x{bottom:x}): {OVERFLOW}")
    mtval = int(lines[2].split("mtval=0x")[1].split()[0], 16)
    assert lines[2].startswith("needle: fault: mepc=0x") and guard <= mtval < bottom


# --- the worst-stack figure and the budget ---------------------------------------------------

@pytest.fixture(scope="module")
def m7_build(tmp_path_factory):
    board = boards.load("watch-m7")
    why = boards.missing_tools(board)
    if why:
        pytest.skip(why)
    build = tmp_path_factory.mktemp("m7")
    scons("board=watch-m7", f"archive={ARCHIVE}", f"build={build}")
    return board, build


def test_worst_stack_counts_library_functions(m7_build):
    board, build = m7_build
    own = elfcheck.worst_stack(str(build / "obj"))
    disasm = elfcheck.disassemble(str(build / "needle.elf"), board["toolchain_prefix"] + "objdump")
    # exp/log/sin/cos are the engine's own f32 code (docs/numerics.md §2.1), so no library
    # function (libm's cos > __kernel_rem_pio2 once) lies on the image's deepest path; the
    # RMS norm's call to newlib's sqrtf (errno path) shows a library frame being counted
    assert disasm.frame["sqrtf"] > 0
    norm = elfcheck.worst_stack(str(build / "obj"), disasm, roots=("needle_nk_zc_rmsnorm",))
    bare = elfcheck.worst_stack(str(build / "obj"), roots=("needle_nk_zc_rmsnorm",))
    assert norm.library_functions == ["sqrtf"] and norm.library == disasm.frame["sqrtf"]
    assert bare.library == 0 and norm.bytes == bare.bytes + norm.library
    fig = elfcheck.worst_stack(str(build / "obj"), disasm)
    assert own.library == 0 and fig.bytes >= own.bytes and fig.own + fig.library == fig.bytes
    # the memory report says which figure is which
    report = (build / "memory.txt").read_text()
    assert (f"(deepest call path uses {fig.bytes:,}: own code {fig.own:,} + library {fig.library:,})"
            in report)
    assert f"own code alone: {own.bytes:,})" in report
    assert " > ".join(fig.path) in next(line for line in report.splitlines() if "worst stack path" in line)
    assert "stack guard: MPU region, 1,024 bytes below the stack" in report


def test_only_relocated_words_are_function_pointers(m7_build):
    """The image keeps its relocations (-Wl,--emit-relocs), so the functions called through a
    pointer are exactly those whose address the code stores: the CLI's token hook, its
    envelope writer's output callback, the judge's message sink (needle_envelope_judge writes
    the confidence through the envelope's number writer) and the --bench SysTick handler.  A number in a table that happens to equal a function's address
    (weights, tokenizer tables) is not one; with the older word scan a Needle 3 archive's
    table made main look address-taken and refused the build as recursive."""
    board, build = m7_build
    disasm = elfcheck.disassemble(str(build / "needle.elf"), board["toolchain_prefix"] + "objdump")
    assert disasm.address_taken == {"cli_token", "out_put", "tb_sink", "systick_wrap"}
    # indirect calls are bounded by the functions whose address the image takes (the CLI's hook)
    assert "cli_token" in disasm.address_taken and "needle_generate_ids" in disasm.indirect


def test_budget_refuses_a_too_small_stack(m7_build, monkeypatch):
    board, build = m7_build
    rep = elfcheck.check(str(build / "needle.elf"), str(ARCHIVE), board, obj_dir=str(build / "obj"))
    need = rep.stack_bytes + rep.stack_reserve
    assert rep.stack_reserve >= 2 * elfcheck.EXCEPTION_FRAME_BYTES
    small = dict(board, name="watch-m7-small")
    small_sections = {**elfcheck._section_sizes(str(build / "needle.elf")), ".stack": need - 8}
    monkeypatch.setattr(elfcheck, "_section_sizes", lambda path: small_sections)   # a stack 8 bytes short
    with pytest.raises(CactError) as err:
        elfcheck.check(str(build / "needle.elf"), str(ARCHIVE), small, obj_dir=str(build / "obj"))
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("stack over budget on board watch-m7-small: ")
    assert f"= {need:,} > stack_bytes {need - 8:,}" in msg and "raise stack_bytes" in msg


def test_budget_refuses_a_board_file_with_too_small_stack_bytes(board_dir, tmp_path):
    """The same through scons and a board file: one line, the image deleted."""
    board = boards.load("watch-m4")
    if boards.missing_tools(board):
        pytest.skip(boards.missing_tools(board))
    text = (board_dir / "watch-m4.toml").read_text().replace('name = "watch-m4"', 'name = "watch-tiny-stack"')
    (board_dir / "watch-tiny-stack.toml").write_text(text.replace("stack_bytes = 16384", "stack_bytes = 1024"))
    env = env_with_boards(board_dir, tmp_path)     # scons runs in a child process: it reads the copy too
    proc = scons("board=watch-tiny-stack", f"archive={ARCHIVE}", f"build={tmp_path / 'b'}", check=False, env=env)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("scons: error:")]
    assert len(errors) == 1, proc.stderr
    assert "stack over budget on board watch-tiny-stack: the deepest call path uses" in errors[0]
    assert "> stack_bytes 1,024; raise stack_bytes in boards/watch-tiny-stack.toml to at least" in errors[0]
    assert not (tmp_path / "b" / "needle.elf").exists()


# --- the disassembly frame parser --------------------------------------------------------------

@pytest.mark.parametrize("mnemonic, operands, delta", [
    ("push", "{r4, r5, r6, lr}", 16),
    ("push.w", "{r4, r5, r6, r7, r8, r9, sl, fp, lr}", 36),
    ("stmdb", "sp!, {r4, r5, r6, r7, r8, r9, sl, fp, lr}", 36),
    ("stmdb", "r1!, {r2, r3}", 0),                     # not the stack
    ("vpush", "{d8-d11}", 32),
    ("vpush", "{s16-s17}", 8),
    ("vstmdb", "sp!, {d8-d15}", 64),
    ("sub", "sp, #12", 12),
    ("sub.w", "sp, sp, #588\t@ 0x24c", 588),
    ("subw", "sp, sp, #1092\t@ 0x444", 1092),
    ("sub", "sp, sp, #8", 8),
    ("sub.w", "sp, sp, r3", None),                     # a variable-length array: unbounded
    ("str.w", "lr, [sp, #-4]!", 4),
    ("strd", "r4, r5, [sp, #-16]!", 16),
    ("add", "sp, #16", 0),
    ("sub", "r0, sp, #16", 0),
    ("ldr", "r3, [sp, #8]", 0),
])
def test_frame_delta(mnemonic, operands, delta):
    assert elfcheck.frame_delta(mnemonic, operands.split("\t")[0]) == delta


def test_parse_disassembly_frames_calls_and_address_taken():
    text = """
00001000 <lib_leaf>:
    1000:\tpush\t{r4, lr}
    1002:\tvpush\t{d8}
    1006:\tsub\tsp, #16
    1008:\tadd\tsp, #16
    100a:\tpop\t{r4, pc}

0000100c <lib_mid>:
    100c:\tstmdb\tsp!, {r4, r5, r6, r7, r8, lr}
    1010:\tbl\t1000 <lib_leaf>
    1014:\tbeq.n\t1018 <lib_mid+0xc>
    1016:\tb.w\t1020 <lib_tail>
    1018:\tblx\tr3
    101a:\tldr\tr0, [pc, #4]\t@ (1020 <lib_tail>)
    101c:\tb.n\t100c <lib_mid>
    101e:\tnop
    1020:\t.word\t0x00001021

00001020 <lib_tail>:
    1020:\tsub.w\tsp, sp, r2
    1024:\tbx\tlr
"""
    d = elfcheck.parse_disassembly(text)
    assert d.frame == {"lib_leaf": 8 + 8 + 16, "lib_mid": 24, "lib_tail": 0}
    assert d.callees["lib_mid"] == {"lib_leaf", "lib_tail"}       # a branch to its own start is a loop
    assert d.indirect == {"lib_mid"} and d.dynamic == {"lib_tail"}
    assert d.address_taken == {"lib_tail"}                         # the literal word 0x1021 (Thumb bit)
