"""bench.profile: per-function instruction counts of a decode step under the board's
emulator (docs/benchmarks.md): the log parser on a log written by hand, and a real run whose
per-function counts must add up to the instruction count bench.host measures on its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import host, profile
from generator.build import boards
from host_tests.scons_run import scons

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "host_tests" / "golden" / "tiny" / "archive.cact"

LOG = b"""\
IN: main
0x00010000:  e3a00000  mov r0, #0
0x00010004:  e3a01000  mov r1, #0
0x00010008:  ea000000  b #0x10010

Trace 0: 0x7f0000000100 [00000480/00010000/00000000/00000200] main
IN: nk_dot
0x00010010:  e0800001  add r0, r0, r1
0x00010014:  e2511001  subs r1, r1, #1

Trace 0: 0x7f0000000200 [00000480/00010010/00000000/00000200] nk_dot
Trace 0: 0x7f0000000200 [00000480/00010010/00000000/00000200] nk_dot
Trace 0: 0x7f0000000100 [00000480/00010000/00000000/00000200] main
IN:
0x00020000:  e12fff1e  bx lr

Trace 0: 0x7f0000000100 [00000480/00020000/00000000/00000200]
"""


def test_function_counts_from_a_written_log(tmp_path):
    log = tmp_path / "exec.log"
    log.write_bytes(LOG)
    counts = host.block_counts(str(log))
    # main's block (3) twice, nk_dot's (2) twice; a block retranslated at a reused host
    # address takes its new length (1), and a block without a symbol is counted under "?"
    assert counts == {"main": 6, "nk_dot": 4, "?": 1}
    assert sum(counts.values()) == host.count_log(str(log))
    assert host.block_counts(str(log), within="nk_dot") == {0x10010: 4}   # by guest address


CALL_LOG = b"""\
IN: main
0x00010000:  e3a00000  mov r0, #0
0x00010004:  eb000003  bl #0x10020

Trace 0: 0x7f0000000100 [00000480/00010000/00000000/00000200] main
IN: __addsf3
0x00010020:  e0800001  add r0, r0, r1
0x00010024:  e12fff1e  bx lr

Trace 0: 0x7f0000000200 [00000480/00010020/00000000/00000200] __addsf3
IN: main
0x00010008:  eb000004  bl #0x10020

Trace 0: 0x7f0000000300 [00000480/00010008/00000000/00000200] main
Trace 0: 0x7f0000000200 [00000480/00010020/00000000/00000200] __addsf3
Trace 0: 0x7f0000000300 [00000480/00010008/00000000/00000200] main
Trace 0: 0x7f0000000200 [00000480/00010020/00000000/00000200] __addsf3
Trace 0: 0x7f0000000200 [00000480/00010020/00000000/00000200] __addsf3
"""


def test_call_counts_from_a_written_log(tmp_path):
    log = tmp_path / "exec.log"
    log.write_bytes(CALL_LOG)
    counts = host.call_counts(str(log), {0x10020: "__addsf3"})
    # one call from main's first block (its last instruction, the bl at 0x10004), two from
    # the block at 0x10008; re-entering the entry from __addsf3 itself is not a call
    assert counts == {(0x10004, "main", "__addsf3"): 1, (0x10008, "main", "__addsf3"): 2}
    assert host.call_counts(str(log), {0x10024: "nowhere"}) == {}


def test_profile_adds_up_to_the_instruction_count(tmp_path, capsys, board_runner):
    board = boards.load("rpi-zero2")
    why = boards.missing_tools(board, run=True)
    if why:
        pytest.skip(why)
    build = tmp_path / "rpi-zero2"
    scons("board=rpi-zero2", f"archive={TINY}", f"build={build}")
    assert profile.main(["--board", "rpi-zero2", "--build", str(build), "--tokens", "4"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    step, _ = host.per_token(board_runner(board, build / "needle"), 4)
    assert report["instructions_per_step"] == step
    functions = report["functions"]
    assert abs(sum(functions.values()) - step) <= len(functions)     # each rounded on its own
    assert functions["needle_nk_gemv_a8"] > 0 and functions["needle_nk_a8_quantize"] > 0


def test_profile_refuses_a_missing_build(tmp_path, capsys):
    assert profile.main(["--board", "rpi-zero2", "--build", str(tmp_path / "none"), "--tokens", "4"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("profile: error:") and len(err.splitlines()) == 1
