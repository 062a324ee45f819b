"""`python -m generator inspect`: what an archive holds and what a session costs.

`summary()` returns the stable JSON schema documented in docs/inspect-json.md; `render()`
formats the same facts for people.
"""

from __future__ import annotations

from .format import CENSUS_KINDS, CQ, DTYPE_NAMES, KV_BUDGET_BYTES, census_kind
from .reader import Archive

SCHEMA_VERSION = 1


def census(a: Archive) -> dict[str, dict[str, int]]:
    out = {k: {"count": 0, "bytes": 0} for k in CENSUS_KINDS}
    for r in a.records:
        c = out[census_kind(r.dtype, r.bits)]
        c["count"] += 1
        c["bytes"] += r.nbytes
    return out


def kv_ram(a: Archive, window: int | None = None) -> dict[str, int]:
    """Bytes of KV cache a session needs at the header's kv_window and kv_bits.

    int8 (kv_bits 8): one byte per value plus a 4-byte f32 scale per 32-value group of each
    head vector.  CQ (2-4): packed indices plus one f16 norm per 64-value group.  Engram
    value history: per site, 3·dilation + 1 vectors of d f32.
    """
    h = a.header
    if a.generation == 2:
        hk = hv = h["head_dim"]
    else:
        hk, hv = h["qk_head_dim"], h["v_head_dim"]
    W = h["kv_window"] if window is None else window
    if W == 0:
        from .plan import budget_window
        W = budget_window(h, KV_BUDGET_BYTES, a.generation)
    G, L = h["num_kv_heads"], h["num_layers"]

    def vec_bytes(width: int) -> int:
        if h["kv_bits"] == 8:
            return width + 4 * (-(-width // 32))
        pad = -(-width // 64) * 64
        return pad * h["kv_bits"] // 8 + 2 * (pad // 64)

    per_pos = L * G * (vec_bytes(hk) + vec_bytes(hv))
    engram = h["num_engram_sites"] * (3 * h["engram_conv_dilation"] + 1) * h["d_model"] * 4
    return {"window": W, "kv_bits": h["kv_bits"], "bytes_per_position": per_pos,
            "kv_bytes": per_pos * W, "engram_history_bytes": engram,
            "total_bytes": per_pos * W + engram}


def summary(a: Archive) -> dict:
    geometry = {k: v for k, v in a.header.items() if k != "tag"}
    return {
        "schema": SCHEMA_VERSION,
        "generation": a.generation,
        "tag": f"0x{a.header['tag']:08X}",
        "bytes": a.size,
        "sha256": a.sha256(),
        "tensor_count": len(a.records),
        "geometry": geometry,
        "census": census(a),
        "heads": [hd.name for hd in a.heads],
        "tokenizer": {"pieces": a.tokenizer.n_pieces, "bytes": a.records[-1].nbytes,
                      "add_dummy_prefix": a.tokenizer.add_dummy_prefix,
                      "byte_fallback": a.tokenizer.byte_fallback},
        "session_ram": kv_ram(a),
        "tensors": [{"index": r.index, "role": r.role, "dtype": census_kind(r.dtype, r.bits),
                     "shape": list(r.shape), "offset": r.offset, "bytes": r.nbytes}
                    for r in a.records],
    }


def _mb(n: int) -> str:
    return f"{n / 1e6:8.3f} MB"


def render(a: Archive, tensors: bool = True) -> str:
    s = summary(a)
    lines = [f"Needle {a.generation} archive, {s['bytes']:,} bytes, {s['tensor_count']} tensors",
             f"sha256 {s['sha256']}", "", "geometry:"]
    for k, v in s["geometry"].items():
        lines.append(f"  {k:22s} {v}")
    lines += ["", "census:", f"  {'kind':8s} {'count':>6s} {'bytes':>14s}"]
    for k, c in s["census"].items():
        if c["count"]:
            lines.append(f"  {k:8s} {c['count']:6d} {c['bytes']:14,d} {_mb(c['bytes'])}")
    ram = s["session_ram"]
    lines += ["", f"heads: {', '.join(s['heads']) or 'none'}",
              f"tokenizer: {s['tokenizer']['pieces']} pieces, {s['tokenizer']['bytes']:,} bytes",
              "", f"session RAM at kv_window {ram['window']}, kv_bits {ram['kv_bits']}:",
              f"  KV cache        {ram['kv_bytes']:12,d} bytes ({ram['bytes_per_position']:,} per position)",
              f"  engram history  {ram['engram_history_bytes']:12,d} bytes",
              f"  total           {ram['total_bytes']:12,d} bytes"]
    if tensors:
        lines += ["", f"  {'#':>4s}  {'role':28s} {'dtype':7s} {'shape':18s} {'offset':>10s} {'bytes':>10s}"]
        for r in a.records:
            kind = census_kind(r.dtype, r.bits) if r.dtype == CQ else DTYPE_NAMES[r.dtype].lower()
            lines.append(f"  {r.index:4d}  {r.role:28s} {kind:7s} {str(list(r.shape)):18s} "
                         f"{r.offset:10d} {r.nbytes:10d}")
    return "\n".join(lines)
