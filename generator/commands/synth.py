"""Synthetic archives: realistic, weight-free stand-ins for the published models.

`synthesize(preset, seed)` builds the header of a preset geometry, draws weights whose
statistics resemble a trained network (non-trivial norms, gates, diagonals, biases, lane
routing), quantises every CQ tensor with the per-tensor bit map, attaches a real
SentencePiece tokenizer and writes the archive with the canonical layout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from generator.archive import quant, roles as R, tokenizer, writer
from generator.archive.format import CQ, FP32, HEADER_FIELDS, TERNARY
from generator.errors import CactError
from generator.model import geometry
from generator.paths import DATA_DIR as DATA

DEFAULT_BITMAP = "embedding=4,mhc=4,default=2"


@dataclass
class Preset:
    generation: int
    geometry: dict
    tokenizer_model: str
    heads: dict = field(default_factory=dict)   # code -> (probes P, out)
    bitmap: str = DEFAULT_BITMAP
    note: str = ""


# ---- kv budget ---------------------------------------------------------------------

def _n2(vocab, d, H, G, h, L, max_seq, n, slots, sub, tables, orders, sites, kv_window,
        kv_bits=8, theta=100000.0):
    return dict(kv_window=kv_window, kv_bits=kv_bits, vocab=vocab, d_model=d, num_heads=H,
                num_kv_heads=G, num_layers=L, head_dim=h, max_seq_len=max_seq,
                hada_n=1 << (d - 1).bit_length(), mhc_lanes=n, engram_slots=slots,
                engram_sub_dim=sub, num_engram_tables=tables, engram_conv_taps=4,
                engram_conv_dilation=max(orders) if orders else 0,
                num_engram_orders=len(orders),
                **{f"engram_order{i}": (orders[i] if i < len(orders) else 0) for i in range(4)},
                num_engram_sites=len(sites),
                **{f"engram_site{i}": (sites[i] if i < len(sites) else 0) for i in range(4)},
                rope_theta=theta)


def _n3(vocab, out_vocab, d, H, G, hq, hv, L, max_seq, n, sliding, globals_, taps, slots, sub,
        tables, orders, sites, kv_window, seed_heads=0, kv_bits=8, theta=100000.0):
    """A Needle 3 header (docs/spec/cact-format.md §3).  `kv_window` is the configured (trained) window;
    the stored value is min(budget window, configured) as `needle build` writes it."""
    mask = sum(1 << g for g in globals_)
    hdr = dict(kv_window=0, kv_bits=kv_bits, vocab=vocab, out_vocab=out_vocab, d_model=d,
               num_heads=H, num_kv_heads=G, num_layers=L, qk_head_dim=hq, v_head_dim=hv,
               max_seq_len=max_seq, hada_n=1 << (d - 1).bit_length(), mhc_lanes=n,
               sliding_window=sliding, global_mask_lo=mask & 0xFFFFFFFF, global_mask_hi=mask >> 32,
               qkv_conv_taps=taps, engram_slots=slots, engram_sub_dim=sub,
               num_engram_tables=tables, engram_conv_taps=4,
               engram_conv_dilation=max(orders) if orders else 0, engram_seed_heads=seed_heads,
               num_engram_orders=len(orders),
               **{f"engram_order{i}": (orders[i] if i < len(orders) else 0) for i in range(4)},
               num_engram_sites=len(sites),
               **{f"engram_site{i}": (sites[i] if i < len(sites) else 0) for i in range(16)},
               rope_theta=theta)
    hdr["kv_window"] = geometry.stored_kv_window(hdr, kv_window)
    return hdr


PRESETS: dict[str, Preset] = {
    "tiny": Preset(2, _n2(1024, 64, 4, 2, 16, 2, 256, 4, 64, 16, 4, (2, 3), (0, 1), 64),
                   "tok1k.model", {1: (4, 32), 2: (8, 1)},
                   note="2 layers, d 64: builds in a second, every feature present"),
    "small": Preset(2, _n2(8192, 96, 4, 2, 32, 5, 512, 4, 512, 24, 4, (2, 3), (1, 3), 160),
                    "tok8k.model", {1: (4, 128), 2: (8, 1)},
                    note="5 layers, d 96 (padded groups, hada_n 128), the 8k tokenizer"),
    "needle2-base": Preset(2, _n2(8192, 512, 8, 4, 64, 27, 2048, 4, 8192, 128, 4, (2, 3),
                                  (2, 15), 256),
                           "tok8k.model", {1: (4, 128), 2: (8, 1)},
                           note="the published Needle 2 geometry (405 tensors)"),
    # Needle 3: heads are code -> (probes per row k, queries q, outputs)
    "needle3-tiny": Preset(3, _n3(1024, 1000, 64, 4, 2, 16, 32, 3, 256, 4, 8, (1,), 3, 64, 16, 4,
                                  (2, 3), (0, 2), 32, seed_heads=3),
                           "tok1k.model", {1: (4, 4, 32), 2: (4, 4, 1), 3: (4, 4, 3)},
                           note="3 layers, d 64, h_q 16 / h_v 32, 3 conv taps, window 8 with "
                                "global layer 1, out_vocab 1000, seed stride 3, all three heads"),
    "needle3-small": Preset(3, _n3(8192, 0, 96, 4, 2, 16, 24, 6, 512, 4, 16, (3, 5), 3, 512, 24,
                                   4, (2, 3), (2, 4), 32),
                            "tok8k.model", {1: (4, 4, 128), 2: (4, 4, 1), 3: (4, 4, 3)},
                            note="6 layers, d 96 (hada_n 128 = 8 x 16), window 16, globals 3 "
                                 "and 5, kv_window 32, the 8k tokenizer"),
    "needle3-base": Preset(3, _n3(8192, 0, 768, 12, 2, 48, 64, 20, 8192, 4, 1024, (4, 9, 14, 19),
                                  3, 18432, 128, 6, (2, 3), (3, 7, 11, 15, 19), 256),
                           "tok8k.model", {2: (4, 4, 1)},
                           note="the published Needle 3 geometry (581 tensors, ~35.3 MB)"),
}


# ---- bit maps ----------------------------------------------------------------------

def parse_bitmap(text: str) -> dict[str, int]:
    """Parse `key=bits,...,default=bits` (widths 2, 3, 4, 1.58/ternary) into key -> code."""
    out: dict[str, int] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, sep, val = item.partition("=")
        key = key.strip()
        val = val.strip().lower()
        if not sep or not key:
            raise CactError(f"bit map entry {item!r} is not key=bits")
        code = {"2": 2, "3": 3, "4": 4, "1.58": TERNARY, "ternary": TERNARY}.get(val)
        if code is None:
            raise CactError(f"bit map entry {item!r}: width must be 2, 3, 4 or 1.58 (ternary)")
        out[key] = code
    if "default" not in out:
        raise CactError(f"bit map {text!r} has no default=… entry")
    return out


def bits_for(role: str, bitmap: dict[str, int]) -> int:
    """Width of a CQ tensor: the longest map key that prefixes its canonical name."""
    name = R.bitmap_name(role) or role
    best = None
    for key in bitmap:
        if key != "default" and name.startswith(key) and (best is None or len(key) > len(best)):
            best = key
    return bitmap[best if best else "default"]


# ---- weights that look trained -----------------------------------------------------

class _Draw:
    """Seeded draws with the statistics of each tensor family."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def normal(self, shape, std=1.0, mean=0.0):
        return self.rng.normal(mean, std, size=shape)

    def matrix(self, out, inp, gain=1.0):
        # rows with unequal norms, as trained projections have
        row_gain = np.exp(self.normal((out, 1), 0.25))
        return self.normal((out, inp), gain / math.sqrt(inp)) * row_gain

    def zc_scale(self, n, spread=0.15):
        return self.normal(n, spread, 0.05)


