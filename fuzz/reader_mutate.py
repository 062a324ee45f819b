#!/usr/bin/env python3
"""Mutation fuzzer of the Python archive reader (issue 14 §4: hostile archives).

    python fuzz/reader_mutate.py [--cases N] [--seed S] [--jobs J] [--out DIR]
                                 [--archive FILE ...] [--no-synth] [--replay FILE ...]

Takes real archives (host_tests/golden/*/archive.cact, plus a Needle 3 tiny archive built
with the writer and a ternary `synth --preset tiny`, unless --no-synth), applies 1-4 random
mutations per case and calls `reader.read(data)`.  A case FAILS when

  * anything but generator.errors.CactError escapes (an accepted mutant is fine),
  * one call takes more than --time-limit seconds of CPU (1 s; timed again without
    tracemalloc before it counts; a hard wall-clock alarm stops a call at 10 s),
  * tracemalloc's peak during the call exceeds --mem-limit MB (64 MB; the archives are
    at most ~1 MB, so anything near that is an allocation driven by a hostile size field).

Mutations: bit flips; random byte runs; header u32 fields set to boundary values
(0, 1, 2^31-1, 2^31, 2^32-1, the file size, the value +-1, ...) and rope_theta to
NaN/inf/0/-0/denormals; codebook entries to NaN/inf/+-1/swapped; directory record fields
(dtype, ndim, padding, shape[k], offset, nbytes, group, bits) set to boundary values (64-bit
fields also 2^63, 2^64-1, the file size, another record's value); records duplicated over
another, swapped, inserted, deleted (num_tensors adjusted); truncation and extension at random
points and at every region boundary (tag, header, codebook, directory, each blob start/end,
tokenizer header, tokenizer piece records) +-1; zero/random insertions at those boundaries;
tokenizer blob mutations (header ids / n_pieces / flags to boundary values, piece score
NaN/inf, type 0..255, surface length 0/+-1/0xFFFF, invalid UTF-8 surfaces, duplicated
surfaces, broken <0xHH> byte pieces, a resized blob with the last record's nbytes fixed up);
tensor payload poisoning (f16/f32 NaN, negative CQ norms, ternary crumb 2, permutation
repeats).

Every case draws from its own generator seeded with (--seed, case number), so a case is
reproducible alone and the result does not depend on --jobs.  Prints cases/s, the numbers of
accepted and refused mutants, and the distinct refusals (the error's `where` with digits
folded to N plus the first word of its message).  A failing case is saved as
OUT/fail-SEED-CASE.cact with a .txt holding the mutation list and the traceback; exit status
1 if any case failed.  `--replay FILE ...` runs reader.read on saved files.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import re
import signal
import struct
import sys
import time
import traceback
import tracemalloc
from collections import Counter
from pathlib import Path

FUZZ = Path(__file__).resolve().parent
ROOT = FUZZ.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from generator.archive import reader  # noqa: E402
from generator.archive.format import (CODEBOOK_LEN, HEADER_BYTES, HEADER_FIELDS,  # noqa: E402
                                      RECORD_BYTES, TAGS)
from generator.errors import CactError  # noqa: E402

GOLDEN = ROOT / "host_tests" / "golden"

U32_EDGES = (0, 1, 2, 3, 7, 8, 63, 64, 127, 128, 255, 256, 0xFFFF, 0x10000, 0x7FFFFFFF,
             0x80000000, 0xFFFFFFFE, 0xFFFFFFFF)
U64_EDGES = U32_EDGES + (0x100000000, 2**63 - 1, 2**63, 2**64 - 64, 2**64 - 1)
F32_EDGES = (math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 1e-45, 1.17549435e-38,
             3.4028235e38, 0.999999940395, -0.999999940395)
F16_BAD = (b"\x00\x7e", b"\x00\x7c", b"\x00\xfc", b"\xff\xff")   # NaN, inf, -inf, NaN


TRACE_MAX = 256 * 1024   # archives up to this size run under tracemalloc


class Hang(BaseException):
    """Raised by the hard alarm; a BaseException so that no `except Exception` eats it."""


# --------------------------------------------------------------------------------------------
# Base archives and their layout

class Base:
    """A valid archive with the offsets the mutators aim at."""

    def __init__(self, name: str, data: bytes):
        self.name, self.data = name, bytes(data)
        # tracemalloc multiplies the reader's time by ~10 on the 8k-piece tokenizers, so the
        # allocation watch runs on the small (tiny-geometry) archives only
        self.traced = len(self.data) <= TRACE_MAX
        a = reader.read(self.data)
        self.gen = a.generation
        self.hdr_bytes = HEADER_BYTES[self.gen]
        self.fields = HEADER_FIELDS[self.gen]
        self.cb_at = self.hdr_bytes
        self.dir_at = self.hdr_bytes + 4 * CODEBOOK_LEN
        self.n = len(a.records)
        self.dir_end = self.dir_at + RECORD_BYTES * self.n
        self.records = [(r.offset, r.nbytes, r.dtype, r.bits, r.role) for r in a.records]
        self.tok_at, self.tok_len = self.records[-1][0], self.records[-1][1]
        # piece record starts inside the tokenizer blob (absolute offsets)
        self.pieces = []
        pos = self.tok_at + 24
        for _ in range(a.tokenizer.n_pieces):
            length = struct.unpack_from("<H", self.data, pos + 5)[0]
            self.pieces.append((pos, length))
            pos += 7 + length
        assert pos == self.tok_at + self.tok_len, name
        bounds = {0, 4, self.hdr_bytes, self.dir_at, self.dir_end, len(self.data),
                  self.tok_at + 24}
        for off, nb, *_ in self.records:
            bounds |= {off, off + nb}
        for p, _ in self.pieces[:8] + self.pieces[-8:]:
            bounds.add(p)
        self.bounds = sorted(bounds)

    def record_at(self, i: int) -> int:
        return self.dir_at + RECORD_BYTES * i


def load_bases(paths=None, synth: bool = True) -> list[Base]:
    bases = []
    for p in paths or sorted(GOLDEN.glob("*/archive.cact")):
        p = Path(p)
        bases.append(Base(p.parent.name if p.name == "archive.cact" else p.stem, p.read_bytes()))
    if synth and not paths:
        sys.path.insert(0, str(ROOT / "host_tests"))
        from generator.commands import synth as synth_cmd
        import archive_edit
        bases.append(Base("synth-n3-tiny", archive_edit.build_n3_tiny(seed=7, heads=(1, 2, 3))))
        bases.append(Base("synth-tiny-ternary", synth_cmd.synthesize("tiny", 3, bitmap="default=1.58")))
    return bases


# --------------------------------------------------------------------------------------------
# Mutators: each takes (rng, base, data: bytearray) and returns a short description.  They
# compute positions from `base` (the valid layout); once a mutation shifted or shortened the
# data, later ones clamp to what is left.

def _put(data: bytearray, off: int, raw: bytes) -> None:
    if off < 0:
        return
    end = min(len(data), off + len(raw))
    if off < end:
        data[off:end] = raw[:end - off]


def _u32_value(rng, old: int, size: int) -> int:
    pick = rng.random()
    if pick < 0.6:
        return rng.choice(U32_EDGES)
    if pick < 0.8:
        return (old + rng.choice((-2, -1, 1, 2))) & 0xFFFFFFFF
    if pick < 0.9:
        return min(0xFFFFFFFF, rng.choice((size, size // RECORD_BYTES, size - 1, size + 1)))
    return rng.getrandbits(32)


def _u64_value(rng, old: int, size: int, others) -> int:
    pick = rng.random()
    if pick < 0.5:
        return rng.choice(U64_EDGES)
    if pick < 0.7:
        return max(0, old + rng.choice((-128, -64, -2, -1, 1, 2, 64, 128)))
    if pick < 0.85:
        return rng.choice((size, size - 1, size + 1, size - 64, max(0, size - old), 2**64 - old))
    if pick < 0.95 and others:
        return rng.choice(others)
    return rng.getrandbits(64)


def m_bitflip(rng, b, d):
    n = rng.choice((1, 1, 2, 4, 8))
    # half of the flips land in header + codebook + directory, where they matter most
    hi = b.dir_end if rng.random() < 0.5 else len(d)
    offs = [rng.randrange(min(hi, len(d))) for _ in range(n)] if d else []
    for o in offs:
        d[o] ^= 1 << rng.randrange(8)
    return f"bitflip x{n} @{offs[:3]}"


def m_random_bytes(rng, b, d):
    if not d:
        return "random bytes (empty)"
    o = rng.randrange(len(d))
    raw = bytes(rng.getrandbits(8) for _ in range(rng.choice((1, 2, 4, 8, 16, 64))))
    _put(d, o, raw)
    return f"random {len(raw)} bytes @{o}"


def m_header_field(rng, b, d):
    k = rng.randrange(len(b.fields))
    name, off = b.fields[k], 4 * k
    if name == "rope_theta":
        v = rng.choice(F32_EDGES)
        _put(d, off, struct.pack("<f", v))
        return f"header rope_theta={v!r}"
    if name == "tag" and rng.random() < 0.5:
        v = rng.choice(sorted(TAGS))      # the other generation's tag
    else:
        old = struct.unpack_from("<I", b.data, off)[0]
        v = _u32_value(rng, old, len(b.data))
    _put(d, off, struct.pack("<I", v))
    return f"header {name}={v:#x}"


def m_codebook(rng, b, d):
    k = rng.randrange(CODEBOOK_LEN)
    off = b.cb_at + 4 * k
    if rng.random() < 0.3:
        j = rng.randrange(CODEBOOK_LEN)
        a2, b2 = bytes(d[off:off + 4]), bytes(d[b.cb_at + 4 * j:b.cb_at + 4 * j + 4])
        _put(d, off, b2)
        _put(d, b.cb_at + 4 * j, a2)
        return f"codebook swap {k}<->{j}"
    v = rng.choice(F32_EDGES)
    _put(d, off, struct.pack("<f", v))
    return f"codebook[{k}]={v!r}"


RECORD_FIELDS = (("dtype", 0, "B"), ("ndim", 1, "B"), ("pad", 2, "H"), ("shape0", 4, "I"),
                 ("shape1", 8, "I"), ("shape2", 12, "I"), ("shape3", 16, "I"), ("offset", 20, "Q"),
                 ("nbytes", 28, "Q"), ("group", 36, "I"), ("bits", 40, "I"))


def _pick_record(rng, b) -> int:
    pick = rng.random()
    if pick < 0.2:
        return b.n - 1                       # the tokenizer
    if pick < 0.3:
        return 0
    return rng.randrange(b.n)


def m_record_field(rng, b, d):
    i = _pick_record(rng, b)
    name, at, fmt = rng.choice(RECORD_FIELDS)
    off = b.record_at(i) + at
    old = struct.unpack_from("<" + fmt, b.data, off)[0]
    size = len(b.data)
    if fmt == "B":
        v = rng.choice((0, 1, 2, 3, 4, 5, 0x7F, 0x80, 0xFF, old ^ 1, rng.getrandbits(8)))
    elif fmt == "H":
        v = rng.choice((1, 0x8000, 0xFFFF))
    elif fmt == "I":
        v = rng.choice((rng.choice((5, 6, 8, 16, 64, 127, 129, 256)), _u32_value(rng, old, size)))
    else:
        others = [r[0] if name == "offset" else r[1] for r in b.records]
        v = _u64_value(rng, old, size, others)
    _put(d, off, struct.pack("<" + fmt, v))
    return f"record {i} {name}={v:#x}"


def m_record_shuffle(rng, b, d):
    i, j = _pick_record(rng, b), rng.randrange(b.n)
    ri, rj = b.record_at(i), b.record_at(j)
    a = bytes(b.data[ri:ri + RECORD_BYTES])
    c = bytes(b.data[rj:rj + RECORD_BYTES])
    kind = rng.choice(("copy", "swap", "insert", "delete"))
    if kind == "copy":
        _put(d, rj, a)
    elif kind == "swap":
        _put(d, ri, c)
        _put(d, rj, a)
    elif kind == "insert" and len(d) >= b.dir_end:
        d[rj:rj] = a
        n = struct.unpack_from("<I", d, 4)[0]
        if rng.random() < 0.8:
            _put(d, 4, struct.pack("<I", (n + 1) & 0xFFFFFFFF))
    elif kind == "delete" and len(d) >= b.dir_end:
        del d[ri:ri + RECORD_BYTES]
        n = struct.unpack_from("<I", d, 4)[0]
        if rng.random() < 0.8:
            _put(d, 4, struct.pack("<I", (n - 1) & 0xFFFFFFFF))
    return f"record {kind} {i} {j}"


def m_truncate(rng, b, d):
    if rng.random() < 0.5:
        cut = rng.choice(b.bounds) + rng.choice((-1, 0, 0, 1))
    else:
        cut = rng.randrange(len(d) + 1)
    cut = max(0, min(len(d), cut))
    del d[cut:]
    return f"truncate to {cut}"


def m_extend(rng, b, d):
    n = rng.choice((1, 3, 4, 44, 63, 64, 65, 4096))
    fill = bytes(n) if rng.random() < 0.5 else bytes(rng.getrandbits(8) for _ in range(n))
    if rng.random() < 0.5:
        d.extend(fill)
        return f"append {n}"
    at = rng.choice(b.bounds) if rng.random() < 0.6 else rng.randrange(len(d) + 1)
    at = min(at, len(d))
    d[at:at] = fill
    return f"insert {n} @{at}"


def m_tok_header(rng, b, d):
    k = rng.randrange(6)
    at = b.tok_at + (4 * k if k < 5 else 20 + rng.randrange(2))
    if k < 5:
        n_p = len(b.pieces)
        v = rng.choice((0, 1, n_p - 1, n_p, n_p + 1, 0x7FFFFFFF, 0xFFFFFFFF, rng.randrange(n_p)))
        _put(d, at, struct.pack("<I", v & 0xFFFFFFFF))
        return f"tokenizer header u32 {k}={v}"
    v = rng.choice((0, 1, 2, 0xFF))
    _put(d, at, bytes([v]))
    return f"tokenizer flag @{at - b.tok_at}={v}"


def m_tok_piece(rng, b, d):
    i = rng.randrange(len(b.pieces)) if rng.random() < 0.7 else rng.choice((0, len(b.pieces) - 1))
    pos, length = b.pieces[i]
    kind = rng.choice(("score", "type", "length", "utf8", "dup", "byte"))
    if kind == "score":
        v = rng.choice(F32_EDGES)
        _put(d, pos, struct.pack("<f", v))
        return f"piece {i} score={v!r}"
    if kind == "type":
        v = rng.choice((0, 1, 2, 3, 4, 5, 0xFF))
        _put(d, pos + 4, bytes([v]))
        return f"piece {i} type={v}"
    if kind == "length":
        v = rng.choice((0, 1, max(0, length - 1), length + 1, 0x7FFF, 0xFFFF))
        _put(d, pos + 5, struct.pack("<H", v))
        return f"piece {i} length={v}"
    if kind == "utf8":
        bad = rng.choice((b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xe2\x82", b"\x80", b"\xf4\x90\x80\x80"))
        o = pos + 7 + rng.randrange(length)
        _put(d, o, bad[:pos + 7 + length - o])
        return f"piece {i} surface bad utf-8 {bad!r}"
    if kind == "dup":
        same = [j for j, (_, ln) in enumerate(b.pieces) if ln == length and j != i]
        if not same:
            return f"piece {i} dup (none of equal length)"
        j = rng.choice(same)
        pj = b.pieces[j][0]
        _put(d, pos + 7, b.data[pj + 7:pj + 7 + length])
        return f"piece {i} surface := piece {j}"
    byte_pieces = [j for j, (p, ln) in enumerate(b.pieces) if b.data[p + 4] == 4]
    if byte_pieces:
        j = rng.choice(byte_pieces)
        pj, ln = b.pieces[j]
        o = pj + 7 + rng.randrange(ln)
        v = rng.choice(b"0aAfFgG<>x\x00\x7f")
        _put(d, o, bytes([v]))
        return f"byte piece {j} surface byte {o - pj - 7}={v:#x}"
    _put(d, pos + 4, b"\x04")
    return f"piece {i} made BYTE"


def m_tok_resize(rng, b, d):
    """Insert or delete bytes inside the tokenizer blob and fix the last record's nbytes, so
    the file is structurally whole and the tokenizer parser has to find the damage."""
    if len(d) != len(b.data):
        return "tokenizer resize (skipped: size already changed)"
    at = b.tok_at + rng.randrange(b.tok_len)
    if rng.random() < 0.5:
        n = rng.choice((1, 2, 7, 8))
        d[at:at] = bytes(rng.getrandbits(8) for _ in range(n)) if rng.random() < 0.5 else bytes(n)
        delta = n
    else:
        n = min(rng.choice((1, 2, 7, 8)), len(d) - at)
        del d[at:at + n]
        delta = -n
    _put(d, b.record_at(b.n - 1) + 28, struct.pack("<Q", b.tok_len + delta))
    return f"tokenizer resized by {delta} @{at - b.tok_at}"


def m_payload(rng, b, d):
    """Poison one tensor payload: non-finite floats, a negative norm, a ternary crumb 2,
    a repeated permutation entry."""
    i = rng.randrange(b.n - 1)
    off, nb, dtype, bits, role = b.records[i]
    if nb == 0:
        return f"payload {i} empty"
    if dtype == 1:       # FP16
        o = off + 2 * rng.randrange(nb // 2)
        _put(d, o, rng.choice(F16_BAD))
    elif dtype == 2:     # FP32
        o = off + 4 * rng.randrange(nb // 4)
        if role.startswith("hada_p") and rng.random() < 0.5:
            _put(d, o, b.data[off:off + 4] if o != off else b.data[off + 4:off + 8])
        else:
            _put(d, o, struct.pack("<f", rng.choice((math.nan, math.inf, -1.0, 0.5, 1e30))))
    else:                # CQ: a norm near the end, or a packed byte
        if rng.random() < 0.5:
            o = off + nb - 2 * (1 + rng.randrange(min(64, nb // 2)))
            _put(d, o, rng.choice(F16_BAD + (b"\x00\xbc",)))        # -1.0 too
        else:
            o = off + rng.randrange(nb)
            _put(d, o, bytes([0xAA if bits == 5 else rng.getrandbits(8)]))
    return f"payload {i} ({role}) @{o}"


MUTATORS = ((m_bitflip, 3), (m_random_bytes, 2), (m_header_field, 4), (m_codebook, 1),
            (m_record_field, 5), (m_record_shuffle, 2), (m_truncate, 2), (m_extend, 2),
            (m_tok_header, 2), (m_tok_piece, 3), (m_tok_resize, 2), (m_payload, 2))
_FUNCS = [m for m, _ in MUTATORS]
_WEIGHTS = [w for _, w in MUTATORS]


def mutate(rng, base: Base) -> tuple[bytes, list[str]]:
    d = bytearray(base.data)
    steps = []
    for m in rng.choices(_FUNCS, _WEIGHTS, k=rng.choice((1, 1, 1, 2, 2, 3, 4))):
        steps.append(m(rng, base, d))
    return bytes(d), steps


# --------------------------------------------------------------------------------------------
# Running cases

def kind_of(err: CactError) -> str:
    """A refusal's class: `where` with numbers folded, and the first word of the message."""
    where = re.sub(r"\d+", "N", err.where or "-")
    where = re.sub(r"\(.*\)", "(role)", where)
    word = (err.message.split() or ["?"])[0]
    return f"{where}: {re.sub(r'[0-9]+', 'N', word)}"


