"""Fidelity of the a8 deployment numerics to the float model (docs/numerics.md, "Fidelity").

    python -m bench.fidelity [--case NAME ...] [--all] [--markdown OUT] [--json OUT]

For each case (a synthetic preset or a bundled demo archive), the a8 NumPy reference (what
every engine computes, bit for bit) and the float reference (the model as trained) are run
teacher-forced over one token sequence, and their logits compared position by position:

* **worst cosine**: the smallest per-position cosine between the two logit vectors, and the
  mean over positions;
* **clear top-1**: top-1 agreement over the *clear* positions, where the float model's top
  two logits differ by more than ``CLEAR_MARGIN`` (0.1) of that position's largest |logit|.
  At such a position a flip needs the a8 error to move two logits by 0.1 of the largest
  between them; the largest error measured on the goldens is 0.036-0.045 of it (int8 KV;
  docs/benchmarks.md, "Reference fidelity"), so a clear position that flips is a defect of the
  arithmetic, not rounding noise, and the expected figure is 1.000.  Positions with a closer
  race are counted (``close``) but not scored.

Sequences: a synthetic preset gets seeded random token ids over three of its KV windows (capped
at its max_seq_len; the published-size presets one and a quarter), so the ring wraps and the window's oldest positions are dropped while
scores are taken; a demo archive gets real conversations: held-out examples'
prompts (demo/eval/heldout.jsonl, rendered as the CLI renders them) each followed by its gold
call, one after another up to max_seq_len.  Only int8-KV cases are here: at kv_bits 2-4 the
cache is CQ-coded in both modes, so the comparison would measure the code, not the a8
activations (test_reference.py keeps its own kv4 floor).

host_tests/test_fidelity.py pins a floor under every figure here; the published-size presets
(``--all``) are in its slow tier.  The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from generator.archive import reader
from generator.archive.tokenizer import Tokenizer
from generator.commands import synth
from generator.model import reference
from generator.tools.prompt import render_prompt_ids

ROOT = Path(__file__).resolve().parent.parent
CLEAR_MARGIN = 0.1
SEED = 7
# name -> (what it is, how to get its bytes)
PRESETS = {"tiny": "needle2 preset tiny", "small": "needle2 preset small",
           "needle3-tiny": "needle3 preset", "needle3-small": "needle3 preset",
           "needle2-base": "published Needle 2 geometry", "needle3-base": "published Needle 3 geometry"}
DEMOS = {"needle2-demo": ROOT / "demo" / "needle2-demo.cact", "needle3-demo": ROOT / "demo" / "needle3-demo.cact"}
QUICK = ("tiny", "small", "needle3-tiny", "needle3-small", "needle2-demo", "needle3-demo")
LARGE = ("needle2-base", "needle3-base")


@dataclass
class Fidelity:
    case: str
    generation: int
    positions: int
    kv_window: int
    worst_cosine: float
    mean_cosine: float
    clear_top1: float
    clear: int
    close: int


def archive_bytes(case: str) -> bytes:
    if case in DEMOS:
        return DEMOS[case].read_bytes()
    if case in PRESETS:
        return synth.synthesize(case, 1)
    raise SystemExit(f"bench.fidelity: unknown case {case!r}: choose from {', '.join([*QUICK, *LARGE])}")


def demo_tokens(a, limit: int) -> list[int]:
    """[BOS], then held-out conversations (prompt + gold call + end of turn) up to `limit`."""
    tok = Tokenizer.from_blob(a.tokenizer_blob())
    ids = [tok.bos_id]
    with open(ROOT / "demo" / "eval" / "heldout.jsonl", encoding="utf-8") as f:
        for line in f:
            ex = json.loads(line)
            tools = json.dumps(ex["tools"], separators=(",", ":"), ensure_ascii=False)
            answer = "<tool_call>" + json.dumps(ex["calls"], separators=(",", ":"), ensure_ascii=False) + \
                "</tool_call><|im_end|>"
            ids += render_prompt_ids(tok, tools, ex["query"])[1:] + tok.encode(answer)
            if len(ids) >= limit:
                return ids[:limit]
    return ids[:limit]


def tokens_for(case: str, a) -> list[int]:
    """The teacher-forced sequence of a case (module docstring, "Sequences")."""
    max_seq, window = a.header["max_seq_len"], a.header["kv_window"] or a.header["max_seq_len"]
    if case in DEMOS:
        return demo_tokens(a, max_seq)
    rng = np.random.default_rng(SEED)
    # three windows; the published geometries one and a quarter (they cost minutes a window)
    n = min(window + window // 4 if case in LARGE else 3 * window, max_seq)
    return [int(t) for t in rng.integers(0, a.header["vocab"], n)]


_FLOAT_LOGITS: dict[str, np.ndarray] = {}


def compare(case: str, a, model) -> Fidelity:
    """`model` (an a8 reference of archive `a`, or a variant of it) against the float reference."""
    if a.header["kv_bits"] != 8:
        raise SystemExit(f"bench.fidelity: {case} has kv_bits {a.header['kv_bits']}: only int8-KV cases compare "
                         "the a8 activations")
    tokens = tokens_for(case, a)
    if case not in _FLOAT_LOGITS:           # the same for every model compared on this case
        _FLOAT_LOGITS[case] = reference(a, "float").logits(tokens)
    fl, a8 = _FLOAT_LOGITS[case], model.logits(tokens)
    cos = (a8 * fl).sum(1) / np.linalg.norm(a8, axis=1) / np.linalg.norm(fl, axis=1)
    top2 = np.sort(fl, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > CLEAR_MARGIN * np.abs(fl).max(1)
    agree = a8.argmax(1) == fl.argmax(1)
    return Fidelity(case, a.generation, len(tokens), a.header["kv_window"] or a.header["max_seq_len"],
                    float(cos.min()), float(cos.mean()),
                    float(agree[clear].mean()) if clear.any() else 1.0, int(clear.sum()), int((~clear).sum()))


def measure(case: str) -> Fidelity:
    a = reader.read(archive_bytes(case))
    return compare(case, a, reference(a, "a8"))


def markdown(rows: list[Fidelity]) -> str:
    out = ["| case | generation | positions (window) | worst cosine | mean cosine | clear top-1 (positions) | close races |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| `{r.case}` | {r.generation} | {r.positions} ({r.kv_window}) | {r.worst_cosine:.5f} | "
                   f"{r.mean_cosine:.5f} | {r.clear_top1:.3f} ({r.clear}) | {r.close} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fidelity", description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", action="append", help=f"a case (repeatable; default: {', '.join(QUICK)})")
    ap.add_argument("--all", action="store_true", help=f"also {', '.join(LARGE)} (minutes)")
    ap.add_argument("--markdown", help="write the table to this file")
    ap.add_argument("--json", help="write the rows to this file")
    args = ap.parse_args(argv)
    cases = args.case or [*QUICK, *(LARGE if args.all else ())]
    rows = []
    for case in cases:
        rows.append(measure(case))
        print(f"{case}: worst cosine {rows[-1].worst_cosine:.5f}, clear top-1 {rows[-1].clear_top1:.3f}",
              file=sys.stderr)
    table = markdown(rows)
    print(table, end="")
    if args.markdown:
        Path(args.markdown).write_text(table, encoding="utf-8")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n", encoding="utf-8")
    print(json.dumps([asdict(r) for r in rows]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
