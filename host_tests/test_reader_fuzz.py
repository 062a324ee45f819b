"""Property tests: `reader.read` on arbitrary input returns an Archive or raises CactError.

Nothing else may escape (no struct.error, IndexError, ValueError, OverflowError,
MemoryError, numpy errors), no single call may take 2 s or allocate more than 64 MB
(docs/spec/cact-format.md §13: "all arithmetic on sizes and offsets ... with overflow checks before
any allocation or indexing").  Inputs:

(a) random bytes, bare or behind a valid tag / a valid header + codebook prefix;
(b) 1–8 random overwrites, truncations and insertions applied to the valid `tiny`,
    ternary and Needle 3 archives;
(c) header and directory fields overwritten with "interesting" values (0, 1, 2^31,
    2^32-1, 2^63, 2^64-1, sizes near the file length, ...), randomly and as a sweep.

The CLI is checked on a few fixed broken files: one line on stderr, nothing on stdout,
exit status 2, no traceback.

Budget: about 30 s in total (hypothesis example counts are set below).
"""

from __future__ import annotations

import math
import signal
import struct
import subprocess
import sys
import tracemalloc
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import archive_edit as ae
from generator.archive import reader
from generator.commands import synth
from generator.errors import CactError
from generator.archive.format import HEADER_FIELDS, TAG_N2, TAG_N3

ROOT = Path(__file__).resolve().parent.parent
HANG_ALARM = 10.0         # a read still running after this is a hang (or a blow-up): fail.
                          # Reads take milliseconds; no tighter limit, since a shared
                          # machine's timings prove nothing (docs/testing.md)
MEMORY_LIMIT = 64 << 20   # bytes traced by tracemalloc during one read

FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                      HealthCheck.data_too_large])


class Hang(Exception):
    pass


@contextmanager
def alarm(seconds: float):
    if not hasattr(signal, "SIGALRM"):  # no interval timers here: rely on the elapsed check
        yield
        return

    def on_alarm(signum, frame):
        raise Hang(f"reader.read did not return within {seconds} s")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def checked_read(data: bytes, *, memory: bool = False, check_data: bool = True) -> str:
    """Read `data`; return "ok" or "error"; fail on anything else, a hang or huge memory."""
    if memory:
        tracemalloc.start()
    try:
        with alarm(HANG_ALARM):
            try:
                reader.read(data, check_data=check_data)
                outcome = "ok"
            except CactError as err:
                msg = str(err)
                assert msg and "\n" not in msg, repr(msg)
                outcome = "error"
    finally:
        if memory:
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
    if memory:
        assert peak < MEMORY_LIMIT, f"reader.read allocated {peak} bytes on a {len(data)}-byte input"
    return outcome


# ---- the seeds ---------------------------------------------------------------------------------
# Built once at import: hypothesis' @given cannot take session fixtures per example cheaply.

TINY = synth.synthesize("tiny", 1)
TERNARY = synth.synthesize("tiny", 1, bitmap="default=1.58")
N3 = ae.build_n3_tiny()
SEEDS = {"tiny": TINY, "ternary": TERNARY, "n3": N3}


def test_seeds_are_valid():
    for data in SEEDS.values():
        assert checked_read(data, memory=True) == "ok"


# ---- (a) random bytes ----------------------------------------------------------------------------

PREFIXES = [b"", struct.pack("<I", TAG_N2), struct.pack("<I", TAG_N3), TINY[:120], TINY[:232],
            N3[:196], N3[:308], TINY[:2688]]


@settings(FUZZ, max_examples=300)
@given(prefix=st.sampled_from(PREFIXES), body=st.binary(max_size=4096))
def test_random_bytes(prefix, body):
    checked_read(prefix + body)


@settings(FUZZ, max_examples=60)
@given(body=st.binary(min_size=0, max_size=64))
def test_random_bytes_memory(body):
    for prefix in (b"", TINY[:120], TINY[:2688]):
        checked_read(prefix + body, memory=True)


# ---- (b) random mutations of valid archives ---------------------------------------------------

def _position(size: int):
    # half the edits land in the header/codebook/directory, where the structure lives
    return st.one_of(st.integers(0, min(size, 2800)), st.integers(0, size))


def _ops(size: int):
    overwrite = st.tuples(st.just("overwrite"), _position(size), st.binary(min_size=1, max_size=8))
    truncate = st.tuples(st.just("truncate"), _position(size), st.just(b""))
    insert = st.tuples(st.just("insert"), _position(size), st.binary(min_size=1, max_size=16))
    return st.lists(st.one_of(overwrite, overwrite, overwrite, truncate, insert),
                    min_size=1, max_size=8)


def apply_ops(data: bytes, ops) -> bytes:
    buf = bytearray(data)
    for kind, pos, payload in ops:
        pos = min(pos, len(buf))
        if kind == "overwrite":
            buf[pos:pos + len(payload)] = payload
        elif kind == "truncate":
            del buf[pos:]
        else:
            buf[pos:pos] = payload
    return bytes(buf)


@settings(FUZZ, max_examples=400)
@given(seed=st.sampled_from(sorted(SEEDS)), data=st.data())
def test_mutated_archives(seed, data):
    base = SEEDS[seed]
    ops = data.draw(_ops(len(base)), label="ops")
    mutated = apply_ops(base, ops)
    checked_read(mutated)
    checked_read(mutated, check_data=False)


# ---- (c) interesting values in header and directory fields -------------------------------------

