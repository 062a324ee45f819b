"""Facts a header implies, each computed once: windows, layer kinds, the KV layout.

The reference model, the code planner, `inspect`, `synth` and `rung` all ask here; none of
them recomputes a window, a global-layer list or a KV byte count of its own.  Every rule is
written out in docs/spec/cact-format.md (header fields), docs/spec/deployment-numerics.md
(budget window) and docs/numerics.md §5 and §11 (KV coding).
"""

from __future__ import annotations

from dataclasses import dataclass

from generator.archive.format import (CQ, KV_BUDGET_BYTES, KV_BUDGET_GROUP, KV_CQ_GROUP,
                                      KV_INT8_GROUP_N2, KV_WINDOW_MIN, cq_geometry)


def generation_of(h: dict) -> int:
    return 2 if "head_dim" in h else 3


def head_widths(h: dict) -> tuple[int, int]:
    """(h_q, h_v): query/key and value widths of one head."""
    if generation_of(h) == 2:
        return h["head_dim"], h["head_dim"]
    return h["qk_head_dim"], h["v_head_dim"]


def global_mask_layers(h: dict) -> list[int]:
    """Needle 3: the layers whose bit is set in the header's global mask (as stored)."""
    mask = (h["global_mask_hi"] << 32) | h["global_mask_lo"]
    return [i for i in range(h["num_layers"]) if mask >> i & 1]


def global_layers(h: dict) -> list[int]:
    """Layers that attend over the whole window: every layer of a Needle 2 model or of a
    Needle 3 model without a sliding band, else the global-mask layers."""
    if generation_of(h) == 2 or h["sliding_window"] == 0:
        return list(range(h["num_layers"]))
    return global_mask_layers(h)