def _alarm(signum, frame):
    raise Hang()


def run_case(bases, seed: int, case: int, time_limit: float, mem_limit: int):
    """(outcome, kind, detail, data, steps): outcome is 'accepted', 'refused' or 'FAIL'."""
    rng = random.Random(f"{seed}:{case}")
    base = bases[rng.randrange(len(bases))]
    data, steps = mutate(rng, base)
    if base.traced:
        tracemalloc.start()
        start_mem = tracemalloc.get_traced_memory()[0]
    signal.setitimer(signal.ITIMER_REAL, max(10.0, 10 * time_limit))
    t0 = time.process_time()
    outcome, kind, detail = "accepted", None, ""
    try:
        reader.read(data)
    except CactError as e:
        outcome, kind = "refused", kind_of(e)
    except Hang:
        outcome, detail = "FAIL", "hang: stopped by the hard alarm"
    except BaseException as e:            # noqa: BLE001 - anything else is the finding
        if isinstance(e, KeyboardInterrupt):
            raise
        outcome, detail = "FAIL", "".join(traceback.format_exception(e))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        secs = time.process_time() - t0
        peak = 0
        if base.traced:
            peak = tracemalloc.get_traced_memory()[1] - start_mem
            tracemalloc.stop()
    if outcome != "FAIL" and secs > time_limit:
        # CPU time, so other processes do not count; a slow call is timed again without
        # tracemalloc (which slows the reader several times) before it counts as a finding
        t1 = time.process_time()
        try:
            reader.read(data)
        except CactError:
            pass
        secs = time.process_time() - t1
        if secs > time_limit:
            outcome, detail = "FAIL", f"took {secs:.2f} s of CPU untraced (limit {time_limit} s); " \
                                      f"result {kind or 'accepted'}"
    if outcome != "FAIL" and peak > mem_limit * 2**20:
        outcome, detail = "FAIL", f"allocated {peak / 2**20:.1f} MB (limit {mem_limit} MB); " \
                                  f"result {kind or 'accepted'}"
    return outcome, kind, detail, data, [base.name] + steps, secs, peak


