"""NumPy reference of the Needle 3 forward pass (spec: docs/spec/needle3-model.md; numerics:
docs/numerics.md §11).

Same two numerics modes as Needle 2:

* ``float``: dequantised weights and f64 row products rounded to f32 for every CQ matrix
  (numerics.float_matvec: batch- and CPU-independent, see issue 14 §1).  Queries, keys and
  values still make the per-head int8 round trip at kv_bits 8 (CQ group 64 at 2–4), because
  that is what Needle 3 was trained with.  The model, not a bit-exact target.
* ``a8``: docs/numerics.md to the letter (A8 products, per-head int8 Q/K/V, sequential f32
  everywhere else): what every generated C engine computes.

What Needle 3 adds over Needle 2 (docs/spec/needle3-model.md §2): split head widths h_q / h_v; a causal
depthwise conv with T_c taps on the raw Q, K, V projections (decode keeps the raw projections
of the last T_c − 1 positions); per-layer sliding-window or global attention; the Monarch
MLP (three Kronecker mixes, two permutations, input conditioning); the engram seed stride;
an output head over the first V_out embedding rows; per-row probe heads.

Attention visibility of key p for the query at t in layer l (docs/numerics.md §11):
``p ≤ t`` and, in a local layer, ``t − p < W_sw``; with the deployment window (the default,
``window="deploy"``: the header's kv_window, 0 → the Needle 3 budget window) additionally
``t − p < W_kv or p < n_sinks`` on every layer.  ``window="package"`` drops the deployment
window and gives the package's logits.  The same rule gates the conv taps (ok_j).

``active_layers`` / ``skip`` run a rung in place (docs/spec/needle3-model.md §8): skipped layers pass
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
from generator.model.needle2 import Needle2, State
from generator.model.numerics import F32


@dataclass
class State3(State):
    """Everything a Needle 3 sequence carries between calls: Needle 2's state (keys [P, G, h_q]
    and values [P, G, h_v] as coded) plus the raw q, k, v of the last T_c − 1 positions."""

    conv: list[list[np.ndarray]] = field(default_factory=list)   # per layer [q, k, v]


class Needle3(Needle2):
    """The Needle 3 reference bound to one archive, numerics mode, window and layer set.

    Runs Needle2's forward pass and overrides only the steps that differ: the QKV conv
    (`qkv_mix`), int8 query/KV codes (`q_code`, `kv_code`), local/global windows (`visible`,
    `span`), the Monarch MLP (`mlp`), rungs in place (`layer`, `lane`, `engram_sites`);
    split head widths and the out_vocab head are header facts read in `__init__`.  Also
    its own generation checks and probe heads."""

    GENERATION = 3
    STATE = State3

    def __init__(self, archive, mode: str = "a8", window="deploy", n_sinks: int = 0,
                 active_layers=None, skip=None):
        self._bind(archive, mode, n_sinks)
        h = self.hdr
        self.V_out = h["out_vocab"] or self.V
        self.hq, self.hv = h["qk_head_dim"], h["v_head_dim"]
        self.sqrt_hq = nm.sqrt_f32(self.hq)
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
        dm = R.dims(3, h)
        self.ba, self.bb = dm["ba"], dm["bb"]
        self.p1 = self.vec("hada_p1").astype(np.int64)
        self.p2 = self.vec("hada_p2").astype(np.int64)

    # ---- rungs in place (docs/spec/needle3-model.md §8) -------------------------------------
    def engram_sites(self):
        """Only the sites whose layer runs."""
        return [sigma for sigma, layer in enumerate(self.sites) if layer in self.rank]

    def layer(self, l: int, X: np.ndarray, eng: dict, state: State3, start: int) -> np.ndarray:
        """A skipped layer passes the lanes through."""
        return super().layer(l, X, eng, state, start) if l in self.rank else X

    def lane(self, l: int) -> int:
        """λ from the layer's rank among the active layers."""
        return self.rank[l] % self.n

    # ---- visibility ---------------------------------------------------------------
    def is_local(self, l: int) -> bool:
        return self.W_sw > 0 and l not in self.globals

    def visible(self, l: int, t: int, p) -> np.ndarray:
        """Needle 2's rule (deployment window, sinks) and, in a local layer, t − p < W_sw."""
        ok = super().visible(l, t, p)
        if self.is_local(l):
            ok = ok & (t - np.asarray(p) < self.W_sw)
        return ok

    def span(self, l: int) -> int:
        span = super().span(l)
        if self.is_local(l):
            span = min(span, self.W_sw) if span else self.W_sw
        return span

    # ---- attention ----------------------------------------------------------------
    def q_code(self, q: np.ndarray) -> np.ndarray:
        """Queries after RoPE: per-head int8 round trip (one group of h_q values)."""
        return nm.int8_roundtrip(q)

    def key_group(self) -> int:
        """A stored key has one int8 scale per head vector."""
        return self.hq

    def value_group(self) -> int:
        return self.hv

    def kv_code(self, x: np.ndarray) -> np.ndarray:
        """What the KV cache gives back: per-head int8 at kv_bits 8 (the float model: training's
        round trip with an f32 scale; the engine's cache: its f16 scale), CQ group 64 at 2–4."""
        if self.kv_bits == 8:
            return nm.int8_roundtrip(x) if self.mode == "float" else nm.kv_int8(x, x.shape[-1])
        return nm.kv_cq(x, self.kv_bits, self.a.codebook)

    def qkv_mix(self, l: int, state: State3, start: int, q, k, v):
        """B3: causal depthwise conv of the raw projections, tap j = 0 first, each tap only if
        position t − j is visible to t in this layer; keeps the last T_c − 1 raw rows."""
        if not self.Tc:
            return q, k, v
        p = f"layer{l:02d}."
        T = q.shape[0]
        out = []
        for idx, (raw, name) in enumerate(zip((q, k, v), ("q_taps", "k_taps", "v_taps"))):
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
        return tuple(out)

    # ---- MLP ----------------------------------------------------------------------
    def mlp(self, l: int, c: np.ndarray) -> np.ndarray:
        """The Kronecker (Monarch) Hadamard MLP, M1–M7 (docs/spec/needle3-model.md §5.1)."""
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

    # ---- whole model --------------------------------------------------------------
    def new_state(self) -> State3:
        s = super().new_state()
        widths = (self.H * self.hq, self.G * self.hq, self.G * self.hv)
        s.conv = [[np.zeros((0, w), F32) for w in widths] for _ in range(self.L)]
        return s

    # ---- conveniences -------------------------------------------------------------
    def generate(self, prompt_ids, max_new: int, stop_at_eos: bool = True) -> list[int]:
        """Greedy continuation over the V_out logits (docs/spec/needle3-model.md §10); the prompt must be
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

    # ---- probe heads (docs/spec/needle3-model.md §9) ----------------------------------------
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
        cells = self.cells(tokens)                               # [T, L+1, d]
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
            out[hd.name] = self.head_out(hd, proj, g.reshape(q * self.d), bias)    # H6-H7
        return out
