"""`python -m generator inspect`: what an archive holds and what a session costs.

`summary()` returns the stable JSON schema documented in docs/inspect-json.md; `render()`
formats the same facts for people.
"""

from __future__ import annotations

from generator.archive.format import CENSUS_KINDS, CQ, DTYPE_NAMES, census_kind
from generator.archive.reader import Archive
from generator.model import geometry

SCHEMA_VERSION = 1


def census(a: Archive) -> dict[str, dict[str, int]]:
    out = {k: {"count": 0, "bytes": 0} for k in CENSUS_KINDS}
    for r in a.records:
        c = out[census_kind(r.dtype, r.bits)]
        c["count"] += 1
        c["bytes"] += r.nbytes
    return out


def kv_ram(a: Archive, window: int | None = None) -> dict[str, int]:
    """Bytes of state a session needs, as the generated engine lays it out."""
    return geometry.session_ram(a.header, window)


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
