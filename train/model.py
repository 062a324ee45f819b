"""The Needle 2 forward pass in JAX, for training (float numerics).

This is the float reference of generator/model/needle2.py (docs/spec/needle2-model.md §4–§5)
written over whole batches of sequences so JAX can differentiate it: the same steps in the
same order (embed, engram, lanes, per layer the mHC routing around the block, head), on the
same parameters by role name (generator/archive/roles.py), so an archive exported from these
parameters gives the reference the logits this module computes (host_tests/test_train_model.py
checks it on the same weights).  What differs is only float evaluation order: the reference
fixes its reduction order for cross-CPU identity, XLA picks its own.

Parameters are a dict role name -> float32 array in the archive's own shapes ([out, in] for
every CQ matrix, the dequantised values); `export.py` quantises them with the project's writer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from generator.archive import quant, roles as R
from generator.archive.format import CQ, FP32
from generator.model.numerics import ENGRAM_HASH_PRIME, ENGRAM_HASH_SEED

EPS = 1e-6
SINKHORN_ITERS = 20


@dataclass(frozen=True)
class Geometry:
    """The header facts the forward pass needs, hashable so jit can treat them as static."""

    d: int
    V: int
    H: int
    G: int
    h: int
    L: int
    n: int
    N: int
    theta: float
    kv_window: int
    sites: tuple
    orders: tuple
    Eh: int
    M: int
    s: int
    T_e: int
    dilation: int

    @classmethod
    def from_header(cls, hdr: dict) -> "Geometry":
        orders = tuple(R.orders(hdr))
        return cls(d=hdr["d_model"], V=hdr["vocab"], H=hdr["num_heads"], G=hdr["num_kv_heads"],
                   h=hdr["head_dim"], L=hdr["num_layers"], n=hdr["mhc_lanes"], N=hdr["hada_n"],
                   theta=float(np.float32(hdr["rope_theta"])), kv_window=hdr["kv_window"],
                   sites=tuple(R.sites(hdr)), orders=orders,
                   Eh=hdr["num_engram_tables"] // len(orders) if orders else 0,
                   M=hdr["engram_slots"], s=hdr["engram_sub_dim"], T_e=hdr["num_engram_tables"],
                   dilation=hdr["engram_conv_dilation"])

    @property
    def V_out(self) -> int:
        """Rows of the tied head: every vocabulary row in Needle 2."""
        return self.V


# ---- engram slots: integer hashing of the token history (computed outside the graph) --

def engram_rows(geo: Geometry, tokens: np.ndarray,
                seed_stride: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Table rows τ·M + slot and validity of every engram table at every position.

    tokens [B, T] int -> (rows [B, T, T_e] int32, valid [B, T, T_e] float32), the hash of
    docs/spec/needle2-model.md §4 step 2a/2b vectorised over positions (same integers as
    Needle2.engram_slots).  The seed of table i·E_h + η is 0x9E3779B9·(i·Σ + η + 1) with
    stride Σ = `seed_stride` (Needle 3's engram_seed_heads), E_h when None."""
    stride = geo.Eh if seed_stride is None else seed_stride
    tokens = np.asarray(tokens, dtype=np.uint64)
    B, T = tokens.shape
    mask = np.uint64(0xFFFFFFFF)
    rows = np.zeros((B, T, geo.T_e), dtype=np.int32)
    valid = np.zeros((B, T, geo.T_e), dtype=np.float32)
    pos = np.arange(T)
    for i, o in enumerate(geo.orders):
        shifted = [np.concatenate([np.zeros((B, j), np.uint64), tokens[:, :T - j]], axis=1)
                   for j in range(o)]                     # tokens[t - j], 0 before position 0
        for eta in range(geo.Eh):
            acc = np.full((B, T), (ENGRAM_HASH_SEED * (i * stride + eta + 1)) & 0xFFFFFFFF,
                          dtype=np.uint64)
            for j in range(o):
                acc = ((acc ^ shifted[j]) * np.uint64(ENGRAM_HASH_PRIME)) & mask
            acc ^= acc >> np.uint64(15)
            tau = i * geo.Eh + eta
            rows[:, :, tau] = tau * geo.M + (acc % np.uint64(geo.M)).astype(np.int32)
            valid[:, :, tau] = (pos - (o - 1) >= 0)[None, :]
    return rows, valid