def fuzz(bases, seed: int, cases, time_limit: float = 1.0, mem_limit: int = 64, out=None):
    """Run the given case numbers; returns a stats dict (failures include their files)."""
    signal.signal(signal.SIGALRM, _alarm)
    stats = {"cases": 0, "accepted": 0, "refused": 0, "failures": [], "kinds": Counter(),
             "max_secs": 0.0, "max_peak": 0}
    try:
        for case in cases:
            outcome, kind, detail, data, steps, secs, peak = run_case(bases, seed, case, time_limit,
                                                                      mem_limit)
            stats["cases"] += 1
            stats["max_secs"] = max(stats["max_secs"], secs)
            stats["max_peak"] = max(stats["max_peak"], peak)
            if outcome == "accepted":
                stats["accepted"] += 1
            elif outcome == "refused":
                stats["refused"] += 1
                stats["kinds"][kind] += 1
            else:
                saved = None
                if out is not None:
                    out.mkdir(parents=True, exist_ok=True)
                    saved = out / f"fail-{seed}-{case}.cact"
                    saved.write_bytes(data)
                    saved.with_suffix(".txt").write_text(
                        f"seed {seed} case {case}\nmutations: {steps}\n\n{detail}\n")
                stats["failures"].append({"case": case, "steps": steps, "detail": detail,
                                          "file": str(saved) if saved else None})
    finally:
        if tracemalloc.is_tracing():
            tracemalloc.stop()
    return stats


