"""`python -m generator bench`: the engine and the NumPy reference on one archive, one run.

Runs the engine's `--bench N` (prefill N tokens, decode N greedy tokens, memcpy bandwidth),
then the a8 reference on the same token sequence, and prints a table and, as the last line,
one JSON object with every figure and the ratios.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time

import numpy as np

from . import reader
from .errors import CactError
from .format import BOS_ID
from .reference import Needle2


def bench_tokens(n: int, vocab: int) -> list[int]:
    """The sequence the engine's --bench feeds: BOS, then (t · 2654435761) mod vocab."""
    return [BOS_ID] + [(t * 2654435761) % 2**32 % vocab for t in range(1, n)]


def run_engine(cmd: str, n: int) -> dict:
    try:
        out = subprocess.run(shlex.split(cmd) + ["--bench", str(n)], capture_output=True, text=True,
                             timeout=3600)
    except OSError as exc:
        raise CactError(f"cannot run the engine {cmd!r}: {exc.strerror}") from None
    if out.returncode:
        raise CactError(f"engine benchmark failed: {out.stderr.strip() or out.returncode}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_reference(archive, n: int) -> dict:
    m = Needle2(archive, "a8")
    seq = bench_tokens(n, archive.header["vocab"])
    state = m.new_state()
    t0 = time.perf_counter()
    logits = m.forward(state, seq)[-1]
    t1 = time.perf_counter()
    for _ in range(n):
        logits = m.forward(state, [int(np.argmax(logits))])[-1]
    t2 = time.perf_counter()
    return {"prefill_tok_s": n / (t1 - t0), "decode_tok_s": n / (t2 - t1)}


def main(archive_path: str, engine_cmd: str, n: int) -> int:
    a = reader.read(archive_path)
    n = min(n, a.header["max_seq_len"] // 2)
    eng = run_engine(engine_cmd, n)
    ref = run_reference(a, n)
    result = {
        "archive": archive_path, "tokens": n,
        "decode_tok_s": eng["decode_tok_s"], "prefill_tok_s": eng["prefill_tok_s"],
        "decode_tok_s_reference": round(ref["decode_tok_s"], 3),
        "prefill_tok_s_reference": round(ref["prefill_tok_s"], 3),
        "decode_speedup_vs_reference": round(eng["decode_tok_s"] / ref["decode_tok_s"], 2),
        "prefill_speedup_vs_reference": round(eng["prefill_tok_s"] / ref["prefill_tok_s"], 2),
        "bytes_per_token": eng["bytes_per_token"], "memcpy_gb_s": eng["memcpy_gb_s"],
        "roofline_tok_s": eng["roofline_tok_s"], "roofline_ratio": eng["roofline_ratio"],
    }
    print(f"{'':24s} {'engine':>12s} {'reference':>12s} {'ratio':>8s}")
    for k in ("prefill", "decode"):
        print(f"{k + ' tokens/s':24s} {result[k + '_tok_s']:12.2f} {result[k + '_tok_s_reference']:12.2f} "
              f"{result[k + '_speedup_vs_reference']:8.2f}")
    print(f"weights streamed per token {result['bytes_per_token']:,} bytes; memcpy {result['memcpy_gb_s']:.2f} GB/s "
          f"-> roofline {result['roofline_tok_s']:.0f} tok/s; engine at {100 * result['roofline_ratio']:.2f}% of it")
    print(json.dumps(result))
    return 0
