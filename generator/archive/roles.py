"""Canonical tensor order of both generations (docs/spec/cact-format.md §8–§10).

Tensors carry no names in the file: their meaning is their position.  This module turns
a validated header into the list of (role, dtype, shape) the directory must hold, so the
reader, the writer, the synthesiser and the planner agree on one definition.
"""

from __future__ import annotations

from dataclasses import dataclass

from generator.archive.format import CQ, FP16, FP32

N2_LAYER = (
    ("norm_in", FP16, "d"), ("q_proj", CQ, "A,d"), ("k_proj", CQ, "K,d"), ("v_proj", CQ, "K,d"),
    ("q_norm", FP16, "h"), ("k_norm", FP16, "h"), ("gate_proj", CQ, "A,d"),
    ("out_proj", CQ, "d,A"), ("post_norm", FP16, "d"), ("attn_gate", FP16, "1"),
    ("pre_hada", FP16, "d"), ("d1", FP16, "N"), ("d2", FP16, "N"), ("d3", FP16, "N"),
)

N3_LAYER = (
    ("norm_in", FP16, "d"), ("q_proj", CQ, "Aq,d"), ("k_proj", CQ, "Kq,d"), ("v_proj", CQ, "Kv,d"),
    ("q_taps", FP16, "Tc,Aq"), ("k_taps", FP16, "Tc,Kq"), ("v_taps", FP16, "Tc,Kv"),
    ("q_norm", FP16, "hq"), ("k_norm", FP16, "hq"), ("gate_proj", CQ, "Av,d"),
    ("out_proj", CQ, "d,Av"), ("post_norm", FP16, "d"), ("attn_gate", FP16, "1"),
    ("pre_hada", FP16, "d"), ("d1", FP16, "N"), ("d2", FP16, "N"), ("b2", FP16, "N"),
    ("d3", FP16, "N"), ("d4", FP16, "N"),
    ("w1a", FP16, "ba,ba"), ("w1b", FP16, "bb,bb"), ("w2a", FP16, "ba,ba"),
    ("w2b", FP16, "bb,bb"), ("w3a", FP16, "ba,ba"), ("w3b", FP16, "bb,bb"),
    ("cond_v", FP16, "d,R"), ("cond_u", FP16, "R,N"),
)
N3_TAP_ROLES = ("q_taps", "k_taps", "v_taps")
N3_COND_RANK = 8

MHC = (
    ("a_pre", FP16, "L"), ("a_post", FP16, "L"), ("a_res", FP16, "L"),
    ("b_pre", FP16, "L,n"), ("b_post", FP16, "L,n"), ("b_res", FP16, "L,n,n"),
    ("phi_pre", CQ, "Ln,nd"), ("phi_post", CQ, "Ln,nd"), ("phi_res", CQ, "Lnn,nd"),
)

ENGRAM = (("tables", CQ, "TM,s"), ("key_proj", CQ, "d,E"), ("value_proj", CQ, "d,E"),
          ("taps", FP16, "4,d"))

N2_HEAD_NAMES = {1: "contrastive", 2: "confidence"}
N3_HEAD_NAMES = {1: "embedding", 2: "confidence", 3: "router"}


@dataclass(frozen=True)
class Role:
    """One expected directory entry: its role name, dtype and shape."""

    name: str
    dtype: int
    shape: tuple[int, ...]


def dims(gen: int, hdr: dict) -> dict[str, int]:
    """Symbolic dimensions of the canonical shapes, from a header."""
    d, H, G, L, n = (hdr["d_model"], hdr["num_heads"], hdr["num_kv_heads"],
                     hdr["num_layers"], hdr["mhc_lanes"])
    N = hdr["hada_n"]
    T, M, s = hdr["num_engram_tables"], hdr["engram_slots"], hdr["engram_sub_dim"]
    out = {"d": d, "L": L, "n": n, "N": N, "V": hdr["vocab"], "Ln": L * n, "Lnn": L * n * n,
           "nd": n * d, "TM": T * M, "s": s, "E": T * s, "1": 1, "4": 4}
    if gen == 2:
        h = hdr["head_dim"]
        out.update(h=h, A=H * h, K=G * h)
    else:
        hq, hv = hdr["qk_head_dim"], hdr["v_head_dim"]
        ba = 1 << ((N.bit_length() - 1) // 2)
        out.update(hq=hq, hv=hv, Aq=H * hq, Av=H * hv, Kq=G * hq, Kv=G * hv,
                   Tc=hdr["qkv_conv_taps"], ba=ba, bb=N // ba, R=N3_COND_RANK)
    return out


def _shape(spec: str, dm: dict[str, int]) -> tuple[int, ...]:
    return tuple(dm[k] for k in spec.split(","))


def sites(hdr: dict) -> list[int]:
    return [hdr[f"engram_site{i}"] for i in range(hdr["num_engram_sites"])]


def orders(hdr: dict) -> list[int]:
    return [hdr[f"engram_order{i}"] for i in range(hdr["num_engram_orders"])]


def core_roles(gen: int, hdr: dict) -> list[Role]:
    """Every tensor from the embedding through final_norm, in directory order."""
    dm = dims(gen, hdr)
    roles = [Role("embedding", CQ, (dm["V"], dm["d"]))]
    layer = N2_LAYER if gen == 2 else N3_LAYER
    if gen == 3 and dm["Tc"] == 0:
        layer = tuple(r for r in layer if r[0] not in N3_TAP_ROLES)
    for l in range(hdr["num_layers"]):
        roles += [Role(f"layer{l:02d}.{name}", dt, _shape(sh, dm)) for name, dt, sh in layer]
    roles += [Role(f"mhc.{name}", dt, _shape(sh, dm)) for name, dt, sh in MHC]
    if gen == 3:
        roles += [Role("hada_p1", FP32, (dm["N"],)), Role("hada_p2", FP32, (dm["N"],))]
    for sigma in range(hdr["num_engram_sites"]):
        roles += [Role(f"engram{sigma}.{name}", dt, _shape(sh, dm)) for name, dt, sh in ENGRAM]
    roles.append(Role("final_norm", FP16, (dm["d"],)))
    return roles


def core_count(gen: int, hdr: dict) -> int:
    """Tensors through final_norm, by the closed formulas of §8/§9 (no list built)."""
    L, S = hdr["num_layers"], hdr["num_engram_sites"]
    if gen == 2:
        return 11 + 14 * L + 4 * S
    per_layer = 24 + (3 if hdr["qkv_conv_taps"] > 0 else 0)
    return 13 + per_layer * L + 4 * S


def bitmap_name(role: str) -> str | None:
    """The canonical name a Needle 2 bit map matches against (docs/spec/cact-format.md §12.1)."""
    if role == "embedding":
        return "embedding"
    if role.startswith("layer"):
        return "attn." + role.split(".", 1)[1]
    if role.startswith("mhc.phi_"):
        return "mhc_" + role.split(".", 1)[1]
    if role.startswith("engram"):
        return role
    return None