def _worker(args):
    paths, synth, seed, lo, hi, step, time_limit, mem_limit, out = args
    bases = load_bases(paths, synth)
    return fuzz(bases, seed, range(lo, hi, step), time_limit, mem_limit, out)


def merge(parts):
    total = {"cases": 0, "accepted": 0, "refused": 0, "failures": [], "kinds": Counter(),
             "max_secs": 0.0, "max_peak": 0}
    for p in parts:
        for k in ("cases", "accepted", "refused"):
            total[k] += p[k]
        total["failures"] += p["failures"]
        total["kinds"] += p["kinds"]
        total["max_secs"] = max(total["max_secs"], p["max_secs"])
        total["max_peak"] = max(total["max_peak"], p["max_peak"])
    return total


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--first", type=int, default=0, help="first case number (to rerun one case)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "reader_mutate")
    ap.add_argument("--archive", nargs="+", type=Path, help="base archives (default: the goldens)")
    ap.add_argument("--no-synth", action="store_true", help="only the given/golden archives")
    ap.add_argument("--time-limit", type=float, default=1.0, help="seconds per call (1)")
    ap.add_argument("--mem-limit", type=int, default=64, help="MB of tracemalloc peak per call (64)")
    ap.add_argument("--top", type=int, default=12, help="most frequent refusal kinds to print")
    ap.add_argument("--replay", nargs="+", type=Path, help="run reader.read on saved files")
    a = ap.parse_args(argv)

    if a.replay:
        bad = 0
        for p in a.replay:
            try:
                reader.read(p.read_bytes())
                print(f"{p}: accepted")
            except CactError as e:
                print(f"{p}: refused: {e}")
            except Exception:  # noqa: BLE001
                bad += 1
                print(f"{p}: FAIL\n{traceback.format_exc()}")
        return 1 if bad else 0

    paths = [str(p) for p in a.archive] if a.archive else None
    t0 = time.perf_counter()
    bases = load_bases(paths, not a.no_synth)
    print(f"bases: {', '.join(f'{b.name} ({len(b.data)} B, N{b.gen})' for b in bases)}")
    lo, hi = a.first, a.first + a.cases
    t1 = time.perf_counter()
    if a.jobs <= 1:
        stats = fuzz(bases, a.seed, range(lo, hi), a.time_limit, a.mem_limit, a.out)
    else:
        from multiprocessing import Pool
        jobs = [(paths, not a.no_synth, a.seed, lo + k, hi, a.jobs, a.time_limit, a.mem_limit, a.out)
                for k in range(a.jobs)]
        with Pool(a.jobs) as pool:
            stats = merge(pool.map(_worker, jobs))
    secs = time.perf_counter() - t1
    kinds = stats["kinds"]
    print(f"seed {a.seed}: {stats['cases']} cases in {secs:.1f} s ({stats['cases'] / secs:.0f} cases/s, "
          f"{a.jobs} job{'s' if a.jobs > 1 else ''}; bases loaded in {t1 - t0:.1f} s)")
    print(f"accepted {stats['accepted']}, refused {stats['refused']}, failed {len(stats['failures'])}; "
          f"slowest call {stats['max_secs'] * 1000:.0f} ms, largest tracemalloc peak "
          f"{stats['max_peak'] / 2**20:.1f} MB")
    print(f"distinct refusals (where + first word): {len(kinds)}; "
          f"distinct fields named: {len({k.split(':')[0] for k in kinds})}")
    for k, c in kinds.most_common(a.top):
        print(f"  {c:7d}  {k}")
    for f in stats["failures"][:20]:
        print(f"FAIL case {f['case']}: {f['steps']}\n  saved: {f['file']}\n  "
              + f["detail"].strip().replace("\n", "\n  "))
    return 1 if stats["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
