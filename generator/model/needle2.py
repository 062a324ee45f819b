"""NumPy reference of the Needle 2 forward pass (spec: needle2-model.md).

Two numerics modes:

* ``float``: dequantised weights, float32 activations, f32 KV cache at kv_bits 8 (what the
  model was trained for).  Matrix products use BLAS; this mode is the model, not a bit-exact
  target.
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
from generator.model import numerics as nm
from generator.model.numerics import ENGRAM_HASH_PRIME, ENGRAM_HASH_SEED, F32, MASK32, f32

MODES = ("float", "a8")


@dataclass
class State:
    """Everything a sequence carries between calls."""

    tokens: list[int] = field(default_factory=list)
    keys: list[np.ndarray] = field(default_factory=list)      # per layer [P, G, h]
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
        if mode == "float":
            self.w = t.dequantize()
        else:
            lvl, self.s_c = nm.int8_levels(t.bits, t.archive.codebook, t.group)
            self.lvl = lvl[t.indices()].astype(F32).reshape(t.out, t.ng, t.group)
            self.norms = t.norms().astype(F32)
        self.mode = mode

    def rows(self, sl: slice) -> "_Linear":
        view = object.__new__(_Linear)
        view.__dict__.update(self.__dict__)
        if self.mode == "float":
            view.w = self.w[sl]
        else:
            view.lvl, view.norms = self.lvl[sl], self.norms[sl]
        view.out = view.lvl.shape[0] if self.mode == "a8" else view.w.shape[0]
        return view


class Needle2:
    """The reference model bound to one archive, one numerics mode and one KV window."""

    def __init__(self, archive, mode: str = "a8", kv_window: int | None = None, n_sinks: int = 0):
        if archive.generation != 2:
            raise CactError(f"archive is Needle {archive.generation}; this reference is Needle 2")
        if mode not in MODES:
            raise CactError(f"unknown numerics mode {mode!r}; choose float or a8")
        self.a, self.mode = archive, mode
        h = archive.header
        self.hdr = h
        self.d, self.V, self.L = h["d_model"], h["vocab"], h["num_layers"]
        self.H, self.G, self.hd = h["num_heads"], h["num_kv_heads"], h["head_dim"]
        self.n, self.N = h["mhc_lanes"], h["hada_n"]
        self.theta = h["rope_theta"]
        self.kv_bits = h["kv_bits"]
        self.window = h["kv_window"] if kv_window is None else kv_window
        self.n_sinks = n_sinks
        self.sites = R.sites(h)
        self.orders = R.orders(h)
        self.sqrt_d = nm.sqrt_f32(self.d)
        self.sqrt_h = nm.sqrt_f32(self.hd)
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

    def matvec(self, lin: _Linear, x: np.ndarray, act=None) -> np.ndarray:
        """W x for a CQ matrix; `act` reuses an already rotated/quantised input (a8)."""
        if self.mode == "float":
            return (f32(x) @ lin.w.T).astype(F32)
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
        """(slot, valid) of every table τ = i·E_h + η at position t (needle2-model.md §4
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

    # ---- attention ----------------------------------------------------------------
    def kv_code(self, x: np.ndarray) -> np.ndarray:
        """What the KV cache gives back for a stored head vector (its round trip)."""
        if self.kv_bits == 8:
            return x if self.mode == "float" else nm.kv_int8(x)
        return nm.kv_cq(x, self.kv_bits, self.a.codebook)

    def visible(self, t: int, p: np.ndarray) -> np.ndarray:
        ok = p <= t
        if self.window:
            ok &= (t - p < self.window) | (p < self.n_sinks)
        return ok

    def attention(self, q: np.ndarray, keys: np.ndarray, values: np.ndarray, start: int) -> np.ndarray:
        """q [T, H, h] against the cache [P, G, h]; returns o [T, H, h] (§5 B6, §6)."""
        T = q.shape[0]
        r = self.H // self.G
        lo = 0
        if self.window and self.n_sinks == 0:
            lo = max(0, start - self.window + 1)
        P = np.arange(lo, start + T)
        kh = np.repeat(keys[lo:start + T], r, axis=1)    # [P, H, h], head i uses group i // r
        vh = np.repeat(values[lo:start + T], r, axis=1)
        scores = np.zeros((T, self.H, len(P)), dtype=F32)
        for c in range(self.hd):
            scores = scores + q[:, :, c, None] * kh[None, :, :, c].transpose(0, 2, 1)
        scores = scores / self.sqrt_h
        mask = np.stack([self.visible(start + i, P) for i in range(T)])[:, None, :]
        m = np.where(mask, scores, -np.inf).max(axis=-1, keepdims=True)
        e = np.where(mask, nm.exp(np.where(mask, scores - m, 0)), F32(0))
        w = e / nm.seq_sum(e)[..., None]
        o = np.zeros((T, self.H, self.hd), dtype=F32)
        for k in range(len(P)):
            o = o + w[:, :, k, None] * vh[k][None]
        return o

    # ---- block --------------------------------------------------------------------
    def block(self, l: int, b: np.ndarray, state: State, start: int) -> np.ndarray:
        """Block_l (needle2-model.md §5) on b [T, d] at positions start..start+T-1."""
        p = f"layer{l:02d}."
        T = b.shape[0]
        H, G, hd = self.H, self.G, self.hd
        # B1-B2: normalise, project to queries, keys, values (one quantised input)
        a = nm.zc_rmsnorm(b, self.vec(p + "norm_in"))
        ql = self.lin(p + "q_proj")
        act = self.activation(a, ql)
        q = self.matvec(ql, a, act).reshape(T, H, hd)
        k = self.matvec(self.lin(p + "k_proj"), a, act).reshape(T, G, hd)
        v = self.matvec(self.lin(p + "v_proj"), a, act).reshape(T, G, hd)
        # B3-B4: per-head ZC-RMSNorm, then RoPE at the absolute position
        q = nm.zc_rmsnorm(q, self.vec(p + "q_norm"))
        k = nm.zc_rmsnorm(k, self.vec(p + "k_norm"))
        cos, sin = nm.rope_tables(np.arange(start, start + T), hd, self.theta)
        q = nm.rope(q, cos[:, None], sin[:, None])
        k = nm.rope(k, cos[:, None], sin[:, None])
        # B5: append to the cache in its stored coding
        state.keys[l] = np.concatenate([state.keys[l], self.kv_code(k)])
        state.values[l] = np.concatenate([state.values[l], self.kv_code(v)])
        # B6-B7: attention, gated by σ(Wgate a)
        o = self.attention(q, state.keys[l], state.values[l], start).reshape(T, H * hd)
        gate = nm.sigmoid(self.matvec(self.lin(p + "gate_proj"), a, act))
        o = o * gate
        # B8-B10: output projection, post-norm, scalar-gated residual
        att = self.matvec(self.lin(p + "out_proj"), o)
        att = nm.zc_rmsnorm(att, self.vec(p + "post_norm"))
        x1 = b + nm.sigmoid(self.vec(p + "attn_gate"))[0] * att
        # B11-B13: Hadamard MLP on the pre-normalised residual
        c = nm.zc_rmsnorm(x1, self.vec(p + "pre_hada"))
        z = np.zeros((T, self.N), dtype=F32)
        z[:, :self.d] = c
        z = nm.wht(self.vec(p + "d1") * z)
        z = nm.wht(nm.silu(self.vec(p + "d2") * z))
        mlp = (self.vec(p + "d3") * z)[:, :self.d]
        return x1 + mlp

    # ---- whole model --------------------------------------------------------------
    def new_state(self) -> State:
        s = State()
        s.keys = [np.zeros((0, self.G, self.hd), F32) for _ in range(self.L)]
        s.values = [np.zeros((0, self.G, self.hd), F32) for _ in range(self.L)]
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
        """Feed tokens at the next positions; return their logits [T, V]."""
        tokens = [int(t) for t in tokens]
        self.check_tokens(state, tokens)
        start, T = state.pos, len(tokens)
        state.tokens.extend(tokens)
        n, d, L = self.n, self.d, self.L
        x0 = self.embed(tokens)                                     # step 1
        # step 2: engram keys and pre-conv values for every site, then the dilated conv
        ek, ev = {}, {}
        for sigma in range(len(self.sites)):
            k, v = self.engram_kv(sigma, state.tokens, range(start, start + T))
            state.engram_v[sigma] = np.concatenate([state.engram_v[sigma], v])
            ek[sigma], ev[sigma] = k, self.engram_conv(sigma, state, start, T)
        X = np.repeat(x0[:, None, :], n, axis=1)                    # step 3: [T, n, d]
        cells = [x0]
        phi_pre, phi_post, phi_res = (self.lin("mhc.phi_pre"), self.lin("mhc.phi_post"),
                                      self.lin("mhc.phi_res"))
        a_pre, a_post, a_res = self.vec("mhc.a_pre"), self.vec("mhc.a_post"), self.vec("mhc.a_res")
        b_pre, b_post, b_res = self.vec("mhc.b_pre"), self.vec("mhc.b_post"), self.vec("mhc.b_res")
        for l in range(L):
            # 4a: unit-RMS router input over all lanes
            nu = nm.unit_rms(X.reshape(T, n * d))
            act = self.activation(nu, phi_pre)
            lam = l % n
            off_pre = np.where(np.arange(n) == lam, F32(4), F32(-4))
            off_post = np.where(np.arange(n) == lam, F32(0), F32(-4))
            # 4c: pre map mixes the lanes into the block input u
            m_pre = self.matvec(phi_pre.rows(slice(l * n, (l + 1) * n)), nu, act)
            h_pre = nm.sigmoid(((a_pre[l] * m_pre) + b_pre[l]) + off_pre)
            u = np.zeros((T, d), dtype=F32)
            for j in range(n):
                u = u + h_pre[:, j, None] * X[:, j]
            # 4d: engram injection at a site, gated by the key's agreement with u
            b = u
            if l in self.sites:
                sigma = self.sites.index(l)
                alpha = nm.sigmoid(nm.seq_dot(nm.unit_rms(u), nm.unit_rms(ek[sigma])) / self.sqrt_d)
                b = u + alpha[:, None] * ev[sigma]
            # 4e-4f: the block and its residual delta
            y = self.block(l, b, state, start) - u
            # 4g: post map, 4h: Sinkhorn routing between lanes
            m_post = self.matvec(phi_post.rows(slice(l * n, (l + 1) * n)), nu, act)
            h_post = F32(2) * nm.sigmoid(((a_post[l] * m_post) + b_post[l]) + off_post)
            m_res = self.matvec(phi_res.rows(slice(l * n * n, (l + 1) * n * n)), nu, act)
            Rm = ((a_res[l] * m_res) + b_res[l].reshape(n * n)).reshape(T, n, n)
            P = nm.sinkhorn(Rm)
            # 4i: route the lanes and add the block's delta
            Xn = np.zeros_like(X)
            for i in range(n):
                acc = np.zeros((T, d), dtype=F32)
                for j in range(n):
                    acc = acc + P[:, i, j, None] * X[:, j]
                Xn[:, i] = acc + h_post[:, i, None] * y
            X = Xn
            cells.append(self.lane_mean(X))
        state.cells.append(np.stack(cells, axis=1))
        # step 5: mean of lanes, final norm, tied head
        z = nm.zc_rmsnorm(self.lane_mean(X), self.vec("final_norm"))
        return self.matvec(self.lin("embedding"), z)

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
        """Greedy continuation (needle2-model.md §8); returns the new ids (EOS not included)."""
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

    # ---- probe heads (needle2-model.md §9) ----------------------------------------
    def heads(self, tokens) -> dict[str, np.ndarray]:
        state = self.new_state()
        self.forward(state, tokens)
        cells = np.concatenate(state.cells).reshape(-1, self.d)   # c = p·(L+1) + ℓ
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
            g = np.concatenate(pooled)
            e = nm.seq_matvec(proj, g) + bias
            if hd.code == 1:
                e = e / np.sqrt(nm.seq_sum(e * e) + F32(1e-12))
            out[hd.name] = e
        return out
