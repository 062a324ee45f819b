"""Rungs of the Needle 3 ladder: cut a D-layer subnetwork out of an archive (docs/spec/needle3-model.md §8).

`cut(archive, D)` keeps the first D layers of the bisection order, renumbers them by rank,
copies every per-layer tensor byte for byte, restricts the mHC tensors to the kept layers'
rows (for the CQ φ maps: whole packed rows and their norm rows, never requantised), keeps
the engram sites and global layers that sit on kept layers (renumbered), cuts the probe-head
rows to `[0, 1 + kept…]`, rewrites the header (num_layers, sites, global mask, kv_window from
the Needle 3 budget formula capped by the original header's window) and validates the result
with the reader.

    python -m generator rung needle3.cact --layers 6 -o needle3-6.cact
"""

from __future__ import annotations

import numpy as np

from generator.archive import reader
from generator.archive import roles as R
from generator.archive import writer
from generator.errors import CactError
from generator.archive.format import CQ, FP16, MAX_SITES, cq_geometry
from generator.model.geometry import global_mask_layers, stored_kv_window


def ladder_order(L: int) -> list[int]:
    """The bisection order of §8.1: [0, L−1], then repeatedly the midpoint of the widest gap
    between adjacent chosen layers (ties: the gap with the smaller left index)."""
    if L < 1:
        raise CactError(f"a ladder needs at least one layer, got {L}")
    order = [0] if L == 1 else [0, L - 1]
    while len(order) < L:
        chosen = sorted(order)
        best = None
        for left, right in zip(chosen, chosen[1:]):
            gap = right - left
            if gap > 1 and (best is None or gap > best[0]):
                best = (gap, left, right)
        order.append((best[1] + best[2]) // 2)
    return order


def kept_layers(L: int, D: int, order: list[int] | None = None) -> list[int]:
    """The original indices a depth-D rung keeps, ascending (new index = position in it)."""
    order = ladder_order(L) if order is None else list(order)
    if sorted(order) != list(range(L)):
        raise CactError(f"ladder order {order} is not a permutation of 0..{L - 1}")
    return sorted(order[:D])


def remap(kept: list[int], layers: list[int]) -> list[int]:
    """New indices of the listed original layers that survive (dropped ones vanish)."""
    rank = {l: i for i, l in enumerate(kept)}
    return [rank[l] for l in layers if l in rank]


def ladder_table(L: int, sites: list[int], globals_: list[int]) -> list[tuple]:
    """(D, kept, sites, globals) for every D = 2 … L (the table of §8)."""
    return [(D, kept, remap(kept, sites), remap(kept, globals_))
            for D in range(2, L + 1) for kept in [kept_layers(L, D)]]


def rung_header(hdr: dict, kept: list[int]) -> dict:
    """The header of the rung (everything but tag, num_tensors and codebook_len)."""
    out = {k: v for k, v in hdr.items() if k not in ("tag", "num_tensors", "codebook_len")}
    out["num_layers"] = len(kept)
    sites = remap(kept, R.sites(hdr))
    out["num_engram_sites"] = len(sites)
    for i in range(MAX_SITES[3]):
        out[f"engram_site{i}"] = sites[i] if i < len(sites) else 0
    mask = sum(1 << g for g in remap(kept, global_mask_layers(hdr)))
    out["global_mask_lo"], out["global_mask_hi"] = mask & 0xFFFFFFFF, mask >> 32
    out["kv_window"] = stored_kv_window(out, hdr["kv_window"])
    return out


def _rows_cq(a, rec, rows: list[int], role: str) -> writer.Tensor:
    """Whole packed rows and their norm rows of a CQ tensor, copied byte for byte."""
    out, inp = rec.shape
    _, ng, row_bytes, _ = cq_geometry(out, inp, rec.group, rec.bits)
    blob = np.frombuffer(a.blob(rec), np.uint8)
    packed = blob[:out * row_bytes].reshape(out, row_bytes)[rows]
    norms = blob[out * row_bytes:].reshape(out, ng * 2)[rows]
    return writer.Tensor(role, CQ, (len(rows), inp), packed.tobytes() + norms.tobytes(),
                         rec.group, rec.bits)


def _rows_fp16(a, rec, rows: list[int], axis: int, role: str) -> writer.Tensor:
    """An FP16 tensor restricted to `rows` along `axis` (the f16 words copied unchanged)."""
    arr = np.frombuffer(a.blob(rec), "<u2").reshape(rec.shape)
    sub = np.take(arr, rows, axis=axis)
    return writer.Tensor(role, FP16, tuple(sub.shape), np.ascontiguousarray(sub).tobytes())


def _copy(a, rec, role: str | None = None) -> writer.Tensor:
    return writer.Tensor(role or rec.role, rec.dtype, rec.shape, bytes(a.blob(rec)), rec.group,
                         rec.bits)


def cut(source, D: int, order: list[int] | None = None) -> bytes:
    """The D-layer rung of a Needle 3 archive (path, bytes or reader.Archive), validated."""
    a = source if isinstance(source, reader.Archive) else reader.read(source)
    if a.generation != 3:
        raise CactError(f"rung needs a Needle 3 archive; this one is Needle {a.generation}")
    L = a.header["num_layers"]
    if not isinstance(D, int) or isinstance(D, bool):
        raise CactError(f"--layers must be an integer, got {D!r}")
    if D < 2 or D >= L:
        raise CactError(f"--layers {D} is out of range: a rung of this {L}-layer archive keeps "
                        f"2 to {L - 1} layers")
    kept = kept_layers(L, D, order)
    hdr = rung_header(a.header, kept)
    n = a.header["mhc_lanes"]
    tensors = [_copy(a, a.record("embedding"))]
    layer_names = [r.name.split(".", 1)[1] for r in R.core_roles(3, a.header) if r.name.startswith("layer00.")]
    for new, old in enumerate(kept):
        for name in layer_names:
            tensors.append(_copy(a, a.record(f"layer{old:02d}.{name}"), f"layer{new:02d}.{name}"))
    # mHC: rows of the kept layers, in the new order
    for name, _dt, _sh in R.MHC:
        rec = a.record(f"mhc.{name}")
        role = f"mhc.{name}"
        if rec.dtype == CQ:
            per = n * n if name == "phi_res" else n
            rows = [l * per + j for l in kept for j in range(per)]
            tensors.append(_rows_cq(a, rec, rows, role))
        else:
            tensors.append(_rows_fp16(a, rec, kept, 0, role))
    tensors += [_copy(a, a.record("hada_p1")), _copy(a, a.record("hada_p2"))]
    new_sigma = 0
    for sigma, layer in enumerate(R.sites(a.header)):
        if layer in kept:
            for name, _dt, _sh in R.ENGRAM:
                tensors.append(_copy(a, a.record(f"engram{sigma}.{name}"), f"engram{new_sigma}.{name}"))
            new_sigma += 1
    tensors.append(_copy(a, a.record("final_norm")))
    # probe heads: rows [0, 1 + kept…] of probes / gain (axis 0) / row_bias (axis 1)
    if a.heads:
        tensors.append(_copy(a, a.record("heads.manifest")))
        cell_rows = [0] + [1 + l for l in kept]
        for hd in a.heads:
            for part, idx in hd.tensors.items():
                rec = a.records[idx]
                if part == "probes" and rec.dtype == CQ:
                    k = rec.shape[0] // (L + 1)
                    rows = [row * k + kappa for row in cell_rows for kappa in range(k)]
                    tensors.append(_rows_cq(a, rec, rows, rec.role))
                elif part in ("probes", "gain"):   # FP16 [L+1, k, d] (older layout) / [L+1, k]
                    tensors.append(_rows_fp16(a, rec, cell_rows, 0, rec.role))
                elif part == "row_bias":
                    tensors.append(_rows_fp16(a, rec, cell_rows, 1, rec.role))
                else:
                    tensors.append(_copy(a, rec))
    tensors.append(_copy(a, a.records[-1]))
    data = writer.write(3, hdr, a.codebook, tensors)
    reader.read(data)   # never hand out an archive our own reader refuses
    return data


__all__ = ["ladder_order", "kept_layers", "remap", "ladder_table", "rung_header", "cut"]
