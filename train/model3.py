"""The Needle 3 forward pass in JAX, for training (float numerics).

The float mode of generator/model/needle3.py (docs/spec/needle3-model.md §4–§6, docs/numerics.md
§11) over whole batches of sequences, on parameters by role name (generator/archive/roles.py,
generation 3).  Everything Needle 3 shares with Needle 2 (embedding, engram, lanes and mHC
routing, the block skeleton, final norm) is train/model.py's code; this module adds what
needle3.py overrides:

* split head widths h_q (queries, keys, norms, RoPE, the 1/√h_q scale) and h_v (values, the
  attention output, gate_proj and out_proj);
* B3: a causal depthwise conv of T_c taps over the raw Q, K, V projections, tap j only where
  position t − j is visible to t in this layer;
* per-head int8 round trips of the queries and keys after RoPE and of the values (one group
  per head vector).  The float reference applies them because Needle 3 was trained with them;
  here they are fake quantisation with a straight-through gradient (kv_bits 8 only);
* per-layer visibility: p ≤ t, and t − p < W_sw in a local layer (not in the global mask),
  and the deployment window t − p < W_kv on every layer (the reference's default
  window="deploy": the header's kv_window, 0 → the budget window; no sinks);
* the Monarch MLP (M1–M7: conditioning, three Kronecker mixes, the two stored permutations);
* the engram seed stride (engram_seed_heads) and the tied head over the first V_out rows.

Not modelled: rungs run in place (every layer is active) and the probe heads; both are
outside the teacher-forced logits this module trains.  The permutations hada_p1/hada_p2 are
parameters (the archive holds them) but constants: their gradient is zero and the trainer
freezes them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from generator.archive import roles as R
from generator.model import numerics as nm
from generator.model.geometry import budget_window, global_mask_layers
from train import model as M
from train.model import gqa, causal_mask, linear, rope, zc_rmsnorm


@dataclass(frozen=True)
class Geometry3:
    """The Needle 3 header facts the forward pass needs (hashable: static under jit)."""

    d: int
    V: int
    V_out: int
    H: int
    G: int
    hq: int
    hv: int
    L: int
    n: int
    N: int
    ba: int
    bb: int
    theta: float
    kv_window: int          # the deployment window on every layer (0: none)
    W_sw: int               # the sliding band of local layers (0: every layer is global)
    globals: tuple
    Tc: int
    kv_bits: int
    sites: tuple
    orders: tuple
    Eh: int
    seed_stride: int
    M: int
    s: int
    T_e: int
    dilation: int

    @classmethod
    def from_header(cls, hdr: dict, window="deploy") -> "Geometry3":
        """`window` as Needle3's: "deploy" (kv_window, 0 → the budget window), "package"
        (none) or an explicit size."""
        orders = tuple(R.orders(hdr))
        dm = R.dims(3, hdr)
        Eh = hdr["num_engram_tables"] // len(orders) if orders else 0
        if window == "deploy":
            W_kv = hdr["kv_window"] or budget_window(hdr)
        elif window == "package":
            W_kv = 0
        else:
            W_kv = int(window)
        return cls(d=hdr["d_model"], V=hdr["vocab"], V_out=hdr["out_vocab"] or hdr["vocab"],
                   H=hdr["num_heads"], G=hdr["num_kv_heads"], hq=hdr["qk_head_dim"],
                   hv=hdr["v_head_dim"], L=hdr["num_layers"], n=hdr["mhc_lanes"], N=hdr["hada_n"],
                   ba=dm["ba"], bb=dm["bb"], theta=float(np.float32(hdr["rope_theta"])),
                   kv_window=W_kv, W_sw=hdr["sliding_window"],
                   globals=tuple(global_mask_layers(hdr)), Tc=hdr["qkv_conv_taps"],
                   kv_bits=hdr["kv_bits"], sites=tuple(R.sites(hdr)), orders=orders, Eh=Eh,
                   seed_stride=hdr["engram_seed_heads"] or Eh, M=hdr["engram_slots"],
                   s=hdr["engram_sub_dim"], T_e=hdr["num_engram_tables"],
                   dilation=hdr["engram_conv_dilation"])

    def is_local(self, l: int) -> bool:
        return self.W_sw > 0 and l not in self.globals

    def windows(self, l: int) -> tuple:
        """The limits on t − p in layer l (0 = none): its sliding band, the deployment window."""
        return (self.W_sw if self.is_local(l) else 0, self.kv_window)


def engram_rows(geo: Geometry3, tokens: np.ndarray):
    """model.engram_rows with the Needle 3 seed stride."""
    return M.engram_rows(geo, tokens, geo.seed_stride)


# ---- Needle 3 pieces ------------------------------------------------------------------

def int8_roundtrip(x):
    """numerics.int8_roundtrip (one int8 group per vector along the last axis: scale amax/127,
    codes rne(x·(127/amax))) as fake quantisation: the forward value is the round trip, the
    gradient passes straight through."""
    amax = jnp.max(jnp.abs(x), axis=-1, keepdims=True)
    nz = amax > 0
    safe = jax.lax.stop_gradient(jnp.where(nz, amax, 1.0))
    # XLA turns a division by a constant or a broadcast scalar into a product with its
    # reciprocal (one more rounding); a full-shape divisor behind a barrier stays a division
    c127 = jax.lax.optimization_barrier(jnp.full_like(safe, 127.0))
    code = jnp.clip(jnp.round(x * (c127 / safe)), -127, 127)
    back = code * jnp.where(nz, safe / c127, 0.0)
    return x + jax.lax.stop_gradient(back - x)


def qkv_conv(geo: Geometry3, p: dict, l: int, q, k, v):
    """B3: out(t) = Σ_j tap[j] ⊙ raw(t − j), j = 0 … T_c − 1 ascending, tap j only when
    t − j ≥ 0 and position t − j is visible to t in this layer (j below every window)."""
    if not geo.Tc:
        return q, k, v
    pre = f"layer{l:02d}."
    T = q.shape[1]
    lim = [w for w in geo.windows(l) if w]
    out = []
    for raw, name in ((q, "q_taps"), (k, "k_taps"), (v, "v_taps")):
        taps = p[pre + name]
        acc = jnp.zeros_like(raw)
        for j in range(geo.Tc):
            if j >= T or any(j >= w for w in lim):
                continue
            moved = raw if j == 0 else jnp.pad(raw, ((0, 0), (j, 0), (0, 0)))[:, :T]
            acc = acc + taps[j] * moved
        out.append(acc)
    return tuple(out)


def kron_mix(z, aa, bb):
    """Kron(z; Aa, Bb) = Aaᵀ · Z · Bb on the row-major [b_a, b_b] reshape of the last axis
    (the left factor contracted on its first index)."""
    Z = z.reshape(z.shape[:-1] + (aa.shape[0], bb.shape[0]))
    t = jnp.einsum("ik,...ij->...kj", aa, Z)
    y = jnp.einsum("...kj,jm->...km", t, bb)
    return y.reshape(z.shape)


def mlp(geo: Geometry3, p: dict, pre: str, c):
    """M1–M7: the conditioned Kronecker (Monarch) Hadamard MLP on c [B, T, d]."""
    pi = jax.nn.softmax(c @ p[pre + "cond_v"], axis=-1)                         # M1
    kappa = 1.0 + pi @ p[pre + "cond_u"]                                         # M2
    z0 = jnp.pad(c, ((0, 0), (0, 0), (0, geo.N - geo.d)))                        # M3
    p1 = jax.lax.stop_gradient(p["hada_p1"]).astype(jnp.int32)
    p2 = jax.lax.stop_gradient(p["hada_p2"]).astype(jnp.int32)
    z1 = kron_mix(p[pre + "d1"] * z0, p[pre + "w1a"], p[pre + "w1b"])[..., p1]  # M4
    h = ((p[pre + "d2"] * kappa) * z1) + p[pre + "b2"]
    z2 = kron_mix(jax.nn.silu(h), p[pre + "w2a"], p[pre + "w2b"])[..., p2]      # M5
    z3 = kron_mix(p[pre + "d3"] * z2, p[pre + "w3a"], p[pre + "w3b"])           # M6
    return (p[pre + "d4"] * z3)[..., :geo.d]                                     # M7


def block(geo: Geometry3, p: dict, l: int, b, cos, sin):
    """The Needle 3 Block_l (docs/spec/needle3-model.md §5 B1–B13) on b [B, T, d]."""
    pre = f"layer{l:02d}."
    B, T, _ = b.shape
    a = zc_rmsnorm(b, p[pre + "norm_in"])                                        # B1
    q = linear(p[pre + "q_proj"], a)                                             # B2
    k = linear(p[pre + "k_proj"], a)
    v = linear(p[pre + "v_proj"], a)
    q, k, v = qkv_conv(geo, p, l, q, k, v)                                       # B3
    q = zc_rmsnorm(q.reshape(B, T, geo.H, geo.hq), p[pre + "q_norm"])            # B4
    k = zc_rmsnorm(k.reshape(B, T, geo.G, geo.hq), p[pre + "k_norm"])
    v = v.reshape(B, T, geo.G, geo.hv)
    q = int8_roundtrip(rope(q, cos, sin))                                        # query code
    k = int8_roundtrip(rope(k, cos, sin))                                        # B5: KV codes
    v = int8_roundtrip(v)
    o = gqa(q, k, v, causal_mask(T, geo.windows(l))).reshape(B, T, geo.H * geo.hv)   # B6
    o = o * jax.nn.sigmoid(linear(p[pre + "gate_proj"], a))                      # B7
    att = zc_rmsnorm(linear(p[pre + "out_proj"], o), p[pre + "post_norm"])       # B8-B9
    x1 = b + jax.nn.sigmoid(p[pre + "attn_gate"][0]) * att                       # B10
    c = zc_rmsnorm(x1, p[pre + "pre_hada"])                                      # B11
    return x1 + mlp(geo, p, pre, c)                                              # B12-B13


def rope_tables(T: int, P: int, theta: float):
    """The reference's own f32 tables (numerics.rope_tables), built once per shape outside the
    graph: a query or key a hair off the reference's moves its int8 code more easily."""
    cos, sin = nm.rope_tables(np.arange(T), P, theta)
    return jnp.asarray(cos), jnp.asarray(sin)


