"""Plan: turn a validated archive and a board's options into plain data for the templates.

Every decision the generated engine bakes in is made here: geometry constants, each
tensor's absolute offset in the linked archive, integer codebooks, RoPE frequencies, the
KV ring size and coding, scratch buffer sizes, and the boot-check hash.  The result is a
dict of numbers, strings and lists; `emit` only renders it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from generator import __version__
from generator.archive import quant
from generator.archive import roles as R
from generator.errors import CactError
from generator.archive.format import CODEBOOK_LEN, CQ, HEADER_BYTES, KV_BUDGET_BYTES, RECORD_BYTES, \
    TERNARY, cq_geometry
from generator.archive.reader import Archive
from generator.model import geometry, numerics as nm

@dataclass
class Options:
    """Build options that shape the engine (from the board file and the command line)."""

    board: str = "host"
    kv_window: int | None = None      # explicit smaller window (changes numerics: warned)
    kv_budget: int = KV_BUDGET_BYTES   # bytes of RAM for the KV cache when kv_window is 0
    max_text: int = 16384              # bytes of prompt text the tokenizer accepts
    board_data: dict | None = None     # the whole board file (bare metal: regions, stack)
    kernels: str = "scalar"            # kernel family (templates/kernels/<family>.c.j2)
    head_tokens: int = 0               # tokens whose cells the probe heads keep (0: no heads)

    @classmethod
    def for_board(cls, board: dict, kv_window: int | None = None, kernels: str | None = None,
                  head_tokens: int = 0) -> "Options":
        from generator.build.boards import kernel_family
        return cls(board=board["name"], kv_window=kv_window,
                   kv_budget=board["memory"]["kv_budget_bytes"], max_text=board["max_text"],
                   board_data=board, kernels=kernels or kernel_family(board), head_tokens=head_tokens)


def fnv1a64(data) -> int:
    h = 0xCBF29CE484222325
    for b in bytes(data):
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def window_for(h: dict, opts: Options, generation: int = 2) -> tuple[int, list[str]]:
    """The deployment KV window (every layer's ring is at most this) and user warnings."""
    warnings = []
    header_w = h["kv_window"]
    if header_w == 0:
        w = geometry.budget_window(h, opts.kv_budget)
        warnings.append(f"header kv_window is 0: sized from the {opts.kv_budget:,}-byte KV budget "
                        f"to {w} positions")
    else:
        w = header_w
    if opts.kv_window is not None:
        if not 1 <= opts.kv_window <= w:
            raise CactError(f"kv_window={opts.kv_window} must be between 1 and the archive's window {w}")
        if opts.kv_window < w:
            warnings.append(f"kv_window={opts.kv_window} is smaller than the trained window {w}: "
                            "this changes the model's numerics")
        w = opts.kv_window
    return w, warnings


def _cname(role: str) -> str:
    return role.replace(".", "_")


def _cq_plan(a: Archive, role: str) -> dict:
    rec = a.record(role)
    out, inp = rec.shape
    in_pad, ng, row_bytes, _ = cq_geometry(out, inp, rec.group, rec.bits)
    return {"role": role, "cname": _cname(role), "offset": rec.offset, "bits": rec.bits,
            "rows": out, "cols": inp, "in_pad": in_pad, "ng": ng, "row_bytes": row_bytes,
            "norms": rec.offset + out * row_bytes, "nbytes": rec.nbytes,
            "kind": "ternary" if rec.bits == TERNARY else f"cq{rec.bits}"}


def _vec_plan(a: Archive, role: str) -> dict:
    rec = a.record(role)
    return {"role": role, "cname": _cname(role), "offset": rec.offset, "shape": list(rec.shape),
            "count": int(math.prod(rec.shape)), "nbytes": rec.nbytes}


def rope_inv_freq(head_dim: int, theta: float) -> list[float]:
    """ω_j of docs/numerics.md, computed exactly as the reference does."""
    j = np.arange(head_dim // 2)
    e = np.float32(2) * j.astype(np.float32) / np.float32(head_dim)
    powv = np.power(np.float64(np.float32(theta)), e.astype(np.float64)).astype(np.float32)
    return [float(x) for x in (np.float32(1) / powv)]


def _heads_plan(a: Archive, opts: Options) -> tuple[list[dict], int]:
    """Probe heads the engine computes (needle2-model.md §9), when head_tokens > 0."""
    if not opts.head_tokens or not a.heads:
        return [], 0
    if opts.head_tokens > a.header["max_seq_len"]:
        raise CactError(f"head_tokens={opts.head_tokens} exceeds max_seq_len {a.header['max_seq_len']}")
    out = []
    for hd in a.heads:
        recs = {part: a.records[i] for part, i in hd.tensors.items()}
        entry = {"code": hd.code, "name": hd.name, "bias": recs["bias"].offset,
                 "out": recs["proj"].shape[0], "normalise": hd.code == 1}
        if a.generation == 2:       # FP16 probes [P, d], proj [out, P·d]
            entry.update(probes=recs["probes"].offset, proj=recs["proj"].offset, P=recs["probes"].shape[0])
        else:                       # CQ probes [(L+1)·k, d], query [q, d], proj [out, q·d]
            if recs["probes"].dtype != CQ:
                raise CactError("head_tokens: the older all-FP16 Needle 3 head layout is not supported "
                                "by the C engine")
            k = recs["gain"].shape[1]
            entry.update(probes=_cq_plan(a, recs["probes"].role), query=_cq_plan(a, recs["query"].role),
                         proj=_cq_plan(a, recs["proj"].role), gain=recs["gain"].offset,
                         row_bias=recs["row_bias"].offset, k=k, q=recs["query"].shape[0],
                         P=recs["query"].shape[0])
        out.append(entry)
    return out, opts.head_tokens


N2_LAYER_VEC = ("norm_in", "q_norm", "k_norm", "post_norm", "attn_gate", "pre_hada", "d1", "d2", "d3")
N3_LAYER_VEC = ("norm_in", "q_norm", "k_norm", "post_norm", "attn_gate", "pre_hada", "d1", "d2", "b2",
                "d3", "d4", "w1a", "w1b", "w2a", "w2b", "w3a", "w3b", "cond_v", "cond_u")
N3_TAPS = ("q_taps", "k_taps", "v_taps")
LAYER_CQ = ("q_proj", "k_proj", "v_proj", "gate_proj", "out_proj")


def plan(a: Archive, opts: Options | None = None) -> dict:
    """Everything the engine templates need, for either generation."""
    opts = opts or Options()
    gen = a.generation
    h = a.header
    d, L, H, G = h["d_model"], h["num_layers"], h["num_heads"], h["num_kv_heads"]
    n, N, V = h["mhc_lanes"], h["hada_n"], h["vocab"]
    hq = h["head_dim"] if gen == 2 else h["qk_head_dim"]
    hv = h["head_dim"] if gen == 2 else h["v_head_dim"]
    v_out = V if gen == 2 or h["out_vocab"] == 0 else h["out_vocab"]
    taps = 0 if gen == 2 else h["qkv_conv_taps"]
    S = h["num_engram_sites"]
    window, warnings = window_for(h, opts, gen)
    kv = geometry.kv_layout(h, window)
    globals_ = set(geometry.global_layers(h))
    w_sw = 0 if gen == 2 else h["sliding_window"]
    local_window = min(w_sw, window) if w_sw else window

    layers, n_local, n_global = [], 0, 0
    vec_roles = N2_LAYER_VEC if gen == 2 else N3_LAYER_VEC + (N3_TAPS if taps else ())
    for l in range(L):
        p = f"layer{l:02d}."
        local = l not in globals_
        layers.append({
            "index": l,
            "vec": {k: _vec_plan(a, p + k) for k in vec_roles},
            "cq": {k: _cq_plan(a, p + k) for k in LAYER_CQ},
            "site": R.sites(h).index(l) if l in R.sites(h) else -1,
            "local": local,
            "ring": n_local if local else n_global,   # index among layers of its kind
        })
        n_local, n_global = n_local + local, n_global + (not local)
    mhc_vec = {k: _vec_plan(a, "mhc." + k) for k in ("a_pre", "a_post", "a_res", "b_pre", "b_post", "b_res")}
    mhc_cq = {k: _cq_plan(a, "mhc." + k) for k in ("phi_pre", "phi_post", "phi_res")}
    sites = []
    for s in range(S):
        sites.append({"index": s, "layer": R.sites(h)[s],
                      "tables": _cq_plan(a, f"engram{s}.tables"),
                      "key_proj": _cq_plan(a, f"engram{s}.key_proj"),
                      "value_proj": _cq_plan(a, f"engram{s}.value_proj"),
                      "taps": _vec_plan(a, f"engram{s}.taps")})
    embedding = _cq_plan(a, "embedding")

    all_cq = [embedding] + list(mhc_cq.values()) + [c for ly in layers for c in ly["cq"].values()]
    all_cq += [s[k] for s in sites for k in ("tables", "key_proj", "value_proj")]
    widths = sorted({c["bits"] for c in all_cq})
    codebooks = []
    for bits in widths:
        table, s_c = nm.int8_levels(bits, a.codebook)
        levels = quant.level_table(bits, a.codebook)
        codebooks.append({"bits": bits, "kind": "ternary" if bits == TERNARY else f"cq{bits}",
                          "int8": [int(x) for x in table], "s_c": float(s_c),
                          "levels": [0.0 if math.isnan(x) else float(x) for x in levels]})
    kv_levels = []
    if h["kv_bits"] != 8:
        lv, mids = nm.kv_cq_levels(h["kv_bits"], a.codebook)
        kv_levels = {"levels": [float(x) for x in lv], "mids": [float(x) for x in mids]}

    orders = R.orders(h)
    T_e = h["num_engram_tables"]
    heads_per_order = T_e // len(orders) if orders else 0
    seed_stride = heads_per_order if gen == 2 or not h["engram_seed_heads"] else h["engram_seed_heads"]
    E = T_e * h["engram_sub_dim"]
    max_in_pad = max(c["in_pad"] for c in all_cq if c["role"] != "embedding" and
                     not c["role"].endswith(".tables"))
    # KV coding: Needle 2 int8 in groups of 32; Needle 3 one group per head vector
    int8_group_k, int8_group_v = kv.int8_group_k, kv.int8_group_v
    k_code, k_groups, v_code, v_groups = kv.k_code_bytes, kv.k_groups, kv.v_code_bytes, kv.v_groups
    kv_bytes = kv.cache_bytes
    assert (n_local, n_global, local_window) == (kv.n_local, kv.n_global, kv.local_window)
    dir_end = HEADER_BYTES[gen] + 4 * CODEBOOK_LEN + RECORD_BYTES * len(a.records)
    tok = a.records[-1]
    # weight bytes a decode step reads: every matrix-vector product streams its whole
    # matrix (the tied head only its first V_out rows, plus the embedding row); row gathers
    # read one row per table; FP16/FP32 control tensors are read once.
    streamed = sum(c["nbytes"] for c in all_cq if not c["role"].endswith(".tables") and c is not embedding)
    streamed += embedding["nbytes"] // V * (v_out + 1)
    streamed += sum(s["tables"]["nbytes"] // s["tables"]["rows"] * T_e for s in sites)
    streamed += sum(r.nbytes for r in a.records if r.dtype != CQ and r.role != "tokenizer"
                    and not r.role.startswith("head"))
    ctx = {
        "streamed_bytes": streamed,
        "provenance": {"archive_sha256": a.sha256(), "archive_bytes": a.size,
                       "generator_version": __version__, "board": opts.board,
                       "kv_window_option": opts.kv_window},
        "kernels": opts.kernels,
        "warnings": warnings,
        "generation": gen,
        "header": dict(h),
        "tag": h["tag"],
        "boot_hash": fnv1a64(memoryview(a.data)[:dir_end]),
        "boot_hash_bytes": dir_end,
        "archive_bytes": a.size,
        "d": d, "V": V, "V_OUT": v_out, "L": L, "H": H, "G": G,
        "HQ": hq, "HV": hv, "AQ": H * hq, "AV": H * hv, "KQ": G * hq, "KV": G * hv,
        "N": N, "LANES": n, "MAX_SEQ": h["max_seq_len"], "S": S, "E": E, "T_E": T_e,
        "SLOTS": h["engram_slots"], "SUB": h["engram_sub_dim"], "ORDERS": orders,
        "HEADS_PER_ORDER": heads_per_order, "SEED_STRIDE": seed_stride,
        "DILATION": h["engram_conv_dilation"], "MAX_ORDER": max(orders) if orders else 1,
        "TAPS": taps, "W_SW": w_sw,
        "window": window, "local_window": local_window, "n_local": n_local, "n_global": n_global,
        "kv_bits": h["kv_bits"], "kv_k_code": k_code, "kv_k_groups": k_groups,
        "kv_v_code": v_code, "kv_v_groups": v_groups,
        "kv_int8_group_k": int8_group_k, "kv_int8_group_v": int8_group_v, "kv_levels": kv_levels,
        "sqrt_d": float(nm.sqrt_f32(d)), "sqrt_hq": float(nm.sqrt_f32(hq)),
        "inv_sqrt_g": float(quant.inv_sqrt(128)), "inv_sqrt_n": float(quant.inv_sqrt(N)),
        "rope_inv_freq": rope_inv_freq(hq, h["rope_theta"]),
        "max_in_pad": max_in_pad,
        "embedding": embedding, "layers": layers, "mhc_vec": mhc_vec, "mhc_cq": mhc_cq,
        "sites": sites, "final_norm": _vec_plan(a, "final_norm"),
        "codebooks": codebooks, "widths": widths,
        "tokenizer_offset": tok.offset, "tokenizer_bytes": tok.nbytes,
        "kv_bytes": kv_bytes,
    }
    # multiply-accumulates of every A8 GEMV of one decode step (whole 128-groups, as computed)
    ctx["macs_per_token"] = v_out * embedding["in_pad"] + sum(
        c["rows"] * c["in_pad"] for c in all_cq if c is not embedding and not c["role"].endswith(".tables"))
    ctx["heads"], ctx["head_tokens"] = _heads_plan(a, opts)
    if gen == 3:
        ba = 1 << ((N.bit_length() - 1) // 2)
        ctx.update(BA=ba, BB=N // ba, COND_RANK=R.N3_COND_RANK,
                   perm1=_vec_plan(a, "hada_p1"), perm2=_vec_plan(a, "hada_p2"))
    return ctx
