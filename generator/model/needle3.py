"""NumPy reference of the Needle 3 forward pass (spec: needle3-model.md; numerics:
docs/numerics.md §11).

Same two numerics modes as Needle 2:

* ``float``: dequantised weights and BLAS products for every CQ matrix.  Queries, keys and
  values still make the per-head int8 round trip at kv_bits 8 (CQ group 64 at 2–4), because
  that is what Needle 3 was trained with.  The model, not a bit-exact target.
* ``a8``: docs/numerics.md to the letter (A8 products, per-head int8 Q/K/V, sequential f32
  everywhere else): what every generated C engine computes.

What Needle 3 adds over Needle 2 (needle3-model.md §2): split head widths h_q / h_v; a causal
depthwise conv with T_c taps on the raw Q, K, V projections (decode keeps the raw projections
of the last T_c − 1 positions); per-layer sliding-window or global attention; the Monarch
MLP (three Kronecker mixes, two permutations, input conditioning); the engram seed stride;
an output head over the first V_out embedding rows; per-row probe heads.

Attention visibility of key p for the query at t in layer l (docs/numerics.md §11):
``p ≤ t`` and, in a local layer, ``t − p < W_sw``; with the deployment window (the default,
``window="deploy"``: the header's kv_window, 0 → the Needle 3 budget window) additionally
``t − p < W_kv or p < n_sinks`` on every layer.  ``window="package"`` drops the deployment
window and gives the package's logits.  The same rule gates the conv taps (ok_j).

``active_layers`` / ``skip`` run a rung in place (needle3-model.md §8): skipped layers pass
the lanes through, active layers take their lane offsets from their rank, and the probe
heads drop the skipped layers' rows (−∞ in H3).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from generator.archive import roles as R
from generator.errors import CactError
from generator.archive.format import CQ
from generator.model.geometry import budget_window, global_mask_layers
from generator.model import numerics as nm
from generator.model.needle2 import MODES, Needle2, _Linear
from generator.model.numerics import F32

@dataclass
class State3:
    """Everything a Needle 3 sequence carries between calls."""

    tokens: list[int] = field(default_factory=list)
    keys: list[np.ndarray] = field(default_factory=list)      # per layer [P, G, h_q] as coded
    values: list[np.ndarray] = field(default_factory=list)    # per layer [P, G, h_v] as coded
    conv: list[list[np.ndarray]] = field(default_factory=list)  # per layer raw q, k, v of the
    #                                                            last T_c − 1 positions
    engram_v: list[np.ndarray] = field(default_factory=list)  # per site [P, d] pre-conv values
    cells: list[np.ndarray] = field(default_factory=list)     # per call [T, L+1, d]

    @property
    def pos(self) -> int:
        return len(self.tokens)


class Needle3(Needle2):
    """The Needle 3 reference bound to one archive, numerics mode, window and layer set.

    Shares with Needle2 everything the generations share (weights, A8 products, row gathers,
    the engram, embedding, lane mean); overrides the block, attention, the MLP, the forward
    pass (rungs in place), generation and the heads."""

    def __init__(self, archive, mode: str = "a8", window="deploy", n_sinks: int = 0,
                 active_layers=None, skip=None):
        if archive.generation != 3:
            raise CactError(f"archive is Needle {archive.generation}; this reference is Needle 3")
        if mode not in MODES:
            raise CactError(f"unknown numerics mode {mode!r}; choose float or a8")
        self.a, self.mode = archive, mode
        h = self.hdr = archive.header
        self.d, self.V, self.L = h["d_model"], h["vocab"], h["num_layers"]
        self.V_out = h["out_vocab"] or self.V
        self.H, self.G = h["num_heads"], h["num_kv_heads"]
        self.hq, self.hv = h["qk_head_dim"], h["v_head_dim"]
        self.n, self.N = h["mhc_lanes"], h["hada_n"]
        self.theta = h["rope_theta"]
        self.kv_bits = h["kv_bits"]
        self.W_sw = h["sliding_window"]
        self.globals = set(global_mask_layers(h))
        self.Tc = h["qkv_conv_taps"]
        if window == "deploy":
            self.W_kv = h["kv_window"] or budget_window(h)
        elif window == "package":
            self.W_kv = 0
        elif isinstance(window, (int, np.integer)) and not isinstance(window, bool) and window >= 0:
            self.W_kv = int(window)
        else:
            raise CactError(f"unknown window {window!r}; choose 'deploy', 'package' or a size >= 0")
        self.window = window
        self.n_sinks = n_sinks
        self.sites = R.sites(h)
        self.orders = R.orders(h)
        O = len(self.orders)
        self.Eh = h["num_engram_tables"] // O if O else 0
        self.seed_stride = h["engram_seed_heads"] or self.Eh
        if active_layers is not None and skip is not None:
            raise CactError("give active_layers or skip, not both")
        if skip is not None:
            active_layers = [l for l in range(self.L) if l not in set(int(s) for s in skip)]
        active = list(range(self.L)) if active_layers is None else sorted(set(int(l) for l in active_layers))
        if not active or active[0] < 0 or active[-1] >= self.L:
            raise CactError(f"active layers {active} must be a non-empty subset of 0..{self.L - 1}")
        self.active = active
        self.rank = {l: i for i, l in enumerate(active)}
        self.sqrt_d = nm.sqrt_f32(self.d)
        self.sqrt_hq = nm.sqrt_f32(self.hq)
        dm = R.dims(3, h)
        self.ba, self.bb = dm["ba"], dm["bb"]
        self._lin: dict[str, _Linear] = {}
        self._vec: dict[str, np.ndarray] = {}
        self.p1 = self.vec("hada_p1").astype(np.int64)
        self.p2 = self.vec("hada_p2").astype(np.int64)

    # ---- weights ------------------------------------------------------------------
    def head_lin(self) -> _Linear:
        """The tied output head: the first V_out embedding rows."""
        if "__head__" not in self._lin:
            emb = self.lin("embedding")
            self._lin["__head__"] = emb if self.V_out == self.V else emb.rows(slice(0, self.V_out))
        return self._lin["__head__"]

    # ---- visibility ---------------------------------------------------------------
    def is_local(self, l: int) -> bool:
        return self.W_sw > 0 and l not in self.globals

    def visible(self, l: int, t: int, p) -> np.ndarray:
        """Is key position p visible to the query at t in layer l (§6 + deployment window)?"""
        p = np.asarray(p)
        ok = p <= t
        if self.is_local(l):
            ok = ok & (t - p < self.W_sw)
        if self.W_kv:
            ok = ok & ((t - p < self.W_kv) | (p < self.n_sinks))
        return ok

    # ---- engram -------------------------------------------------------------------
    # ---- attention ----------------------------------------------------------------
    def q_code(self, q: np.ndarray) -> np.ndarray:
        """Queries after RoPE: per-head int8 round trip (one group of h_q values)."""
        return nm.int8_roundtrip(q)

    def kv_code(self, x: np.ndarray) -> np.ndarray:
        """What the KV cache gives back: per-head int8 at kv_bits 8, CQ group 64 at 2–4."""
        if self.kv_bits == 8:
            return nm.int8_roundtrip(x)
        return nm.kv_cq(x, self.kv_bits, self.a.codebook)

    def qkv_conv(self, l: int, state: State3, start: int, raws: list[np.ndarray]) -> list[np.ndarray]:
        """B3: causal depthwise conv of the raw projections, tap j = 0 first, each tap only if
        position t − j is visible to t in this layer; keeps the last T_c − 1 raw rows."""
        p = f"layer{l:02d}."
        T = raws[0].shape[0]
        out = []
        for idx, (raw, name) in enumerate(zip(raws, ("q_taps", "k_taps", "v_taps"))):
            taps = self.vec(p + name)
            hist = state.conv[l][idx]
            full = np.concatenate([hist, raw])          # rows for positions start − len(hist) …
            base = start - hist.shape[0]
            acc = np.zeros_like(raw)
            for j in range(self.Tc):
                for row in range(T):
                    t = start + row
                    if t - j >= 0 and self.visible(l, t, t - j):
                        acc[row] = acc[row] + taps[j] * full[t - j - base]
            out.append(acc)
            keep = max(self.Tc - 1, 0)
            state.conv[l][idx] = full[full.shape[0] - keep:] if keep else full[:0]
        return out

    def attention(self, l: int, q: np.ndarray, keys: np.ndarray, values: np.ndarray,
                  start: int) -> np.ndarray:
        """q [T, H, h_q] against the cache of layer l; returns o [T, H, h_v] (§5 B6, §6)."""
        T = q.shape[0]
        r = self.H // self.G
        span = None
        if self.is_local(l):
            span = self.W_sw
        if self.W_kv and self.n_sinks == 0:
            span = self.W_kv if span is None else min(span, self.W_kv)
        lo = max(0, start - span + 1) if span else 0
        P = np.arange(lo, start + T)
        kh = np.repeat(keys[lo:start + T], r, axis=1)    # [P, H, h_q], head i uses group i // r
        vh = np.repeat(values[lo:start + T], r, axis=1)  # [P, H, h_v]
        scores = np.zeros((T, self.H, len(P)), dtype=F32)
        for c in range(self.hq):
            scores = scores + q[:, :, c, None] * kh[None, :, :, c].transpose(0, 2, 1)
        scores = scores / self.sqrt_hq
        mask = np.stack([self.visible(l, start + i, P) for i in range(T)])[:, None, :]
        m = np.where(mask, scores, -np.inf).max(axis=-1, keepdims=True)
        e = np.where(mask, nm.exp(np.where(mask, scores - m, 0)), F32(0))
        w = e / nm.seq_sum(e)[..., None]
        o = np.zeros((T, self.H, self.hv), dtype=F32)
        for k in range(len(P)):
            o = o + w[:, :, k, None] * vh[k][None]
        return o

    # ---- MLP ----------------------------------------------------------------------
    def monarch(self, l: int, c: np.ndarray) -> np.ndarray:
        """The Kronecker (Monarch) Hadamard MLP, M1–M7 (needle3-model.md §5.1)."""
        p = f"layer{l:02d}."
        v = self.vec
        T = c.shape[0]
        s = nm.seq_matvec(v(p + "cond_v").T, c)                        # M1: [T, R]
        pi = nm.softmax(s)
        kappa = nm.ONE + nm.seq_matvec(v(p + "cond_u").T, pi)          # M2: [T, N]
        z0 = np.zeros((T, self.N), dtype=F32)                          # M3
        z0[:, :self.d] = c
        z1 = nm.kron_mix(v(p + "d1") * z0, v(p + "w1a"), v(p + "w1b"))[:, self.p1]     # M4
        pre = ((v(p + "d2") * kappa) * z1) + v(p + "b2")
        z2 = nm.kron_mix(nm.silu(pre), v(p + "w2a"), v(p + "w2b"))[:, self.p2]        # M5
        z3 = nm.kron_mix(v(p + "d3") * z2, v(p + "w3a"), v(p + "w3b"))                 # M6
        return (v(p + "d4") * z3)[:, :self.d]                                          # M7

    # ---- block --------------------------------------------------------------------
    def block(self, l: int, b: np.ndarray, state: State3, start: int) -> np.ndarray:
        """Block_l (needle3-model.md §5) on b [T, d] at positions start..start+T-1."""
        p = f"layer{l:02d}."
        T = b.shape[0]
        H, G, hq, hv = self.H, self.G, self.hq, self.hv
        a = nm.zc_rmsnorm(b, self.vec(p + "norm_in"))                    # B1
        ql = self.lin(p + "q_proj")
        act = self.activation(a, ql)
        q = self.matvec(ql, a, act)                                      # B2: raw projections
        k = self.matvec(self.lin(p + "k_proj"), a, act)
        v = self.matvec(self.lin(p + "v_proj"), a, act)
        if self.Tc:                                                      # B3
            q, k, v = self.qkv_conv(l, state, start, [q, k, v])
        q = nm.zc_rmsnorm(q.reshape(T, H, hq), self.vec(p + "q_norm"))   # B4
        k = nm.zc_rmsnorm(k.reshape(T, G, hq), self.vec(p + "k_norm"))
        v = v.reshape(T, G, hv)
        cos, sin = nm.rope_tables(np.arange(start, start + T), hq, self.theta)
        q = self.q_code(nm.rope(q, cos[:, None], sin[:, None]))
        k = nm.rope(k, cos[:, None], sin[:, None])
        state.keys[l] = np.concatenate([state.keys[l], self.kv_code(k)])  # B5
        state.values[l] = np.concatenate([state.values[l], self.kv_code(v)])
        o = self.attention(l, q, state.keys[l], state.values[l], start).reshape(T, H * hv)  # B6
        o = o * nm.sigmoid(self.matvec(self.lin(p + "gate_proj"), a, act))                # B7
        att = self.matvec(self.lin(p + "out_proj"), o)                                     # B8
        att = nm.zc_rmsnorm(att, self.vec(p + "post_norm"))                                # B9
        x1 = b + nm.sigmoid(self.vec(p + "attn_gate"))[0] * att                            # B10
        c = nm.zc_rmsnorm(x1, self.vec(p + "pre_hada"))                                    # B11
        return x1 + self.monarch(l, c)                                                     # B12-13

    # ---- whole model --------------------------------------------------------------
    def new_state(self) -> State3:
        s = State3()
        s.keys = [np.zeros((0, self.G, self.hq), F32) for _ in range(self.L)]
        s.values = [np.zeros((0, self.G, self.hv), F32) for _ in range(self.L)]
        widths = (self.H * self.hq, self.G * self.hq, self.G * self.hv)
        s.conv = [[np.zeros((0, w), F32) for w in widths] for _ in range(self.L)]
        s.engram_v = [np.zeros((0, self.d), F32) for _ in self.sites]
        return s

    def forward(self, state: State3, tokens) -> np.ndarray:
        """Feed tokens at the next positions; return their logits [T, V_out]."""
        tokens = [int(t) for t in tokens]
        self.check_tokens(state, tokens)
        start, T = state.pos, len(tokens)
        state.tokens.extend(tokens)
        n, d = self.n, self.d
        x0 = self.embed(tokens)                                     # step 1
        ek, ev = {}, {}                                             # step 2 (active sites only)
        for sigma, layer in enumerate(self.sites):
            if layer not in self.rank:
                continue
            k, v = self.engram_kv(sigma, state.tokens, range(start, start + T))
            state.engram_v[sigma] = np.concatenate([state.engram_v[sigma], v])
            ek[sigma], ev[sigma] = k, self.engram_conv(sigma, state, start, T)
        X = np.repeat(x0[:, None, :], n, axis=1)                    # step 3
        cells = [x0]
        phi_pre, phi_post, phi_res = (self.lin("mhc.phi_pre"), self.lin("mhc.phi_post"),
                                      self.lin("mhc.phi_res"))
        a_pre, a_post, a_res = self.vec("mhc.a_pre"), self.vec("mhc.a_post"), self.vec("mhc.a_res")
        b_pre, b_post, b_res = self.vec("mhc.b_pre"), self.vec("mhc.b_post"), self.vec("mhc.b_res")
        for l in range(self.L):
            if l not in self.rank:                                  # a skipped layer: lanes pass
                cells.append(self.lane_mean(X))
                continue
            nu = nm.unit_rms(X.reshape(T, n * d))                   # 4a
            act = self.activation(nu, phi_pre)
            lam = self.rank[l] % n                                  # 4b: offsets from the rank
            off_pre = np.where(np.arange(n) == lam, F32(4), F32(-4))
            off_post = np.where(np.arange(n) == lam, F32(0), F32(-4))
            m_pre = self.matvec(phi_pre.rows(slice(l * n, (l + 1) * n)), nu, act)       # 4c
            h_pre = nm.sigmoid(((a_pre[l] * m_pre) + b_pre[l]) + off_pre)
            u = np.zeros((T, d), dtype=F32)
            for j in range(n):
                u = u + h_pre[:, j, None] * X[:, j]
            b = u                                                   # 4d: engram injection
            if l in self.sites:
                sigma = self.sites.index(l)
                alpha = nm.sigmoid(nm.seq_dot(nm.unit_rms(u), nm.unit_rms(ek[sigma])) / self.sqrt_d)
                b = u + alpha[:, None] * ev[sigma]
            y = self.block(l, b, state, start) - u                  # 4e-4f
            m_post = self.matvec(phi_post.rows(slice(l * n, (l + 1) * n)), nu, act)     # 4g
            h_post = F32(2) * nm.sigmoid(((a_post[l] * m_post) + b_post[l]) + off_post)
            m_res = self.matvec(phi_res.rows(slice(l * n * n, (l + 1) * n * n)), nu, act)  # 4h
            Rm = ((a_res[l] * m_res) + b_res[l].reshape(n * n)).reshape(T, n, n)
            P = nm.sinkhorn(Rm)
            Xn = np.zeros_like(X)                                   # 4i
            for i in range(n):
                acc = np.zeros((T, d), dtype=F32)
                for j in range(n):
                    acc = acc + P[:, i, j, None] * X[:, j]
                Xn[:, i] = acc + h_post[:, i, None] * y
            X = Xn
            cells.append(self.lane_mean(X))
        state.cells.append(np.stack(cells, axis=1))
        z = nm.zc_rmsnorm(self.lane_mean(X), self.vec("final_norm"))   # step 5
        return self.matvec(self.head_lin(), z)

    # ---- conveniences -------------------------------------------------------------
    def generate(self, prompt_ids, max_new: int, stop_at_eos: bool = True) -> list[int]:
        """Greedy continuation over the V_out logits (needle3-model.md §10); the prompt must be
        shorter than max_seq_len.  Returns the new ids (EOS not included)."""
        ids = list(prompt_ids)
        if not ids:
            raise CactError("generate needs a non-empty prompt")
        if len(ids) >= self.hdr["max_seq_len"]:
            raise CactError(f"prompt of {len(ids)} tokens does not fit max_seq_len "
                            f"{self.hdr['max_seq_len']} (it must be shorter)")
        max_len = min(self.hdr["max_seq_len"], len(ids) + max_new)
        if max_len <= len(ids):
            return []
        return self.greedy(ids, max_len, stop_at_eos)

    # ---- probe heads (needle3-model.md §9) ----------------------------------------
    def head_matrix(self, role: str) -> np.ndarray:
        """A head matrix as f32 rows: CQ dequantised (butterfly form), FP16 as stored."""
        rec = self.a.record(role)
        if rec.dtype == CQ:
            return self.gather(role, np.arange(rec.shape[0]))
        arr = self.vec(role)
        return arr.reshape(-1, arr.shape[-1])

    def heads(self, tokens) -> dict[str, np.ndarray]:
        """Every probe head of the archive on one sequence: {name: output}.

        H1 per-row probe pooling over tokens (token id 0 excluded), H2 unit RMS × gain,
        H3 row-attention logits (rows of skipped layers −∞), H4 softmax over all (ℓ, κ),
        H5–H6 pooled rows per query, H7 proj · g + bias; the embedding head is normalised.
        Same arithmetic in both modes (the cells differ); sums ascending, as everywhere.
        """
        state = self.new_state()
        self.forward(state, tokens)
        cells = np.concatenate(state.cells)                      # [T, L+1, d]
        T, rows_n = cells.shape[0], self.L + 1
        keep = np.asarray(tokens) != 0
        dropped = np.array([False] + [l not in self.rank for l in range(self.L)])
        out = {}
        for hd in self.a.heads:
            pre = f"head.{hd.name}."
            probes = self.head_matrix(pre + "probes")
            k = probes.shape[0] // rows_n
            probes = probes.reshape(rows_n, k, self.d)
            gain = self.vec(pre + "gain")                         # [L+1, k]
            query = self.head_matrix(pre + "query")               # [q, d]
            row_bias = self.vec(pre + "row_bias")                 # [q, L+1, k]
            proj = self.head_matrix(pre + "proj")                 # [out, q·d]
            bias = self.vec(pre + "bias")
            # H1: score_p per (row, probe), softmax over kept tokens, pool the row's cells
            score = nm.seq_dot(cells[:, :, None, :], probes[None]) / self.sqrt_d   # [T, L+1, k]
            score = np.where(keep[:, None, None], score, F32(-np.inf))
            omega = nm.softmax(np.moveaxis(score, 0, -1))                        # [L+1, k, T]
            r = np.zeros((rows_n, k, self.d), dtype=F32)
            for p in range(T):
                r = r + omega[:, :, p, None] * cells[p][:, None, :]
            r = nm.unit_rms(r) * gain[..., None]                                   # H2
            u = nm.seq_dot(r[None], query[:, None, None, :]) / self.sqrt_d + row_bias  # H3
            u = np.where(dropped[None, :, None], F32(-np.inf), u)
            q = query.shape[0]
            beta = nm.softmax(u.reshape(q, rows_n * k))                            # H4
            rf = r.reshape(rows_n * k, self.d)
            g = np.zeros((q, self.d), dtype=F32)
            for idx in range(rows_n * k):                                          # H5
                g = g + beta[:, idx, None] * rf[idx][None]
            e = nm.seq_matvec(proj, g.reshape(q * self.d)) + bias                  # H6-H7
            if hd.code == 1:
                e = e / np.sqrt(nm.seq_sum(e * e) + F32(1e-12))
            out[hd.name] = e
        return out