def interesting(size: int) -> list[int]:
    near = [size - 64, size - 1, size, size + 1, size + 64, -(-size // 64) * 64, size // 2,
            size - 232, (size - 232) // 44, (size - 232) // 44 + 1]
    return sorted({0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 63, 64, 65, 127, 128, 129, 255, 256,
                   2**15, 2**16 - 1, 2**16, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**32 + 64,
                   2**48, 2**63 - 1, 2**63, 2**64 - 64, 2**64 - 1, *[v for v in near if v >= 0]})


FLOATS = [0.0, -0.0, 1.0, -1.0, 1e-45, 3.4e38, math.inf, -math.inf, math.nan, 100000.0]
WIDTH = {"<B": 8, "<H": 16, "<I": 32, "<Q": 64}


def set_field(data: bytes, target, value, gen: int | None = None) -> bytes:
    """target: ("header", name) or ("record", index, field).

    Integers are reduced modulo the field width; a float is written as its f32 value into
    rope_theta and as its f32 bit pattern into any integer field.  `gen` selects the layout
    (default: from the tag, which an earlier edit may have destroyed).
    """
    gen = ae.generation(data) if gen is None else gen
    if isinstance(value, float):
        value_bits = struct.unpack("<I", struct.pack("<f", value))[0]
    else:
        value_bits = value
    if target[0] == "header":
        name = target[1]
        off = ae.header_offset(name, gen)
        if name == "rope_theta":
            f = value if isinstance(value, float) else float(value % 2**32)
            return ae.patch_bytes(data, off, struct.pack("<f", f))
        return ae.patch_bytes(data, off, struct.pack("<I", value_bits % 2**32))
    _, index, field = target
    off, fmt = ae.RECORD_LAYOUT[field]
    return ae.patch_bytes(data, ae.record_offset(index, gen) + off,
                          struct.pack(fmt, value_bits % 2**WIDTH[fmt]))


def _targets(data: bytes):
    gen = ae.generation(data)
    n = ae.get_header(data, "num_tensors", gen)
    header = st.tuples(st.just("header"), st.sampled_from(HEADER_FIELDS[gen]))
    record = st.tuples(st.just("record"), st.integers(0, n - 1), st.sampled_from(list(ae.RECORD_LAYOUT)))
    return st.one_of(header, record, record)


@settings(FUZZ, max_examples=400)
@given(seed=st.sampled_from(sorted(SEEDS)), data=st.data())
def test_interesting_field_values(seed, data):
    base = SEEDS[seed]
    values = st.one_of(st.sampled_from(interesting(len(base))), st.sampled_from(FLOATS),
                       st.integers(0, 2**64 - 1))
    edits = data.draw(st.lists(st.tuples(_targets(base), values), min_size=1, max_size=4),
                      label="edits")
    mutated = base
    for target, value in edits:
        mutated = set_field(mutated, target, value, ae.generation(base))
    checked_read(mutated, memory=True)


def test_header_field_sweep():
    """Every header field of both generations × every interesting value, one at a time."""
    outcomes = {"ok": 0, "error": 0}
    for base in (TINY, N3):
        gen = ae.generation(base)
        values = interesting(len(base)) + FLOATS
        for name in HEADER_FIELDS[gen]:
            for value in values:
                outcomes[checked_read(set_field(base, ("header", name), value))] += 1
    assert outcomes["error"] > outcomes["ok"] > 0


def test_record_field_sweep():
    """Selected records × every directory field × every interesting value (tiny archive)."""
    records = (0, 1, 3, 10, 35, 38, 46, 47, 49, 52, 53, 54)
    values = interesting(len(TINY))
    outcomes = {"ok": 0, "error": 0}
    for index in records:
        for field in ae.RECORD_LAYOUT:
            for value in values:
                outcomes[checked_read(set_field(TINY, ("record", index, field), value),
                                      check_data=False)] += 1
    assert outcomes["error"] > outcomes["ok"] > 0


# ---- the CLI on broken files ---------------------------------------------------------------------

def _cli_cases() -> dict[str, bytes]:
    tok = ae.blobs(TINY)[-1].offset
    return {
        "bad-tag": ae.patch_tag(TINY, 0xDEADBEEF),
        "empty": b"",
        "truncated-in-directory": TINY[:1000],
        "truncated-in-tokenizer": TINY[:-5],
        "nbytes-overflow": ae.patch_record(TINY, 5, nbytes=2**64 - 1),
        "num-tensors-huge": ae.patch_header(TINY, "num_tensors", 2**32 - 1),
        "tokenizer-bad-utf8": ae.patch_bytes(TINY, tok + 24 + 7, b"\xff"),
        "n3-tag-on-n2": ae.patch_tag(TINY, TAG_N3),
        "mutated": apply_ops(TINY, [("overwrite", 300, b"\xff" * 8), ("insert", 5000, b"abc")]),
    }


@pytest.fixture(scope="module")
def broken_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("broken")
    out = {}
    for name, data in _cli_cases().items():
        out[name] = d / f"{name}.cact"
        out[name].write_bytes(data)
    return out


@pytest.mark.parametrize("json_flag", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("name", sorted(_cli_cases()))
def test_cli_inspect_broken_file(broken_files, name, json_flag):
    cmd = [sys.executable, "-m", "generator", "inspect", str(broken_files[name])]
    if json_flag:
        cmd.append("--json")
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and proc.stderr.endswith("\n"), proc.stderr
    assert lines[0].startswith("error: ")
    # the same message the library raises
    with pytest.raises(CactError) as info:
        reader.read(broken_files[name])
    assert lines[0] == f"error: {info.value}"