# ---- the model -----------------------------------------------------------------------

def hidden(geo: Geometry3, p: dict, tokens, rows, valid):
    """Steps 1–5 up to the final norm: z [B, T, d], the input of the tied head."""
    if geo.kv_bits != 8:
        raise NotImplementedError("model3 codes the KV cache as int8 (kv_bits 8) only")
    T = tokens.shape[1]
    x0 = p["embedding"][tokens] * np.float32(math.sqrt(geo.d))                  # step 1
    eng = M.engram(geo, p, rows, valid)                                          # step 2
    X = jnp.repeat(x0[:, :, None, :], geo.n, axis=2)                             # step 3
    cos, sin = rope_tables(T, geo.hq, geo.theta)
    for l in range(geo.L):                                                       # step 4
        X = M.layer(geo, p, l, X, eng, cos, sin, block_fn=block)
    return zc_rmsnorm(jnp.mean(X, axis=2), p["final_norm"])                      # step 5


def logits_of(p: dict, z, V_out: int | None = None):
    """The tied head over the first V_out embedding rows (forward passes geo.V_out)."""
    return M.logits_of(p, z, V_out)


def forward(geo: Geometry3, p: dict, tokens, rows, valid):
    """Teacher-forced logits [B, T, V_out] of whole sequences."""
    return logits_of(p, hidden(geo, p, tokens, rows, valid), geo.V_out)


def init_params(hdr: dict, seed: int) -> dict:
    """model.init_params for generation 3 (the synthesiser's control-tensor draws, its fixed
    fp32 permutations)."""
    return M.init_params(hdr, seed, gen=3)


FROZEN = ("hada_p1", "hada_p2")   # parameters the trainer must not update


__all__ = ["Geometry3", "engram_rows", "forward", "hidden", "logits_of", "init_params", "FROZEN"]