def _draw_cq(rnd: _Draw, role, d: int, width_of, codebook):
    """A CQ matrix of either generation: embedding rows of varied norm, unit engram rows,
    projections and lane maps with unequal row norms."""
    name, shape = role.name.split(".")[-1], role.shape
    if role.name == "embedding":
        w = rnd.normal(shape, 1.0 / math.sqrt(d)) * np.exp(rnd.normal((shape[0], 1), 0.1))
    elif name == "tables":
        w = rnd.normal(shape, 1.0)
    elif name.startswith("phi_"):
        w = rnd.matrix(*shape, gain=2.0)
    else:
        w = rnd.matrix(*shape)
    return writer.cq(role.name, w, width_of(role.name), codebook)


def draw_core(gen: int, hdr: dict, width_of, codebook, seed: int) -> list:
    """Every model tensor through final_norm; `width_of(role)` gives each CQ width code."""
    rnd = _Draw(seed)
    dm = R.dims(gen, hdr)
    out = []
    for role in R.core_roles(gen, hdr):
        name = role.name.split(".")[-1]
        if role.dtype == CQ:
            out.append(_draw_cq(rnd, role, dm["d"], width_of, codebook))
        elif role.dtype == FP32:   # Needle 3's hada_p1 / hada_p2: the package's fixed permutations
            rs = 11 if name == "hada_p1" else 13
            out.append(writer.fp32(role.name, np.random.RandomState(rs).permutation(dm["N"]).astype(np.float32)))
        else:
            v = _draw_control(gen, name, role.shape, rnd, dm)
            out.append(writer.fp16(role.name, np.asarray(v).reshape(role.shape)))
    return out