def budget_window(h: dict, budget: int = KV_BUDGET_BYTES) -> int:
    """The KV window a `budget`-byte cache allows (docs/numerics.md §5, "budget window").

    Costs are counted as the budget rule states them (int8 codes plus a 4-byte scale per 32
    values, whatever the engine's own layout), floored to a multiple of 32, at least 160 and
    at most max_seq_len.  Needle 3: local layers and engram sites reserve the sliding band,
    the global layers share the rest (Python floor division: a negative remainder gives the
    minimum window)."""
    G, d, L, S, KVG = h["num_kv_heads"], h["d_model"], h["num_layers"], h["num_engram_sites"], KV_BUDGET_GROUP
    msl = h["max_seq_len"]
    hq, hv = head_widths(h)
    Kq, Kv = G * hq, G * hv
    per_layer = Kq + Kv + (Kq // KVG + Kv // KVG) * 4
    per_site = d + (d // KVG) * 4
    W_sw = 0 if generation_of(h) == 2 else h["sliding_window"]
    if W_sw > 0:
        n_g = len(global_layers(h))
        local = min(W_sw, msl)
        fixed = ((L - n_g) * per_layer + S * per_site) * local
        if n_g == 0:
            return msl if fixed <= budget else max(KV_WINDOW_MIN, local)
        ctx = ((budget - fixed) // (n_g * per_layer)) // KVG * KVG
        return max(KV_WINDOW_MIN, min(ctx, msl))
    per_pos = L * per_layer + S * per_site
    return max(KV_WINDOW_MIN, min((budget // per_pos) // KVG * KVG, msl))


def stored_kv_window(h: dict, configured: int) -> int:
    """The kv_window a builder writes into a header: the budget window, capped by the trained
    window when one is configured, and by max_seq_len (the floor of 160 can exceed a tiny
    model's context, which the format forbids)."""
    budget = budget_window(h)
    return min(budget if configured <= 0 else min(budget, configured), h["max_seq_len"])


def deployment_window(h: dict, budget: int = KV_BUDGET_BYTES) -> int:
    """The window an engine runs with: the header's kv_window, or the budget window when 0."""
    return h["kv_window"] or budget_window(h, budget)


def kv_vector_bytes(width: int, kv_bits: int, int8_group: int) -> tuple[int, int]:
    """(code bytes, scale-or-norm entries) of one stored head vector of `width` values."""
    if kv_bits == 8:
        return width, -(-width // int8_group)
    pad = -(-width // KV_CQ_GROUP) * KV_CQ_GROUP
    return pad * kv_bits // 8, pad // KV_CQ_GROUP


@dataclass(frozen=True)
class KvLayout:
    """How the engine stores its KV cache (docs/numerics.md §5 and §11)."""

    window: int             # positions a global layer keeps
    local_window: int       # positions a local (sliding-band) layer keeps
    n_local: int            # local layers
    n_global: int           # global layers
    kv_bits: int            # 8: int8 with an f16 scale per group; 2-4: CQ codes, f16 norm per 64
    int8_group_k: int       # values per int8 scale (Needle 2: 32; Needle 3: the whole head)
    int8_group_v: int
    k_code_bytes: int       # bytes of codes per stored key vector
    k_groups: int           # scales (int8) or norms (CQ) per stored key vector
    v_code_bytes: int
    v_groups: int
    scale_bytes: int        # 2: an f16 scale (int8) or f16 norm (CQ), numerics version 4
    kv_heads: int
    layers: int

    @property
    def bytes_per_layer_position(self) -> int:
        return self.kv_heads * (self.k_code_bytes + self.v_code_bytes
                                + (self.k_groups + self.v_groups) * self.scale_bytes)

    @property
    def bytes_per_position(self) -> int:
        """Bytes one position costs across every layer."""
        return self.bytes_per_layer_position * self.layers

    @property
    def cache_bytes(self) -> int:
        return self.bytes_per_layer_position * (self.n_local * self.local_window + self.n_global * self.window)


def kv_layout(h: dict, window: int) -> KvLayout:
    """The KV cache of an engine running `window` positions deep."""
    hq, hv = head_widths(h)
    gen = generation_of(h)
    n_global = len(global_layers(h))
    w_sw = 0 if gen == 2 else h["sliding_window"]
    gk = KV_INT8_GROUP_N2 if gen == 2 else hq
    gv = KV_INT8_GROUP_N2 if gen == 2 else hv
    kc, kg = kv_vector_bytes(hq, h["kv_bits"], gk)
    vc, vg = kv_vector_bytes(hv, h["kv_bits"], gv)
    return KvLayout(window=window, local_window=min(w_sw, window) if w_sw else window,
                    n_local=h["num_layers"] - n_global, n_global=n_global, kv_bits=h["kv_bits"],
                    int8_group_k=gk, int8_group_v=gv, k_code_bytes=kc, k_groups=kg,
                    v_code_bytes=vc, v_groups=vg, scale_bytes=2,
                    kv_heads=h["num_kv_heads"], layers=h["num_layers"])


def engram_history_bytes(h: dict) -> int:
    """Per site, the 3·dilation + 1 pre-conv value vectors of d f32 the engram conv reads."""
    return h["num_engram_sites"] * (3 * h["engram_conv_dilation"] + 1) * h["d_model"] * 4


#: Batched prefill (docs/numerics.md §12): the most tokens of one pass over the weights, and
#: the share of the board's engine RAM the pass's per-token vectors may take.
PREFILL_CHUNK_MAX = 32
PREFILL_RAM_SHARE = 64


def _a8_bytes(n: int) -> int:
    """int8 codes of n values padded to 128-groups, and one f32 scale per group."""
    groups = -(-n // 128)
    return groups * 128 + groups * 4


def prefill_token_bytes(h: dict, window: int) -> int:
    """Bytes one token of a prefill pass carries between the products of a layer (the
    engine's token_state; alignment padding aside), and its attention scores over `window`
    positions."""
    hq, hv = head_widths(h)
    d, lanes, heads, kvh = h["d_model"], h["mhc_lanes"], h["num_heads"], h["num_kv_heads"]
    sites = h["num_engram_sites"]
    e = h["num_engram_tables"] * h["engram_sub_dim"]
    floats = (1 + hq + lanes * d + 2 * lanes + lanes * lanes + 2 * d + heads * hq + kvh * hq
              + kvh * hv + 2 * heads * hv + d + sites * 2 * d + heads * window + heads * hq)
    return (4 * floats + _a8_bytes(lanes * d) + _a8_bytes(d) + _a8_bytes(heads * hv)
            + sites * _a8_bytes(e))


def default_prefill_chunk(h: dict, ram_bytes: int, window: int) -> int:
    """Tokens per prefill pass: the largest power of two up to PREFILL_CHUNK_MAX whose
    per-token vectors fit 1/PREFILL_RAM_SHARE of the board's engine RAM (1: token by token)."""
    chunk = PREFILL_CHUNK_MAX
    while chunk > 1 and chunk * prefill_token_bytes(h, window) > ram_bytes // PREFILL_RAM_SHARE:
        chunk //= 2
    return chunk


def session_ram(h: dict, window: int | None = None) -> dict[str, int]:
    """Bytes of state a session needs, as the generated engine lays it out."""
    W = deployment_window(h) if window is None else window
    kv = kv_layout(h, W)
    engram = engram_history_bytes(h)
    return {"window": W, "local_window": kv.local_window, "kv_bits": kv.kv_bits,
            "bytes_per_position": kv.bytes_per_position, "kv_bytes": kv.cache_bytes,
            "engram_history_bytes": engram, "total_bytes": kv.cache_bytes + engram}


# ---- per-token work of a decode step (the planner's report numbers and the engine header) ----

def output_rows(h: dict) -> int:
    """Rows of the tied output head: the vocabulary, or Needle 3's out_vocab when set."""
    if generation_of(h) == 2 or h["out_vocab"] == 0:
        return h["vocab"]
    return h["out_vocab"]


def _is_gemv_matrix(rec) -> bool:
    """A CQ matrix every decode step multiplies in full (not the embedding, a row-gathered
    engram table, or a probe head's tensor)."""
    return (rec.dtype == CQ and rec.role != "embedding" and not rec.role.endswith(".tables")
            and not rec.role.startswith("head"))


def _padded_inputs(rec) -> int:
    return cq_geometry(rec.shape[0], rec.shape[1], rec.group, rec.bits)[0]


def macs_per_token(a) -> int:
    """Multiply-accumulates of every A8 GEMV of one decode step of archive `a`, counted over
    whole 128-groups as the engine computes them (the tied head: its first output rows)."""
    emb = a.record("embedding")
    return output_rows(a.header) * _padded_inputs(emb) + sum(
        r.shape[0] * _padded_inputs(r) for r in a.records if _is_gemv_matrix(r))


def streamed_bytes_per_token(a) -> int:
    """Weight bytes one decode step of archive `a` reads: every matrix-vector product streams
    its whole matrix (the tied head only its output rows, plus the embedding row); row gathers
    read one row per engram table; FP16/FP32 control tensors are read once."""
    h = a.header
    emb = a.record("embedding")
    total = sum(r.nbytes for r in a.records if _is_gemv_matrix(r))
    total += emb.nbytes // h["vocab"] * (output_rows(h) + 1)
    for s in range(h["num_engram_sites"]):
        tables = a.record(f"engram{s}.tables")
        total += tables.nbytes // tables.shape[0] * h["num_engram_tables"]
    total += sum(r.nbytes for r in a.records if r.dtype != CQ and r.role != "tokenizer"
                 and not r.role.startswith("head"))
    return total
