"""NumPy reference of the Needle 2 forward pass (spec: docs/spec/needle2-model.md).

Two numerics modes:

* ``float``: dequantised weights, float32 activations, f32 KV cache at kv_bits 8 (what the
  model was trained for).  Matrix products are f64 row by row, rounded once to f32
  (numerics.float_matvec), so no result depends on the batch shape or the CPU's BLAS kernel;
  this mode is the model, not a bit-exact target.
* ``a8``: the deployment numerics of docs/numerics.md that every C engine implements to the
  letter: rotated int8 activations against integer codebook levels, int8 (or CQ) KV cache,
  sequential f32 reductions everywhere else.

The model processes a batch of consecutive positions per call (`forward`), appending to a
`State` (KV cache, token history, engram value history).  Every operation is position-wise
except attention and the engram conv, which read the state, so prefill-then-decode and the
full-sequence forward give the same result.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from generator.archive import quant
from generator.archive import roles as R
from generator.errors import CactError
from generator.archive.format import BOS_ID, EOS_ID
from generator.archive.format import KV_INT8_GROUP_N2
from generator.model import numerics as nm
from generator.model.numerics import ENGRAM_HASH_PRIME, ENGRAM_HASH_SEED, F32, MASK32

MODES = ("float", "a8")


@dataclass
class State:
    """Everything a sequence carries between calls."""

    tokens: list[int] = field(default_factory=list)
    keys: list[np.ndarray] = field(default_factory=list)      # per layer [P, G, h]
    key_codes: list[np.ndarray] = field(default_factory=list)  # a8 at kv_bits 8: [P, G, h] int8
    key_scales: list[np.ndarray] = field(default_factory=list) # ... and [P, G, groups] f32
    value_codes: list[np.ndarray] = field(default_factory=list)   # the same for values
    value_scales: list[np.ndarray] = field(default_factory=list)
    values: list[np.ndarray] = field(default_factory=list)
    engram_v: list[np.ndarray] = field(default_factory=list)  # per site [P, d] pre-conv values
    cells: list[np.ndarray] = field(default_factory=list)     # per call [T, L+1, d] (probe heads)

    @property
    def pos(self) -> int:
        return len(self.tokens)


class _Linear:
    """A CQ matrix prepared for one numerics mode."""

    def __init__(self, t, mode: str):
        self.out, self.inp, self.in_pad = t.out, t.inp, t.in_pad
        if mode == "float":       # Wᵀ in f64 [in, out] (numerics.float_matvec)
            w = nm.float_weights(t.indices(), t.norms(), t.bits, t.archive.codebook, t.inp, t.group)
            self.wt64 = w.astype(np.float64).T
        else:
            lvl, self.s_c = nm.int8_levels(t.bits, t.archive.codebook, t.group)
            self.lvl = lvl[t.indices()].astype(F32).reshape(t.out, t.ng, t.group)
            self.norms = t.norms().astype(F32)
        self.mode = mode

    def rows(self, sl: slice) -> "_Linear":
        view = object.__new__(_Linear)
        view.__dict__.update(self.__dict__)
        if self.mode == "float":
            view.wt64 = self.wt64[:, sl]
        else:
            view.lvl, view.norms = self.lvl[sl], self.norms[sl]
        view.out = view.lvl.shape[0] if self.mode == "a8" else view.wt64.shape[1]
        return view


class Needle2:
    """The reference model bound to one archive, one numerics mode and one KV window.

    `forward` is a fixed sequence of named steps (docs/spec/needle2-model.md §4): `embed`, `engram`,
    then per layer `layer` (lane routing 4a–4i around `block`: B1–B13 with `attention` and
    `mlp`), then `head`.  Needle 3 subclasses this and overrides only the steps that differ;
    the hooks it overrides are identities or the Needle 2 form here (`qkv_mix`, `q_code`,
    `kv_code`, `visible`, `span`, `lane`, `mlp`, `engram_sites`, `layer`)."""

    GENERATION = 2
    STATE = State

    def __init__(self, archive, mode: str = "a8", kv_window: int | None = None, n_sinks: int = 0):
        self._bind(archive, mode, n_sinks)
        self.hd = self.hdr["head_dim"]
        self.hq = self.hv = self.hd          # query/key and value head widths (Needle 3 splits them)
        self.sqrt_hq = nm.sqrt_f32(self.hq)
        self.window = self.W_kv = self.hdr["kv_window"] if kv_window is None else kv_window

    def _bind(self, archive, mode: str, n_sinks: int) -> None:
        """Check the archive and mode; read the header facts both generations share."""
        if archive.generation != self.GENERATION:
            raise CactError(f"archive is Needle {archive.generation}; this reference is "
                            f"Needle {self.GENERATION}")
        if mode not in MODES:
            raise CactError(f"unknown numerics mode {mode!r}; choose float or a8")
        self.a, self.mode = archive, mode
        h = self.hdr = archive.header
        self.d, self.V, self.L = h["d_model"], h["vocab"], h["num_layers"]
        self.V_out = self.V                  # logit columns (Needle 3: out_vocab)
        self.H, self.G = h["num_heads"], h["num_kv_heads"]
        self.n, self.N = h["mhc_lanes"], h["hada_n"]
        self.theta = h["rope_theta"]
        self.kv_bits = h["kv_bits"]
        self.n_sinks = n_sinks
        self.sites = R.sites(h)
        self.orders = R.orders(h)
        self.sqrt_d = nm.sqrt_f32(self.d)
        self.Eh = h["num_engram_tables"] // len(self.orders) if self.orders else 0
        self.seed_stride = self.Eh           # Needle 3 may widen it (engram_seed_heads)
        self._lin: dict[str, _Linear] = {}
        self._vec: dict[str, np.ndarray] = {}

    # ---- weights ------------------------------------------------------------------
    def vec(self, role: str) -> np.ndarray:
        if role not in self._vec:
            self._vec[role] = self.a.array(role)
        return self._vec[role]

    def lin(self, role: str) -> _Linear:
        if role not in self._lin:
            self._lin[role] = _Linear(self.a.cq(role), self.mode)
        return self._lin[role]

    def head_lin(self) -> _Linear:
        """The tied output head: the first V_out embedding rows."""
        if "__head__" not in self._lin:
            emb = self.lin("embedding")
            self._lin["__head__"] = emb if self.V_out == self.V else emb.rows(slice(0, self.V_out))
        return self._lin["__head__"]

    def matvec(self, lin: _Linear, x: np.ndarray, act=None) -> np.ndarray:
        """W x for a CQ matrix; `act` reuses an already rotated/quantised input (a8)."""
        if self.mode == "float":
            return nm.float_matvec(lin.wt64, x)
        q, gs = act if act is not None else nm.a8_activation(x, lin.in_pad)
        return nm.a8_gemv(q, gs, lin.lvl, lin.norms, lin.s_c)

    def activation(self, x: np.ndarray, lin: _Linear):
        return None if self.mode == "float" else nm.a8_activation(x, lin.in_pad)

    def gather(self, role: str, rows: np.ndarray) -> np.ndarray:
        """Dequantised rows of a CQ table (butterfly form, docs/numerics.md)."""
        t = self.a.cq(role)
        idx = quant.unpack(t.packed()[rows], t.bits, t.in_pad)
        return quant.dequantize_fwht(idx, t.norms()[rows], t.bits, self.a.codebook, t.inp, t.group)

    # ---- engram -------------------------------------------------------------------
    def engram_slots(self, tokens: list[int], t: int) -> list[tuple[int, bool]]:
        """(slot, valid) of every table τ = i·E_h + η at position t (docs/spec/needle2-model.md §4
        step 2a/2b); the hash seed uses stride `seed_stride` (E_h, or Needle 3's Σ)."""
        M = self.hdr["engram_slots"]
        out = []
        for i, o in enumerate(self.orders):
            valid = t - (o - 1) >= 0
            for eta in range(self.Eh):
                acc = (ENGRAM_HASH_SEED * (i * self.seed_stride + eta + 1)) & MASK32
                for j in range(o):
                    tok = tokens[t - j] if t - j >= 0 else 0
                    acc = ((acc ^ tok) * ENGRAM_HASH_PRIME) & MASK32
                acc ^= acc >> 15
                out.append((acc % M, valid))
        return out

    def engram_kv(self, sigma: int, tokens: list[int], positions: range):
        """Key and pre-conv value of site σ at each position: ([T, d], [T, d])."""
        s = self.hdr["engram_sub_dim"]
        T_e = self.hdr["num_engram_tables"]
        M = self.hdr["engram_slots"]
        feats = np.zeros((len(positions), T_e * s), dtype=F32)
        for row, t in enumerate(positions):
            slots = self.engram_slots(tokens, t)
            idx = np.array([tau * M + slot for tau, (slot, _) in enumerate(slots)])
            vals = self.gather(f"engram{sigma}.tables", idx)
            for tau, (_, valid) in enumerate(slots):
                if valid:
                    feats[row, tau * s:(tau + 1) * s] = vals[tau]
        key_l, val_l = self.lin(f"engram{sigma}.key_proj"), self.lin(f"engram{sigma}.value_proj")
        act = self.activation(feats, key_l)
        return self.matvec(key_l, feats, act), self.matvec(val_l, feats, act)

    def engram_conv(self, sigma: int, state: State, start: int, T: int) -> np.ndarray:
        """v'(t) = Σ_j c[j] ⊙ v(t − jδ), j = 0..3 in order, terms before position 0 skipped."""
        taps = self.vec(f"engram{sigma}.taps")
        delta = self.hdr["engram_conv_dilation"]
        hist = state.engram_v[sigma]
        out = np.zeros((T, self.d), dtype=F32)
        for row in range(T):
            t = start + row
            acc = np.zeros(self.d, dtype=F32)
            for j in range(4):
                if t - j * delta >= 0:
                    acc = acc + taps[j] * hist[t - j * delta]
            out[row] = acc
        return out

    def engram_sites(self):
        """Indices σ of the engram sites this model runs (all of them)."""
        return range(len(self.sites))

    def engram(self, state: State, start: int, T: int) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Step 2: per running site σ, the keys and the dilated-conv values of the new positions
        (the pre-conv values are appended to the site's history first)."""
        out = {}
        for sigma in self.engram_sites():
            k, v = self.engram_kv(sigma, state.tokens, range(start, start + T))
            state.engram_v[sigma] = np.concatenate([state.engram_v[sigma], v])
            out[sigma] = k, self.engram_conv(sigma, state, start, T)
        return out

    def inject(self, l: int, u: np.ndarray, eng: dict) -> np.ndarray:
        """Step 4d: at an engram site, add the value gated by the key's agreement with u."""
        if l not in self.sites:
            return u
        k, v = eng[self.sites.index(l)]
        alpha = nm.sigmoid(nm.seq_dot(nm.unit_rms(u), nm.unit_rms(k)) / self.sqrt_d)
        return u + alpha[:, None] * v

    # ---- attention ----------------------------------------------------------------
    def qkv_mix(self, l: int, state: State, start: int, q, k, v):
        """B3 on the raw projections: nothing in Needle 2 (Needle 3: the QKV conv)."""
        return q, k, v

    def q_code(self, q: np.ndarray) -> np.ndarray:
        """Queries after RoPE as attention reads them: unchanged in Needle 2."""
        return q

    @property
    def int8_scores(self) -> bool:
        """a8 at kv_bits 8: attention scores are integer dots on the int8 codes (§6)."""
        return self.mode == "a8" and self.kv_bits == 8

    def key_group(self) -> int:
        """Values sharing one int8 scale in a stored key (Needle 2: 32)."""
        return KV_INT8_GROUP_N2

    def value_group(self) -> int:
        """... and in a stored value."""
        return KV_INT8_GROUP_N2

    def kv_code(self, x: np.ndarray) -> np.ndarray:
        """What the KV cache gives back for a stored head vector (its round trip)."""
        if self.kv_bits == 8:
            return x if self.mode == "float" else nm.kv_int8(x)
        return nm.kv_cq(x, self.kv_bits, self.a.codebook)

    def visible(self, l: int, t: int, p) -> np.ndarray:
        """Is key position p visible to the query at t in layer l (KV window, sinks)?"""
        p = np.asarray(p)
        ok = p <= t
        if self.W_kv:
            ok = ok & ((t - p < self.W_kv) | (p < self.n_sinks))
        return ok

    def span(self, l: int) -> int:
        """How many cache rows back the queries of layer l can reach (0: all of them)."""
        return self.W_kv if self.n_sinks == 0 else 0

    def attention(self, l: int, q: np.ndarray, keys, values,
                  start: int) -> np.ndarray:
        """q [T, H, h_q] against the cache of layer l [P, G, ·]; returns o [T, H, h_v] (§5 B6, §6).
        `keys`, `values`: the coded vectors [P, G, h] as f32, or (int8 codes, scales) where
        the scores are integer dots and the value scales fold into the weights
        (`int8_scores`)."""
        T = q.shape[0]
        r = self.H // self.G
        span = self.span(l)
        lo = max(0, start - span + 1) if span else 0
        P = np.arange(lo, start + T)
        if isinstance(keys, tuple):
            codes, scales = (np.repeat(x[lo:start + T], r, axis=1) for x in keys)
            scores = nm.int8_scores(q, codes, scales, self.key_group(), self.sqrt_hq)
        else:
            kh = np.repeat(keys[lo:start + T], r, axis=1)    # [P, H, h_q]
            scores = np.zeros((T, self.H, len(P)), dtype=F32)
            for c in range(self.hq):
                scores = scores + q[:, :, c, None] * kh[None, :, :, c].transpose(0, 2, 1)
            scores = scores / self.sqrt_hq
            vh = np.repeat(values[lo:start + T], r, axis=1)  # [P, H, h_v], head i uses group i // r
        mask = np.stack([self.visible(l, start + i, P) for i in range(T)])[:, None, :]
        m = np.where(mask, scores, -np.inf).max(axis=-1, keepdims=True)
        e = np.where(mask, nm.exp(np.where(mask, scores - m, 0)), F32(0))
        w = e / nm.seq_sum(e)[..., None]
        if isinstance(values, tuple):
            codes, scales = (np.repeat(x[lo:start + T], r, axis=1) for x in values)
            return nm.int8_weighted_sum(w, mask, codes, scales, self.value_group())
        o = np.zeros((T, self.H, self.hv), dtype=F32)
        for k in range(len(P)):
            o = o + w[:, :, k, None] * vh[k][None]
        return o

    # ---- MLP ----------------------------------------------------------------------
    def mlp(self, l: int, c: np.ndarray) -> np.ndarray:
        """B12: the Hadamard MLP on the pre-normalised residual c [T, d]."""
        p = f"layer{l:02d}."
        z = np.zeros((c.shape[0], self.N), dtype=F32)
        z[:, :self.d] = c
        z = nm.wht(self.vec(p + "d1") * z)
        z = nm.wht(nm.silu(self.vec(p + "d2") * z))
        return (self.vec(p + "d3") * z)[:, :self.d]

    # ---- block --------------------------------------------------------------------
    def block(self, l: int, b: np.ndarray, state: State, start: int) -> np.ndarray:
        """Block_l (docs/spec/needle2-model.md §5, docs/spec/needle3-model.md §5) on b [T, d] at positions
        start..start+T-1."""
        p = f"layer{l:02d}."
        T = b.shape[0]
        a = nm.zc_rmsnorm(b, self.vec(p + "norm_in"))                       # B1
        ql = self.lin(p + "q_proj")
        act = self.activation(a, ql)                                        # one quantised input
        q = self.matvec(ql, a, act)                                         # B2: raw projections
        k = self.matvec(self.lin(p + "k_proj"), a, act)
        v = self.matvec(self.lin(p + "v_proj"), a, act)
        q, k, v = self.qkv_mix(l, state, start, q, k, v)                    # B3
        q = nm.zc_rmsnorm(q.reshape(T, self.H, self.hq), self.vec(p + "q_norm"))   # B4: norm, RoPE
        k = nm.zc_rmsnorm(k.reshape(T, self.G, self.hq), self.vec(p + "k_norm"))
        v = v.reshape(T, self.G, self.hv)
        cos, sin = nm.rope_tables(np.arange(start, start + T), self.hq, self.theta)
        q = nm.rope(q, cos[:, None], sin[:, None])
        k = nm.rope(k, cos[:, None], sin[:, None])
        if self.int8_scores:                                                # B5: cache
            for x, grp, codes, scales in ((k, self.key_group(), state.key_codes, state.key_scales),
                                          (v, self.value_group(), state.value_codes, state.value_scales)):
                c, sc = nm.kv_int8_codes(x, grp)
                codes[l] = np.concatenate([codes[l], c])
                scales[l] = np.concatenate([scales[l], sc])
            keys = (state.key_codes[l], state.key_scales[l])
            values = (state.value_codes[l], state.value_scales[l])
        else:
            q = self.q_code(q)
            state.keys[l] = np.concatenate([state.keys[l], self.kv_code(k)])
            state.values[l] = np.concatenate([state.values[l], self.kv_code(v)])
            keys, values = state.keys[l], state.values[l]
        o = self.attention(l, q, keys, values, start).reshape(T, self.H * self.hv)
        o = o * nm.sigmoid(self.matvec(self.lin(p + "gate_proj"), a, act))  # B6-B7: gated
        att = self.matvec(self.lin(p + "out_proj"), o)                      # B8
        att = nm.zc_rmsnorm(att, self.vec(p + "post_norm"))                 # B9
        x1 = b + nm.sigmoid(self.vec(p + "attn_gate"))[0] * att             # B10
        c = nm.zc_rmsnorm(x1, self.vec(p + "pre_hada"))                     # B11
        return x1 + self.mlp(l, c)                                          # B12-B13

    # ---- whole model --------------------------------------------------------------
    def new_state(self) -> State:
        s = self.STATE()
        s.keys = [np.zeros((0, self.G, self.hq), F32) for _ in range(self.L)]
        s.key_codes = [np.zeros((0, self.G, self.hq), np.int8) for _ in range(self.L)]
        ng = -(-self.hq // self.key_group())
        s.key_scales = [np.zeros((0, self.G, ng), F32) for _ in range(self.L)]
        s.value_codes = [np.zeros((0, self.G, self.hv), np.int8) for _ in range(self.L)]
        ng = -(-self.hv // self.value_group())
        s.value_scales = [np.zeros((0, self.G, ng), F32) for _ in range(self.L)]
        s.values = [np.zeros((0, self.G, self.hv), F32) for _ in range(self.L)]
        s.engram_v = [np.zeros((0, self.d), F32) for _ in self.sites]
        return s

    def embed(self, tokens) -> np.ndarray:
        return self.gather("embedding", np.asarray(tokens)) * self.sqrt_d

    def check_tokens(self, state: State, tokens) -> None:
        for tok in tokens:
            if not 0 <= int(tok) < self.V:
                raise CactError(f"token id {tok} is outside the vocabulary [0, {self.V})")
        if state.pos + len(tokens) > self.hdr["max_seq_len"]:
            raise CactError(f"sequence of {state.pos + len(tokens)} tokens exceeds max_seq_len "
                            f"{self.hdr['max_seq_len']}")

    def forward(self, state: State, tokens) -> np.ndarray:
        """Feed tokens at the next positions; return their logits [T, V_out]."""
        tokens = [int(t) for t in tokens]
        self.check_tokens(state, tokens)
        start, T = state.pos, len(tokens)
        state.tokens.extend(tokens)
        x0 = self.embed(tokens)                                     # step 1
        eng = self.engram(state, start, T)                          # step 2
        X = np.repeat(x0[:, None, :], self.n, axis=1)               # step 3: [T, n, d]
        cells = [x0]
        for l in range(self.L):                                     # step 4
            X = self.layer(l, X, eng, state, start)
            cells.append(self.lane_mean(X))
        state.cells.append(np.stack(cells, axis=1))
        return self.head(X)                                         # step 5

    def lane(self, l: int) -> int:
        """λ: the lane layer l reads and writes first (step 4b)."""
        return l % self.n

    def layer(self, l: int, X: np.ndarray, eng: dict, state: State, start: int) -> np.ndarray:
        """Step 4 for layer l on the lanes X [T, n, d]: mHC routing around the block."""
        T, n, d = X.shape
        phi_pre, phi_post, phi_res = (self.lin("mhc.phi_pre"), self.lin("mhc.phi_post"),
                                      self.lin("mhc.phi_res"))
        v = self.vec
        nu = nm.unit_rms(X.reshape(T, n * d))                       # 4a: unit-RMS router input
        act = self.activation(nu, phi_pre)
        first = np.arange(n) == self.lane(l)                        # 4b: lane offsets
        off_pre = np.where(first, F32(4), F32(-4))
        off_post = np.where(first, F32(0), F32(-4))
        m_pre = self.matvec(phi_pre.rows(slice(l * n, (l + 1) * n)), nu, act)        # 4c: pre map
        h_pre = nm.sigmoid(((v("mhc.a_pre")[l] * m_pre) + v("mhc.b_pre")[l]) + off_pre)
        u = np.zeros((T, d), dtype=F32)
        for j in range(n):
            u = u + h_pre[:, j, None] * X[:, j]
        b = self.inject(l, u, eng)                                  # 4d
        y = self.block(l, b, state, start) - u                      # 4e-4f: the block's delta
        m_post = self.matvec(phi_post.rows(slice(l * n, (l + 1) * n)), nu, act)      # 4g
        h_post = F32(2) * nm.sigmoid(((v("mhc.a_post")[l] * m_post) + v("mhc.b_post")[l]) + off_post)
        m_res = self.matvec(phi_res.rows(slice(l * n * n, (l + 1) * n * n)), nu, act)  # 4h
        Rm = ((v("mhc.a_res")[l] * m_res) + v("mhc.b_res")[l].reshape(n * n)).reshape(T, n, n)
        P = nm.sinkhorn(Rm)
        Xn = np.zeros_like(X)                                       # 4i: route, add the delta
        for i in range(n):
            acc = np.zeros((T, d), dtype=F32)
            for j in range(n):
                acc = acc + P[:, i, j, None] * X[:, j]
            Xn[:, i] = acc + h_post[:, i, None] * y
        return Xn

    def head(self, X: np.ndarray) -> np.ndarray:
        """Step 5: mean of lanes, final norm, the tied head."""
        z = nm.zc_rmsnorm(self.lane_mean(X), self.vec("final_norm"))
        return self.matvec(self.head_lin(), z)

    def lane_mean(self, X: np.ndarray) -> np.ndarray:
        acc = np.zeros((X.shape[0], self.d), dtype=F32)
        for i in range(self.n):
            acc = acc + X[:, i]
        return acc / F32(self.n)

    # ---- conveniences -------------------------------------------------------------
    def logits(self, tokens) -> np.ndarray:
        """Teacher-forced logits of a whole sequence from an empty state: [T, V_out] f32."""
        return self.forward(self.new_state(), tokens)

    def generate(self, prompt_ids, max_new: int, stop_at_eos: bool = True) -> list[int]:
        """Greedy continuation (docs/spec/needle2-model.md §8); returns the new ids (EOS not included)."""
        ids = list(prompt_ids)[: self.hdr["max_seq_len"] - 1]
        max_len = min(self.hdr["max_seq_len"], len(ids) + max_new)
        return self.greedy(ids, max_len, stop_at_eos)

    def greedy(self, ids: list[int], max_len: int, stop_at_eos: bool = True) -> list[int]:
        """Prefill `ids`, then pick arg-max tokens (first index on ties) until EOS or until
        the sequence holds `max_len` tokens; the new ids, EOS not included."""
        state = self.new_state()
        logits = self.forward(state, ids)[-1]
        out: list[int] = []
        while True:
            nxt = int(np.argmax(logits))
            if stop_at_eos and nxt == EOS_ID:
                break
            out.append(nxt)
            if len(ids) + len(out) >= max_len:
                break
            logits = self.forward(state, [nxt])[-1]
        return out

    def prompt_ids(self, text: str, tok) -> list[int]:
        return [BOS_ID] + tok.encode(text)

    # ---- probe heads (docs/spec/needle2-model.md §9) ----------------------------------------
    def cells(self, tokens) -> np.ndarray:
        """The probe heads' cells of a whole sequence from an empty state: [T, L+1, d]."""
        state = self.new_state()
        self.forward(state, tokens)
        return np.concatenate(state.cells)

    def head_out(self, hd, proj: np.ndarray, g: np.ndarray, bias: np.ndarray) -> np.ndarray:
        """proj · g + bias (ascending sums); the contrastive/embedding head is unit-normalised."""
        e = nm.seq_matvec(proj, g) + bias
        if hd.code == 1:
            e = e / np.sqrt(nm.seq_sum(e * e) + F32(1e-12))
        return e

    def heads(self, tokens) -> dict[str, np.ndarray]:
        cells = self.cells(tokens).reshape(-1, self.d)            # c = p·(L+1) + ℓ
        keep = np.repeat(np.asarray(tokens) != 0, self.L + 1)
        out = {}
        for hd in self.a.heads:
            pre = f"head.{hd.name}."
            probes, proj, bias = self.vec(pre + "probes"), self.vec(pre + "proj"), self.vec(pre + "bias")
            pooled = []
            for kappa in range(probes.shape[0]):
                score = nm.seq_dot(cells, probes[kappa]) / self.sqrt_d
                w = nm.softmax(score[keep][None])[0]
                pooled.append(nm.seq_sum((w[:, None] * cells[keep]).T))
            out[hd.name] = self.head_out(hd, proj, np.concatenate(pooled), bias)
        return out