def _draw_control(gen: int, name: str, shape, rnd: _Draw, dm: dict) -> np.ndarray:
    """One FP16 control tensor, drawn the way a trained model's look (both generations)."""
    d, N, L, n = dm["d"], dm["N"], dm["L"], dm["n"]
    if name == "final_norm":  # gain about 2: logits spread like a trained head's
        return rnd.zc_scale(shape[0]) + 1.0
    if name in ("q_norm", "k_norm"):  # gain about 2: attention is sharp, not uniform
        return rnd.zc_scale(shape[0], 0.3) + 1.0
    if name in ("norm_in", "post_norm", "pre_hada"):
        return rnd.zc_scale(shape[0])
    if name == "attn_gate":
        return rnd.normal(1, 0.5, 1.5)
    if name in ("q_taps", "k_taps", "v_taps"):  # Needle 3 QKV conv: near the identity [1, 0, 0]
        v = rnd.normal(shape, 0.2)
        v[0] += 1.0
        return v
    if name == "d1" or (gen == 3 and name == "d3"):    # sign-flipped diagonals
        return rnd.normal(N, 0.2, 1.0) * rnd.rng.choice([-1.0, 1.0], N)
    if name == "d2":
        return rnd.normal(N, 0.3, 1.5)
    if name == "b2":
        return rnd.normal(N, 0.3)
    if name == "d4" or (gen == 2 and name == "d3"):    # the last diagonal of the MLP
        return rnd.normal(N, 0.8, 3.0)
    if name in ("w1a", "w1b", "w2a", "w2b", "w3a", "w3b"):
        return _walsh(shape[0], rnd)
    if name == "cond_v":
        return rnd.normal(shape, 2.0 / math.sqrt(d))
    if name == "cond_u":
        return rnd.normal(shape, 0.3)
    if name in ("a_pre", "a_post", "a_res"):
        return rnd.normal(L, 0.1, 0.6)
    if name == "b_pre":
        return rnd.normal((L, n), 0.5)
    if name == "b_post":  # lifts the off-lane writes, as training does, so blocks matter
        return rnd.normal((L, n), 0.5, 2.5)
    if name == "b_res":
        return rnd.normal((L, n, n), 0.5) + 2.0 * np.eye(n)
    if name == "taps":
        return rnd.normal((4, d), 0.3) + np.array([[1.0], [0.4], [0.2], [0.1]])
    raise AssertionError(f"no drawing rule for Needle {gen} control tensor {name}")  # pragma: no cover


def _walsh(b: int, rnd: _Draw, noise: float = 0.2) -> np.ndarray:
    """A normalised Walsh matrix of order b plus noise: a trained Monarch factor."""
    return quant.hadamard(b).astype(np.float64) + rnd.normal((b, b), noise / math.sqrt(b))


HEAD_BITS_N3 = 4  # docs/spec/cact-format.md §12.2: the head matrices are CQ4 in every writer


def draw_heads_n3(hdr: dict, heads: dict, seed: int, codebook, width_of=None) -> list:
    """Needle 3 probe heads (docs/spec/cact-format.md §10.2): code -> (k probes per row, q queries, out)."""
    if not heads:
        return []
    rnd = _Draw(seed + 7919)
    d, L = hdr["d_model"], hdr["num_layers"]
    codes = sorted(heads)
    out = [writer.fp16("heads.manifest", np.array(codes, dtype=np.float32))]
    for code in codes:
        k, q, o = heads[code]
        name = f"head.{R.N3_HEAD_NAMES[code]}"
        bits = (lambda role: HEAD_BITS_N3) if width_of is None else width_of
        out.append(writer.cq(f"{name}.probes", rnd.normal(((L + 1) * k, d), 1.0),
                             bits(f"{name}.probes"), codebook))
        out.append(writer.fp16(f"{name}.gain", rnd.normal((L + 1, k), 0.2, 1.0)))
        out.append(writer.cq(f"{name}.query", rnd.normal((q, d), 1.0), bits(f"{name}.query"), codebook))
        out.append(writer.fp16(f"{name}.row_bias", rnd.normal((q, L + 1, k), 0.5)))
        out.append(writer.cq(f"{name}.proj", rnd.matrix(o, q * d), bits(f"{name}.proj"), codebook))
        bias = np.zeros(o) if code == 1 else rnd.normal(o, 0.5)
        out.append(writer.fp16(f"{name}.bias", bias))
        if code == 3:
            out.append(writer.fp16(f"{name}.calibration", [0.90, 0.00, 0.60]))
    return out


