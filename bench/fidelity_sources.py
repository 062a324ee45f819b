"""Where the a8 engine's distance from the float model comes from (docs/numerics.md, "Fidelity").

    python -m bench.fidelity_sources [--case NAME ...] [--variant NAME ...] [--markdown OUT]

bench.fidelity measures the a8 reference (what every engine computes) against the float
reference.  This driver takes the a8 reference apart: each *variant* below undoes one or two of
its approximations, in NumPy, and is measured against the float reference the same way
(teacher-forced over the same tokens, worst-position and mean cosine of the logits).  A variant
that closes most of the gap names the approximation that costs the fidelity; one that closes
none clears it.  Nothing here is an engine: the variants are what a numerics change would buy,
measured before anyone writes kernels for it.

The CQ products (every matrix of the model, docs/numerics.md §5): a8 rotates each 128-group of
the input (FWHT), quantises it to int8 with one scale (`quantize_int8`) and multiplies by the
codebook's levels rounded to an int8 grid (`int8_levels`), so two things are rounded: the
activations and the levels.  The variants keep either at 16 bits (int16, one scale per group)
or exact, and do the rest in f64.  Attention at kv_bits 8 (§6): the keys and values are stored
as int8 with a scale per group, and the scores are integer dots after the query is quantised
with the keys' groups; `float-scores` keeps the stored codes and scales but takes the scores
and the weighted sum in f32 on their decoded values, and `float-kv` keeps the cache in f32
(Needle 3 was trained with its int8 round trip: its float model has it, so on Needle 3
`float-kv` leaves the float model and is not listed).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from bench import fidelity
from generator.archive import quant, reader
from generator.model import GENERATIONS
from generator.model import numerics as nm
from generator.model.needle2 import _Linear

F32, F64 = np.float32, np.float64
GROUP = 128                  # the CQ group: activations are rotated and scaled per group

# name -> (activations, levels, attention, what it tells)
VARIANTS = {
    "a8": ("int8", "int8", "int8", "the engines' numerics, as shipped"),
    "float-scores": ("int8", "int8", "float-scores", "attention scores and weighted sum in f32 on the int8 cache"),
    "float-kv": ("int8", "int8", "float-kv", "an f32 KV cache (Needle 2 only)"),
    "a16": ("int16", "int8", "int8", "int16 activations, int8 levels"),
    "exact-levels": ("int8", "exact", "int8", "int8 activations, the codebook's levels exact"),
    "a16-exact-levels": ("int16", "exact", "int8", "int16 activations and exact levels"),
    "float-products": ("float", "exact", "int8", "every CQ product in f64 on the exact weights"),
    "float-products-scores": ("float", "exact", "float-scores",
                              "f64 products and f32 attention on the int8 cache: what a float-activation engine computes"),
    "all-float": ("float", "exact", "float-kv", "all of it undone: the float model again (Needle 2 only)"),
}
DEFAULT = tuple(v for v in VARIANTS if v != "all-float")   # all-float is the tests' check


class _ExactLinear(_Linear):
    """A CQ matrix in a8 form that also keeps its exact levels [out, ng, group] (f64)."""

    def __init__(self, t, mode: str):
        super().__init__(t, mode)
        lv = quant.level_table(t.bits, t.archive.codebook, t.group)[t.indices()]
        self.exact = lv.astype(F64).reshape(t.out, t.ng, t.group)

    def rows(self, sl: slice) -> "_ExactLinear":
        view = super().rows(sl)
        view.exact = self.exact[sl]
        return view


def _rotated(x: np.ndarray, in_pad: int) -> np.ndarray:
    """The input padded to in_pad and rotated per group (FWHT, normalised): [..., ng, g] f64."""
    x = nm.f32(x)
    lead = x.shape[:-1]
    pad = np.zeros(lead + (in_pad,), dtype=F32)
    pad[..., :x.shape[-1]] = x
    t = quant.fwht(pad.reshape(lead + (in_pad // GROUP, GROUP))).astype(F64)
    return t * F64(quant.inv_sqrt(GROUP))


def _round_groups(t: np.ndarray, qmax: int) -> np.ndarray:
    """Each group symmetrically quantised to ±qmax with one scale, read back (f64)."""
    amax = np.abs(t).max(axis=-1, keepdims=True)
    scale = np.where(amax > 0, amax, 1.0) / qmax
    return np.rint(t / scale) * scale


def variant_class(generation: int, activations: str, levels: str, attention: str):
    """The reference of `generation` with the chosen product and attention numerics."""
    base = GENERATIONS[generation]

    class Variant(base):
        def lin(self, role: str) -> _Linear:
            if role not in self._lin:
                self._lin[role] = _ExactLinear(self.a.cq(role), self.mode)
            return self._lin[role]

        def matvec(self, lin, x, act=None):
            if (activations, levels) == ("int8", "int8"):
                return super().matvec(lin, x, act)
            t = _rotated(x, lin.in_pad)
            if activations != "float":
                t = _round_groups(t, 127 if activations == "int8" else 32767)
            lv = lin.exact if levels == "exact" else lin.lvl.astype(F64) * F64(lin.s_c)
            y = np.einsum("...jg,rjg,rj->...r", t, lv, lin.norms.astype(F64))
            return y.astype(F32)

        @property
        def int8_scores(self) -> bool:
            return attention == "int8" and super().int8_scores

        def kv_code(self, x):       # float-scores: the base's a8 round trip of the stored codes
            return x if attention == "float-kv" else super().kv_code(x)

    return Variant


def measure(case: str, variant: str) -> fidelity.Fidelity | None:
    """The variant's fidelity on the case, or None where it does not apply."""
    activations, levels, attention, _ = VARIANTS[variant]
    a = reader.read(fidelity.archive_bytes(case))
    if attention == "float-kv" and a.generation == 3:
        return None
    return fidelity.compare(case, a, variant_class(a.generation, activations, levels, attention)(a, "a8"))


def markdown(rows: dict[str, dict[str, fidelity.Fidelity | None]], variants) -> str:
    out = ["| case | " + " | ".join(f"`{v}`" for v in variants) + " |",
           "|---|" + "---|" * len(variants)]
    for case, by in rows.items():
        cells = [f"{by[v].worst_cosine:.5f}" if by[v] else "n/a" for v in variants]
        out.append(f"| `{case}` | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fidelity_sources", description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", action="append", help=f"a case (repeatable; default: {', '.join(fidelity.QUICK)})")
    ap.add_argument("--variant", action="append", choices=list(VARIANTS),
                    help="a variant (repeatable; default: all)")
    ap.add_argument("--markdown", help="write the table (worst cosine per case and variant) to this file")
    args = ap.parse_args(argv)
    variants = args.variant or list(DEFAULT)
    rows: dict[str, dict[str, fidelity.Fidelity | None]] = {}
    for case in args.case or fidelity.QUICK:
        rows[case] = {}
        for v in variants:
            r = rows[case][v] = measure(case, v)
            if r:
                print(f"{case} {v}: worst cosine {r.worst_cosine:.5f}, mean {r.mean_cosine:.5f}", file=sys.stderr)
    table = markdown(rows, variants)
    print(table, end="")
    if args.markdown:
        Path(args.markdown).write_text(table, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