# ---- building blocks (the float forms of generator/model/numerics.py) ---------------

def zc_rmsnorm(x, gamma):
    """((1 + γ)·x) / sqrt(mean x² + 1e-6) over the last axis."""
    ms = jnp.mean(x * x, axis=-1, keepdims=True)
    return ((1.0 + gamma) * x) / jnp.sqrt(ms + EPS)


def unit_rms(x):
    return x * (1.0 / jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + EPS))


def rope_tables(T: int, P: int, theta: float):
    j = np.arange(P // 2, dtype=np.float64)
    omega = 1.0 / np.power(theta, 2.0 * j / P)
    phi = np.arange(T, dtype=np.float64)[:, None] * omega[None, :]
    return jnp.asarray(np.cos(phi), jnp.float32), jnp.asarray(np.sin(phi), jnp.float32)


def rope(x, cos, sin):
    """Rotate-half RoPE on [..., T, heads, P] with tables [T, P/2]."""
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return jnp.concatenate([a * c - b * s, b * c + a * s], axis=-1)


def sinkhorn(r):
    """Sinkhorn over the last two axes (rows, then columns), SINKHORN_ITERS times.

    The spec iterates in the log domain (λ ← λ − logsumexp); this is the same map in the
    exp domain, as the engine and the reference compute it (docs/numerics.md §2.2):
    K = exp(λ) once, then K ← K / row sums, K ← K / column sums, equal in exact arithmetic
    and without an exp or log per iteration (the log-domain form was a quarter of a
    training step).  Each row is shifted by its maximum first (row normalisation cancels the
    shift) and exponents are floored at −60 so that no row or column can underflow to all
    zeros; where the engine's rows spread wider than 60 it falls back to the log domain
    instead.  host_tests/test_train_model.py compares the logits with the reference's."""
    k = jnp.exp(jnp.maximum(r - jax.lax.stop_gradient(jnp.max(r, axis=-1, keepdims=True)), -60.0))
    for _ in range(SINKHORN_ITERS):
        k = k / jnp.sum(k, axis=-1, keepdims=True)
        k = k / jnp.sum(k, axis=-2, keepdims=True)
    return k


def linear(w, x):
    """x @ Wᵀ for a CQ role's [out, in] matrix."""
    return x @ w.T


# ---- the model -----------------------------------------------------------------------

def engram(geo: Geometry, p: dict, rows, valid) -> list:
    """Step 2: per site, the key and the dilated-conv value at every position ([B, T, d])."""
    out = []
    for sigma in range(len(geo.sites)):
        pre = f"engram{sigma}."
        feats = p[pre + "tables"][rows] * valid[..., None]          # [B, T, T_e, s]
        feats = feats.reshape(feats.shape[:2] + (geo.T_e * geo.s,))
        k = linear(p[pre + "key_proj"], feats)
        v = linear(p[pre + "value_proj"], feats)
        taps = p[pre + "taps"]
        T = v.shape[1]
        conv = taps[0] * v
        for j in range(1, 4):                                       # v(t − jδ), zero before 0
            shift = j * geo.dilation
            if shift < T:
                moved = jnp.pad(v, ((0, 0), (shift, 0), (0, 0)))[:, :T]
                conv = conv + taps[j] * moved
        out.append((k, conv))
    return out


def causal_mask(T: int, windows=()) -> np.ndarray:
    """[T, T] visibility of key p to query t: p ≤ t and t − p < w for every non-zero w."""
    t = np.arange(T)[:, None]
    pp = np.arange(T)[None, :]
    ok = pp <= t
    for w in windows:
        if w:
            ok = ok & (t - pp < w)
    return ok


def gqa(q, k, v, ok):
    """GQA of q [B, T, H, h_q] over k [B, T, G, h_q], v [B, T, G, h_v] under the mask ok
    [T, T]; head i reads group i // (H/G); scores / √h_q.  Returns [B, T, H, h_v]."""
    r = q.shape[2] // k.shape[2]
    kh = jnp.repeat(k, r, axis=2)
    vh = jnp.repeat(v, r, axis=2)
    scores = jnp.einsum("bthc,bphc->bhtp", q, kh) / np.float32(math.sqrt(q.shape[-1]))
    scores = jnp.where(ok[None, None], scores, -jnp.inf)
    w = jax.nn.softmax(scores, axis=-1)
    return jnp.einsum("bhtp,bphc->bthc", w, vh)


def attention(geo: Geometry, q, k, v):
    """Causal (and windowed) GQA over [B, T, heads, h]; head i reads group i // (H/G)."""
    return gqa(q, k, v, causal_mask(q.shape[1], (geo.kv_window,)))


def mlp(geo: Geometry, p: dict, pre: str, c):
    """B12: the Hadamard MLP (diagonals around two normalised Walsh-Hadamard transforms)."""
    Hn = jnp.asarray(quant.hadamard(geo.N))
    z = jnp.pad(c, ((0, 0), (0, 0), (0, geo.N - geo.d)))
    z = (p[pre + "d1"] * z) @ Hn
    z = jax.nn.silu(p[pre + "d2"] * z) @ Hn
    return (p[pre + "d3"] * z)[..., :geo.d]


def block(geo: Geometry, p: dict, l: int, b, cos, sin):
    """Block_l (docs/spec/needle2-model.md §5 B1–B13) on b [B, T, d]."""
    pre = f"layer{l:02d}."
    B, T, _ = b.shape
    a = zc_rmsnorm(b, p[pre + "norm_in"])                                       # B1
    q = linear(p[pre + "q_proj"], a).reshape(B, T, geo.H, geo.h)                # B2
    k = linear(p[pre + "k_proj"], a).reshape(B, T, geo.G, geo.h)
    v = linear(p[pre + "v_proj"], a).reshape(B, T, geo.G, geo.h)
    q = rope(zc_rmsnorm(q, p[pre + "q_norm"]), cos, sin)                        # B4
    k = rope(zc_rmsnorm(k, p[pre + "k_norm"]), cos, sin)
    o = attention(geo, q, k, v).reshape(B, T, geo.H * geo.h)                    # B5-B6
    o = o * jax.nn.sigmoid(linear(p[pre + "gate_proj"], a))                     # B7
    att = zc_rmsnorm(linear(p[pre + "out_proj"], o), p[pre + "post_norm"])      # B8-B9
    x1 = b + jax.nn.sigmoid(p[pre + "attn_gate"][0]) * att                      # B10
    c = zc_rmsnorm(x1, p[pre + "pre_hada"])                                     # B11
    return x1 + mlp(geo, p, pre, c)                                             # B12-B13


def layer(geo: Geometry, p: dict, l: int, X, eng, cos, sin, block_fn=block):
    """Step 4 for layer l on the lanes X [B, T, n, d]: mHC routing around the block
    (`block_fn`: this module's Needle 2 block, or model3's)."""
    B, T, n, d = X.shape
    nu = unit_rms(X.reshape(B, T, n * d))                                       # 4a
    first = np.arange(n) == l % n                                               # 4b
    off_pre = np.where(first, 4.0, -4.0).astype(np.float32)
    off_post = np.where(first, 0.0, -4.0).astype(np.float32)
    m_pre = linear(p["mhc.phi_pre"][l * n:(l + 1) * n], nu)                     # 4c
    h_pre = jax.nn.sigmoid(p["mhc.a_pre"][l] * m_pre + p["mhc.b_pre"][l] + off_pre)
    u = jnp.einsum("btj,btjd->btd", h_pre, X)
    b = u
    if l in geo.sites:                                                          # 4d
        k, v = eng[geo.sites.index(l)]
        alpha = jax.nn.sigmoid(jnp.sum(unit_rms(u) * unit_rms(k), axis=-1) / np.float32(math.sqrt(d)))
        b = u + alpha[..., None] * v
    y = block_fn(geo, p, l, b, cos, sin) - u                                    # 4e-4f
    m_post = linear(p["mhc.phi_post"][l * n:(l + 1) * n], nu)                   # 4g
    h_post = 2.0 * jax.nn.sigmoid(p["mhc.a_post"][l] * m_post + p["mhc.b_post"][l] + off_post)
    m_res = linear(p["mhc.phi_res"][l * n * n:(l + 1) * n * n], nu)             # 4h
    Rm = (p["mhc.a_res"][l] * m_res + p["mhc.b_res"][l].reshape(n * n)).reshape(B, T, n, n)
    P = sinkhorn(Rm)
    return jnp.einsum("btij,btjd->btid", P, X) + h_post[..., None] * y[:, :, None, :]   # 4i


def hidden(geo: Geometry, p: dict, tokens, rows, valid):
    """Steps 1–5 up to the final norm: z [B, T, d], the input of the tied head."""
    T = tokens.shape[1]
    x0 = p["embedding"][tokens] * np.float32(math.sqrt(geo.d))                 # step 1
    eng = engram(geo, p, rows, valid)                                           # step 2
    X = jnp.repeat(x0[:, :, None, :], geo.n, axis=2)                            # step 3
    cos, sin = rope_tables(T, geo.h, geo.theta)
    for l in range(geo.L):                                                      # step 4
        X = layer(geo, p, l, X, eng, cos, sin)
    return zc_rmsnorm(jnp.mean(X, axis=2), p["final_norm"])                     # step 5


def logits_of(p: dict, z, V_out: int | None = None):
    """The tied head: z · Eᵀ over the first V_out embedding rows (None: all of them)."""
    return z @ p["embedding"][:V_out].T


def forward(geo: Geometry, p: dict, tokens, rows, valid):
    """Teacher-forced logits [B, T, V] of whole sequences."""
    return logits_of(p, hidden(geo, p, tokens, rows, valid))


# ---- parameters ----------------------------------------------------------------------

def init_params(hdr: dict, seed: int, gen: int = 2) -> dict:
    """Initial parameters: matrices scaled 1/√in, control tensors drawn as the synthesiser
    draws a trained model's (generator/commands/synth.py), so the untrained network already
    routes its lanes, gates and MLP diagonals the way trained ones do.  Needle 3's FP32
    permutations are the synthesiser's (the package's) fixed ones."""
    from generator.commands import synth
    rnd = synth._Draw(seed)
    dm = R.dims(gen, hdr)
    out = {}
    for role in R.core_roles(gen, hdr):
        name = role.name.split(".")[-1]
        if role.dtype == CQ:
            o, i = role.shape
            if role.name == "embedding":
                w = rnd.normal(role.shape, 1.0 / math.sqrt(dm["d"]))
            elif name == "tables":
                w = rnd.normal(role.shape, 1.0 / math.sqrt(dm["s"]))
            elif name.startswith("phi_"):
                w = rnd.normal(role.shape, 0.5 / math.sqrt(i))
            elif name == "out_proj":
                w = rnd.normal(role.shape, 0.5 / math.sqrt(i))
            else:
                w = rnd.normal(role.shape, 1.0 / math.sqrt(i))
        elif role.dtype == FP32:
            rs = 11 if name == "hada_p1" else 13
            w = np.random.RandomState(rs).permutation(dm["N"]).astype(np.float32)
        else:
            w = np.asarray(synth._draw_control(gen, name, role.shape, rnd, dm)).reshape(role.shape)
        out[role.name] = jnp.asarray(w, jnp.float32)
    return out


__all__ = ["Geometry", "engram_rows", "forward", "hidden", "logits_of", "init_params"]