def draw_heads_n2(hdr: dict, heads: dict, seed: int) -> list:
    if not heads:
        return []
    rnd = _Draw(seed + 7919)
    d = hdr["d_model"]
    codes = sorted(heads)
    out = [writer.fp16("heads.manifest", np.array(codes, dtype=np.float32))]
    for code in codes:
        P, o = heads[code]
        name = R.N2_HEAD_NAMES[code]
        out.append(writer.fp16(f"head.{name}.probes", rnd.normal((P, d), 1.0)))
        out.append(writer.fp16(f"head.{name}.proj", rnd.matrix(o, P * d)))
        bias = np.zeros(o) if code == 1 else rnd.normal(o, 0.5)
        out.append(writer.fp16(f"head.{name}.bias", bias))
    return out


# ---- entry points ------------------------------------------------------------------

def tokenizer_blob(model_name: str) -> bytes:
    path = DATA / model_name
    if not path.is_file():
        raise CactError(f"tokenizer model {path} is missing; run tools/tokenizer/train_tokenizer.py")
    return tokenizer.build_blob(str(path))


MAX_SEED = 2**32 - 1


def _check_seed(seed: int) -> None:
    if not 0 <= seed <= MAX_SEED:
        raise CactError(f"seed {seed} must be between 0 and {MAX_SEED} (pass another --seed)")


def synthesize(preset: str, seed: int = 0, *, bitmap: str | None = None,
               kv_window: int | None = None, kv_bits: int | None = None,
               heads: bool = True) -> bytes:
    if preset not in PRESETS:
        raise CactError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    _check_seed(seed)
    p = PRESETS[preset]
    hdr = dict(p.geometry)
    if kv_window is not None:
        if not 0 <= kv_window <= hdr["max_seq_len"]:
            raise CactError(f"--kv-window {kv_window} must be between 0 and max_seq_len "
                            f"{hdr['max_seq_len']}")
        hdr["kv_window"] = kv_window
    if kv_bits is not None:
        if kv_bits not in (2, 3, 4, 8):
            raise CactError(f"--kv-bits {kv_bits} must be 2, 3, 4 or 8")
        hdr["kv_bits"] = kv_bits
    bm = parse_bitmap(bitmap or p.bitmap)
    codebook = quant.default_codebook()
    tensors = draw_core(p.generation, hdr, lambda role: bits_for(role, bm), codebook, seed)
    if heads and p.generation == 3:
        tensors += draw_heads_n3(hdr, p.heads, seed, codebook)
    elif heads:
        tensors += draw_heads_n2(hdr, p.heads, seed)
    tensors.append(writer.raw("tokenizer", tokenizer_blob(p.tokenizer_model)))
    return writer.write(p.generation, hdr, codebook, tensors)


def synthesize_like(archive, seed: int = 0) -> bytes:
    """New weights for an existing archive: same geometry, per-tensor widths, heads, tokenizer."""
    from generator.archive import reader
    _check_seed(seed)
    a = archive if isinstance(archive, reader.Archive) else reader.read(archive)
    hdr = {k: v for k, v in a.header.items() if k not in ("tag", "num_tensors", "codebook_len")}
    widths = {r.role: r.bits for r in a.records if r.dtype == CQ}
    codebook = a.codebook
    if a.generation == 3:
        return _synthesize_like_n3(a, hdr, widths, codebook, seed)
    tensors = draw_core(2, hdr, widths.__getitem__, codebook, seed)
    heads = {}
    for hd in a.heads:
        probes = a.record(f"head.{hd.name}.probes").shape[0]
        outw = a.record(f"head.{hd.name}.proj").shape[0]
        heads[hd.code] = (probes, outw)
    tensors += draw_heads_n2(hdr, heads, seed)
    tensors.append(writer.raw("tokenizer", a.tokenizer_blob()))
    return writer.write(2, hdr, codebook, tensors)


def _synthesize_like_n3(a, hdr: dict, widths: dict, codebook, seed: int) -> bytes:
    tensors = draw_core(3, hdr, widths.__getitem__, codebook, seed)
    L = hdr["num_layers"]
    heads = {}
    for hd in a.heads:
        pre = f"head.{hd.name}."
        probes = a.record(pre + "probes")
        k = probes.shape[0] // (L + 1) if probes.dtype == CQ else probes.shape[1]
        heads[hd.code] = (k, a.record(pre + "query").shape[0], a.record(pre + "proj").shape[0])
    tensors += draw_heads_n3(hdr, heads, seed, codebook,
                             lambda role: widths.get(role, HEAD_BITS_N3))
    tensors.append(writer.raw("tokenizer", a.tokenizer_blob()))
    return writer.write(3, hdr, codebook, tensors)


__all__ = ["PRESETS", "synthesize", "synthesize_like", "parse_bitmap", "bits_for",
           "DEFAULT_BITMAP", "HEADER_FIELDS", "FP32"]
