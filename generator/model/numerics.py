"""Float32 primitives of the reference, evaluated exactly as docs/numerics.md prescribes.

Every function here is written so that a C implementation following docs/numerics.md gets
the same bits: f32 storage, sequential ascending reductions from +0.0, exp/log/sin/cos
computed in f32 by fixed operation sequences (exp, log, sincos below), no fused multiply-add.
Each function is vectorised over leading axes; the reduced axis is always the last one, and
the reduction loops over it in ascending order so that batching never changes a result.
"""

from __future__ import annotations

import math

import numpy as np

from generator.archive import quant
from generator.archive.format import KV_CQ_GROUP, KV_INT8_GROUP_N2, TERNARY

# Engram n-gram hash (docs/numerics.md, engram): acc = SEED·(i·stride + η + 1), then per token
# acc = (acc ^ token)·PRIME, all mod 2^32.  The generated C takes these values from here.
ENGRAM_HASH_SEED = 0x9E3779B9
ENGRAM_HASH_PRIME = 0x01000193
MASK32 = 0xFFFFFFFF

F32 = np.float32
EPS = F32(1e-6)
ONE = F32(1.0)


def f32(x) -> np.ndarray:
    return np.asarray(x, dtype=F32)


def seq_sum(x: np.ndarray) -> np.ndarray:
    """Σ over the last axis, left to right from +0.0, in f32."""
    acc = np.zeros(x.shape[:-1], dtype=F32)
    for c in range(x.shape[-1]):
        acc = acc + x[..., c]
    return acc


def seq_dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Σ_c f32(a_c · b_c) over the last axis (broadcasting), ascending c."""
    a, b = np.broadcast_arrays(f32(a), f32(b))
    acc = np.zeros(a.shape[:-1], dtype=F32)
    for c in range(a.shape[-1]):
        acc = acc + a[..., c] * b[..., c]
    return acc


def seq_matvec(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """y[..., r] = Σ_c W[r][c]·x[..., c], ascending c (W f32 [out, in], x [..., in])."""
    acc = np.zeros(x.shape[:-1] + (w.shape[0],), dtype=F32)
    for c in range(w.shape[1]):
        acc = acc + w[:, c] * x[..., c:c + 1]
    return acc


# ---- elementary functions: f32 only (docs/numerics.md §2) ----------------------------
# Twins of nk_exp, nk_log and nk_sincos in templates/needle_kernels.{h,c}.j2: the same
# constants and the same operations in the same order, each an IEEE single operation
# (NumPy float32 arithmetic is, and never fuses a multiply-add), so every result has the
# bits the C engine computes on any IEEE-754 target.  Branches become np.where over every
# lane; lanes a branch does not take compute garbage under errstate(all="ignore") and are
# discarded.

U32 = np.uint32
RNE_MAGIC = F32(12582912.0)          # 1.5·2^23: (v + M) − M rounds |v| < 2^22 to an integer
NAN = np.array(0x7FC00000, dtype=U32).view(F32)[()]   # the one NaN every function returns
INF = F32(np.inf)
TWO = F32(2.0)
HALF = F32(0.5)


def _bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=F32).view(U32)


def _from_bits(b) -> np.ndarray:
    return np.asarray(b, dtype=U32).view(F32)


def _h(s: str) -> np.float32:
    """A C99 hexadecimal float literal (exactly representable in f32)."""
    v = F32(float.fromhex(s))
    assert float(v) == float.fromhex(s), s
    return v


# exp: x = k·ln2 + r, |r| ≤ ln2/2; exp(r) = 1 + 2r/(2 − c), c = r − r²·(P1 + r²·P2).
EXP_INV_LN2 = _h("0x1.715476p+0")    # f32(1/ln 2)
EXP_LN2_HI = _h("0x1.62e4p-1")       # ln 2 to 15 bits: k·EXP_LN2_HI is exact for |k| ≤ 256
EXP_LN2_LO = _h("0x1.7f7d1cp-20")    # f32(ln 2 − EXP_LN2_HI)
EXP_P1 = _h("0x1.55551ep-3")         # r·(e^r + 1)/(e^r − 1) = 2 + r²·(P1 + r²·P2) ± 2^-27.7, |r| ≤ 0.347
EXP_P2 = _h("-0x1.6aa42ap-9")
EXP_BIG = 0x42B17218                 # bits of 88.72284: |x| at least this overflows or nearly underflows
EXP_UNDER = _h("-0x1.9fe36ap+6")     # −103.97208: below, exp(x) < 2^-150 rounds to +0
EXP_TINY = 0x39000000                # bits of 2^-13: below, exp(x) = f32(1 + x)
TWO_M100 = _h("0x1p-100")


def exp(x) -> np.ndarray:
    """f32 exp(x), ≤ 1 ulp (nk_exp)."""
    x = f32(x)
    ix = _bits(x) & U32(0x7FFFFFFF)
    in_range = (ix < EXP_BIG) | ((x < 0) & (x >= EXP_UNDER))
    with np.errstate(all="ignore"):
        kf = (x * EXP_INV_LN2 + RNE_MAGIC) - RNE_MAGIC
        hi = x - kf * EXP_LN2_HI                      # exact
        lo = kf * EXP_LN2_LO
        r = hi - lo
        t = r * r
        c = r - t * (EXP_P1 + t * EXP_P2)
        y = ONE - ((lo - (r * c) / (TWO - c)) - hi)   # exp(r)
        k = np.where(in_range, kf, F32(0)).astype(np.int32)
        normal = k >= -125                            # 2^(k−1) is a normal float
        scale = _from_bits((np.where(normal, k - 1, k + 100) + 127).astype(U32) << U32(23))
        res = np.where(normal, (y + y) * scale, (y * scale) * TWO_M100)
        res = np.where(ix < EXP_TINY, ONE + x, res)
    res = np.where((ix >= EXP_BIG) & (x > 0), INF, res)
    res = np.where(x < EXP_UNDER, F32(0), res)
    return np.where(ix > 0x7F800000, NAN, res).astype(F32)


# log: x = 2^k·(1 + f), √2/2 ≤ 1 + f < √2; s = f/(2 + f), log(1 + f) = 2s + s·R(s²).
LOG_LN2_HI = _h("0x1.62e3p-1")       # ln 2 to 16 bits: k·LOG_LN2_HI is exact
LOG_LN2_LO = _h("0x1.2fefa2p-17")    # f32(ln 2 − LOG_LN2_HI)
LOG_TWO25 = _h("0x1p+25")            # scales a subnormal x to a normal one
LOG_LG1 = _h("0x1.555554p-1")        # (log(1+s) − log(1−s))/s = 2 + R ± 2^-34.2 on |s| ≤ 0.1716,
LOG_LG2 = _h("0x1.999c26p-2")        #   R = z·(LG1 + w·LG3) + w·(LG2 + w·LG4), z = s², w = z²
LOG_LG3 = _h("0x1.23d3dcp-2")
LOG_LG4 = _h("0x1.f13c4cp-3")
LOG_THIRD = _h("0x1.555556p-2")      # f32(1/3)


def log(x) -> np.ndarray:
    """f32 natural log, ≤ 1 ulp (nk_log): log(±0) = −inf, log(x < 0) = NaN."""
    x = f32(x)
    u = _bits(x)
    ix = u.astype(np.int64)
    sub = (ix > 0) & (ix < 0x00800000)
    with np.errstate(all="ignore"):
        ix = np.where(sub, _bits(x * LOG_TWO25).astype(np.int64), ix)
        k = np.where(sub, -25, 0) + (ix >> 23) - 127
        m = ix & 0x007FFFFF
        i = (m + 0x4AFB20) & 0x800000                 # 1.m ≥ √2: halve it and carry into k
        f = _from_bits((m | (i ^ 0x3F800000)).astype(U32)) - ONE
        dk = (k + (i >> 23)).astype(F32)
        near1 = dk * LOG_LN2_HI - ((f * f * (HALF - LOG_THIRD * f) - dk * LOG_LN2_LO) - f)
        s = f / (TWO + f)
        z = s * s
        w = z * z
        R = z * (LOG_LG1 + w * LOG_LG3) + w * (LOG_LG2 + w * LOG_LG4)
        hfsq = HALF * f * f
        wide = dk * LOG_LN2_HI - ((hfsq - (s * (hfsq + R) + dk * LOG_LN2_LO)) - f)
        narrow = dk * LOG_LN2_HI - ((s * (f - R) - dk * LOG_LN2_LO) - f)
        res = np.where((m >= 0x30A3D0) & (m <= 0x35C288), wide, narrow)   # 1.m in [1.38, 1.42]
        res = np.where(((m + 0x8000) & 0x007FFFFF) < 0xC000, near1, res)
    res = np.where(u == 0x7F800000, INF, res)
    res = np.where(u > 0x7F800000, NAN, res)          # NaN and every negative number
    return np.where((u & U32(0x7FFFFFFF)) == 0, -INF, res).astype(F32)


# sin, cos: x = n·π/2 + r, |r| ≤ π/4, r = rh + rl from a 7-part Cody-Waite reduction.
SC_TWO_OVER_PI = _h("0x1.45f306p-1")
SC_PIO2 = tuple(_h(v) for v in (      # π/2 = Σ parts: six of 8 bits (n·part exact for
    "0x1.92p+0", "0x1.fap-12", "0x1.54p-20", "0x1.1p-30", "0x1.68p-39", "0x1.84p-48",
    "0x1.a62634p-58"))                 # |n| < 2^16) and the f32 rest
SC_S = tuple(_h(v) for v in ("-0x1.555556p-3", "0x1.1110ecp-7", "-0x1.a000b8p-13", "0x1.6a5a4cp-19"))
SC_C = tuple(_h(v) for v in ("0x1.555556p-5", "-0x1.6c16a4p-10", "0x1.a0077ep-16", "-0x1.22a5aap-22"))
SC_SPLIT = F32(4097.0)               # 2^12 + 1: Dekker's split of a float into two 12-bit halves
SC_LIMIT = 0x4A800000                # bits of 2^22: larger |x|, inf and NaN give NaN
SC_TINY = 0x39800000                 # bits of 2^-12: below, sin x = x and cos x = 1


def sincos(x):
    """(f32 sin x, f32 cos x), ≤ 1 ulp for |x| ≤ 65536 (nk_sincos)."""
    x = f32(x)
    ix = _bits(x) & U32(0x7FFFFFFF)
    ok = ix <= SC_LIMIT
    with np.errstate(all="ignore"):
        x0 = np.where(ok, x, F32(0))
        kf = (x0 * SC_TWO_OVER_PI + RNE_MAGIC) - RNE_MAGIC
        p = [kf * c for c in SC_PIO2]
        h = (x0 - p[0]) - p[1]                         # exact
        lo = np.zeros_like(h)
        for q in p[2:]:                                # (h, e) = TwoSum(h, −q); lo += e
            s = h - q
            bb = s - h
            e = (h - (s - bb)) - (q + bb)
            h = s
            lo = lo + e
        rh = h + lo
        rl = lo - (rh - h)
        # sin r = rh + (rh·z·S(z) + rl·(1 − z/2))
        z = rh * rh
        S1, S2, S3, S4 = SC_S
        sn = rh + (((rh * z) * (S1 + z * (S2 + z * (S3 + z * S4)))) + (rl - (HALF * z) * rl))
        # cos r = (1 − zh/2) + z²·C(z) − zl/2 − rh·rl, with rh² = zh + zl exactly
        t = SC_SPLIT * rh
        ah = t - (t - rh)
        al = rh - ah
        zl = (((ah * ah - z) + ah * al) + ah * al) + al * al
        hz = HALF * z
        w = ONE - hz
        C1, C2, C3, C4 = SC_C
        cs = w + ((((ONE - w) - hz) - HALF * zl) + ((z * z) * (C1 + z * (C2 + z * (C3 + z * C4))) - rh * rl))
        q = kf.astype(np.int32) & 3
    sin = np.select([q == 0, q == 1, q == 2], [sn, cs, -sn], -cs)
    cos = np.select([q == 0, q == 1, q == 2], [cs, -sn, -cs], sn)
    tiny = ix < SC_TINY
    sin = np.where(ok, np.where(tiny, x, sin), NAN).astype(F32)
    cos = np.where(ok, np.where(tiny, ONE, cos), NAN).astype(F32)
    return sin, cos


def sigmoid(x) -> np.ndarray:
    e = exp(-f32(x))
    return ONE / (ONE + e)


def silu(x) -> np.ndarray:
    x = f32(x)
    return x * sigmoid(x)


def zc_rmsnorm(x: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    """ZC-RMSNorm over the last axis: ((1 + γ)·x) / sqrt(Σx²/m + 1e-6)."""
    m = x.shape[-1]
    ms = seq_sum(x * x) / F32(m)
    r = np.sqrt(ms + EPS)[..., None]
    return ((ONE + f32(gamma)) * x) / r


def unit_rms(x: np.ndarray) -> np.ndarray:
    """ρ(x) = x · (1 / sqrt(Σx²/m + 1e-6)), reciprocal then multiply (two roundings)."""
    m = x.shape[-1]
    ms = seq_sum(x * x) / F32(m)
    qr = ONE / np.sqrt(ms + EPS)
    return x * qr[..., None]


def softmax(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis; the denominator accumulates in ascending order."""
    m = x.max(axis=-1, keepdims=True)
    e = exp(x - m)
    return e / seq_sum(e)[..., None]


SINKHORN_ITERS = 20
SINKHORN_SPREAD = F32(60.0)


def logsumexp(x: np.ndarray) -> np.ndarray:
    m = x.max(axis=-1)
    return m + log(seq_sum(exp(x - m[..., None])))


def sinkhorn(r: np.ndarray, iters: int = SINKHORN_ITERS) -> np.ndarray:
    """Sinkhorn over the last two axes, rows first (docs/numerics.md §2.2).

    A matrix whose rows all lie within 60 of their maximum (`f32(R − row max) ≥ −60`) runs
    in the exp domain: `K = exp(R − row max)` once, then `iters` times every row, then every
    column, times the f32 reciprocal of its ascending sum.  In exact arithmetic that is the
    spec's log-domain iteration (λ ← λ − lse) followed by exp, for 16 exponentials instead
    of 16·(2·iters·n + 1) exps and logs; every entry of K is at least e⁻⁶⁰, so no sum is
    ever zero (none is below 1/n² after the first).  Any other matrix runs the spec's
    log-domain iteration, where an exp-domain entry could underflow."""
    r = f32(r)
    shifted = r - r.max(axis=-1, keepdims=True)
    narrow = (shifted >= -SINKHORN_SPREAD).all(axis=(-1, -2))
    out = np.empty_like(r)
    k = exp(shifted[narrow])
    for _ in range(iters):
        k = k * (ONE / seq_sum(k))[..., :, None]
        k = k * (ONE / seq_sum(np.swapaxes(k, -1, -2)))[..., None, :]
    out[narrow] = k
    lam = r[~narrow]
    for _ in range(iters):
        lam = lam - logsumexp(lam)[..., :, None]
        lam = lam - logsumexp(np.swapaxes(lam, -1, -2))[..., None, :]
    out[~narrow] = exp(lam)
    return out


def sqrt_f32(n: float) -> np.float32:
    """f32(√n) computed in double and rounded once."""
    return F32(math.sqrt(n))


def wht(z: np.ndarray) -> np.ndarray:
    """Normalised Walsh-Hadamard over the last axis: butterfly, then × f32(1/√P)."""
    return quant.fwht(z) * quant.inv_sqrt(z.shape[-1])


def rope_tables(positions: np.ndarray, P: int, theta: float):
    """cos, sin of shape [len(positions), P/2] (docs/numerics.md, RoPE)."""
    j = np.arange(P // 2)
    e = F32(2) * j.astype(F32) / F32(P)
    powv = np.power(np.float64(F32(theta)), e.astype(np.float64)).astype(F32)
    omega = ONE / powv
    phi = f32(np.asarray(positions)).astype(F32)[:, None] * omega[None, :]
    sin, cos = sincos(phi)
    return cos, sin


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate-half RoPE on [..., P] with tables broadcastable to [..., P/2]."""
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


# ---- A8: int8 activations in the rotated basis --------------------------------------

A8_QMAX = 127


def rne(x: np.ndarray) -> np.ndarray:
    """Round half to even (np.rint) in f32."""
    return np.rint(f32(x))


def quantize_int8(t: np.ndarray):
    """Symmetric int8 of each vector along the last axis: (q int8, scale f32 = amax/127).

    inv = f32(127 / amax); q = clamp(rne(f32(t·inv)), −127, 127).  All-zero vectors get
    q = 0 and scale 0.
    """
    t = f32(t)
    amax = np.abs(t).max(axis=-1)
    nz = amax > 0
    safe = np.where(nz, amax, ONE)
    inv = F32(A8_QMAX) / safe
    q = np.clip(rne(t * inv[..., None]), -A8_QMAX, A8_QMAX)
    q = np.where(nz[..., None], q, 0).astype(np.int8)
    scale = np.where(nz, safe / F32(A8_QMAX), F32(0)).astype(F32)
    return q, scale


def a8_activation(x: np.ndarray, in_pad: int, group: int = 128):
    """Rotate and quantise an activation [..., in] for a CQ GEMV.

    Returns (q int32 [..., ng, g], gscale f32 [..., ng]) where gscale = f32(amax/127)·f32(1/√g):
    the rotated group H·x_j ≈ gscale_j · q_j.
    """
    x = f32(x)
    lead = x.shape[:-1]
    pad = np.zeros(lead + (in_pad,), dtype=F32)
    pad[..., :x.shape[-1]] = x
    t = quant.fwht(pad.reshape(lead + (in_pad // group, group)))
    q, scale = quantize_int8(t)
    return q.astype(np.int32), scale * quant.inv_sqrt(group)


def int8_levels(bits: int, codebook: np.ndarray, group: int = 128):
    """Integer codebook of a CQ width: (table indexed by stored index, f32 scale s_c).

    Widths 2–4: s_c = f32(max|level| / 127), entry k = rne(f32(level_k / s_c)).
    Ternary: the signed crumb itself (−1, 0, +1) with s_c = the ternary level.
    Binary: ±1 with s_c = the binary level.
    """
    if bits == TERNARY:
        return np.array([0, 1, 0, -1], dtype=np.int32), quant.ternary_level(group)
    if bits == 1:
        return np.array([-1, 1], dtype=np.int32), quant.binary_level(group)
    levels = quant.level_table(bits, codebook, group)
    s_c = F32(np.abs(levels).max()) / F32(A8_QMAX)
    return rne(levels / s_c).astype(np.int32), F32(s_c)


def a8_gemv(q: np.ndarray, gscale: np.ndarray, lvl: np.ndarray, norms: np.ndarray,
            s_c: np.float32) -> np.ndarray:
    """y[..., r] = Σ_j f32( f32(norm[r][j] · f32(gscale_j · s_c)) · f32(dot_rj) ), ascending j.

    q [..., ng, g] int32 activation codes, lvl [out, ng, g] integer levels (held as f32, every
    partial sum is an integer below 2^24 so any summation order is exact), norms [out, ng].
    """
    lead = q.shape[:-2]
    ng = q.shape[-2]
    qf = q.astype(F32).reshape((-1, ng, q.shape[-1]))
    gs = (gscale * s_c).reshape((-1, ng))
    y = np.zeros((qf.shape[0], lvl.shape[0]), dtype=F32)
    for j in range(ng):
        dot = qf[:, j, :] @ lvl[:, j, :].T              # exact integers
        coef = norms[None, :, j] * gs[:, j:j + 1]
        y = y + coef * dot
    return y.reshape(lead + (lvl.shape[0],))


# ---- KV cache codings ---------------------------------------------------------------



F16_MAX = np.float16(65504.0)   # the largest finite binary16


def kv_scale16(scale: np.ndarray) -> np.ndarray:
    """An f32 scale as the int8 KV cache stores it (docs/numerics.md §5.1, numerics version 4):
    rounded to binary16, to nearest even, with gradual underflow (at or below 2^-25 it becomes
    +0) and saturating at 65504 instead of overflowing to infinity; as f32 (exact)."""
    return np.minimum(f32(scale).astype(np.float16), F16_MAX).astype(F32)


def kv_int8_codes(x: np.ndarray, group: int):
    """What the int8 KV cache stores for head vectors x (docs/numerics.md §5.1): per group of
    `group` values along the last axis (the last may be shorter) the scale s16 =
    kv_scale16(f32(amax / 127)) and the codes q = clamp(rne(f32(x · f32(1 / s16))), −127, 127),
    the nearest steps of the stored scale; s16 = +0 (all zero, or amax ≤ 127 · 2^-25) gives
    codes 0.  Returns (codes int8 [..., h], scales f32 [..., groups], each an f16 value)."""
    x = f32(x)
    h = x.shape[-1]
    codes = np.empty(x.shape, dtype=np.int8)
    scales = []
    for s in range(0, h, group):
        t = x[..., s:s + group]
        s16 = kv_scale16(np.abs(t).max(axis=-1) / F32(A8_QMAX))
        nz = s16 > 0
        inv = ONE / np.where(nz, s16, ONE)
        q = np.clip(rne(t * inv[..., None]), -A8_QMAX, A8_QMAX)
        codes[..., s:s + group] = np.where(nz[..., None], q, 0).astype(np.int8)
        scales.append(s16)
    return codes, np.stack(scales, axis=-1).astype(F32)


def kv_int8(x: np.ndarray, group: int = KV_INT8_GROUP_N2) -> np.ndarray:
    """Round trip of the int8 KV cache: kv_int8_codes in groups of `group` along the head
    vector (Needle 2: 32; Needle 3: the whole head), read back as f32(f32(code) · scale)."""
    codes, scales = kv_int8_codes(x, group)
    return codes.astype(F32) * np.repeat(scales, group, axis=-1)[..., :x.shape[-1]]


def int8_codes(x: np.ndarray, group: int):
    """The int8 code of §5.1: (codes int8 [..., h], scales f32 [..., ceil(h/group)]),
    quantize_int8 on each group of `group` values along the last axis (the last group may be
    shorter).  A query keeps these f32 scales; the cache stores kv_int8_codes' f16 ones."""
    x = f32(x)
    h = x.shape[-1]
    codes = np.empty(x.shape, dtype=np.int8)
    scales = []
    for s in range(0, h, group):
        q, scale = quantize_int8(x[..., s:s + group])
        codes[..., s:s + group] = q
        scales.append(scale)
    return codes, np.stack(scales, axis=-1).astype(F32)


def int8_scores(q: np.ndarray, key_codes: np.ndarray, key_scales: np.ndarray, group: int,
                sqrt_h: np.float32) -> np.ndarray:
    """Attention scores on the int8 KV cache (docs/numerics.md §6): the query [T, H, h] is
    quantised with the keys' groups, each group's dot with a key [P, H, h] is an exact
    integer, and e = Σ_j f32(f32(dot_j) · f32(f32(sq_j / √h) · sk_j)), ascending j from +0.
    Returns [T, H, P]."""
    qc, qs = int8_codes(q, group)
    sqh = qs / sqrt_h                                                   # [T, H, ng]
    acc = np.zeros((q.shape[0], q.shape[1], key_codes.shape[0]), dtype=F32)
    for j in range(qs.shape[-1]):
        sl = slice(j * group, (j + 1) * group)
        dot = np.einsum("thc,phc->thp", qc[..., sl].astype(np.int64),
                        key_codes[..., sl].astype(np.int64))             # exact integers
        coef = sqh[:, :, j, None] * key_scales[:, :, j].T[None]         # f32(sqh · sk)
        acc = acc + dot.astype(F32) * coef
    return acc


WS_BITS = 16          # attention weights in fixed point: u = rne(a · 2^16 / max a)
WS_CHUNK = 128        # visible positions per int32 sum: 128 · 2^16 · 127 < 2^30


def int8_weighted_sum(w: np.ndarray, mask: np.ndarray, value_codes: np.ndarray,
                      value_scales: np.ndarray, group: int) -> np.ndarray:
    """The attention output on the int8 KV cache, in integers (docs/numerics.md §6).

    w [T, H, P] softmax weights (0 where masked), mask [T, 1 or H, P], value codes [P, H, h]
    int8 and scales [P, H, groups].  Per query, head and value group j: `a_p = f32(w_p ·
    sv_p,j)`, `M = max a_p`; if M > 0, `u_p = rne(f32(a_p · f32(2^16 / M)))` (integers
    0 … 2^16); the visible positions, ascending, in runs of 128: `acc_c = Σ u_p · v_p,c`
    (exact in int32), `o_c = f32(o_c + f32(f32(acc_c) · f32(M · 2^-16)))` run by run from
    +0.  Returns [T, H, h]."""
    T, H = w.shape[:2]
    h = value_codes.shape[-1]
    mask = np.broadcast_to(mask, w.shape)
    chunk = np.where(mask, (np.cumsum(mask, axis=-1) - 1) // WS_CHUNK, -1)   # run of each visible p
    runs = int(chunk.max()) + 1 if chunk.size else 0
    one, unit = F32(2.0 ** WS_BITS), F32(2.0 ** -WS_BITS)
    o = np.zeros((T, H, h), dtype=F32)
    codes = value_codes.astype(np.int64)
    for j, s in enumerate(range(0, h, group)):
        sl = slice(s, s + group)
        a = w * value_scales[:, :, j].T[None]                            # [T, H, P] f32
        a = np.where(mask, a, F32(0))
        m = a.max(axis=-1)                                               # [T, H]
        pos = m > 0
        inv = np.where(pos, one / np.where(pos, m, ONE), F32(0))
        u = np.where(mask, rne(a * inv[..., None]), F32(0)).astype(np.int64)
        ms = m * unit
        for k in range(runs):
            uk = np.where(chunk == k, u, 0)
            acc = np.einsum("thp,phc->thc", uk, codes[:, :, sl])          # exact integers
            o[..., sl] = o[..., sl] + acc.astype(F32) * ms[..., None]
    return o


def kv_cq_levels(bits: int, codebook: np.ndarray):
    """(levels, midpoints) of the CQ KV code: header levels × f32(√2) (group 64)."""
    lv = quant.level_table(bits, codebook) * sqrt_f32(2.0)
    mids = (lv[:-1] + lv[1:]) * F32(0.5)
    return lv.astype(F32), mids.astype(F32)


def kv_cq(x: np.ndarray, bits: int, codebook: np.ndarray) -> np.ndarray:
    """Round trip of the CQ KV cache (kv_bits 2–4), group 64, per head vector."""
    x = f32(x)
    h = x.shape[-1]
    hp = -(-h // KV_CQ_GROUP) * KV_CQ_GROUP
    pad = np.zeros(x.shape[:-1] + (hp,), dtype=F32)
    pad[..., :h] = x
    g = pad.reshape(x.shape[:-1] + (hp // KV_CQ_GROUP, KV_CQ_GROUP))
    k8 = F32(0.125)
    rho = quant.fwht(g) * k8
    nu = np.sqrt(seq_sum(rho * rho))
    nu16 = nu.astype(np.float16).astype(F32)
    unit = rho / np.maximum(nu, F32(1e-12))[..., None]
    lv, mids = kv_cq_levels(bits, codebook)
    idx = (unit[..., None] > mids).sum(axis=-1)
    u = lv[idx] * nu16[..., None]
    return (quant.fwht(u) * k8).reshape(x.shape[:-1] + (hp,))[..., :h]


# ---- Needle 3 additions (docs/numerics.md §11) ----------------------------------------

def int8_roundtrip(x: np.ndarray) -> np.ndarray:
    """One int8 group per vector along the last axis (quantize_int8), read back as
    f32(f32(code) · scale): Needle 3's per-head int8 queries, keys and values."""
    q, scale = quantize_int8(x)
    return q.astype(F32) * scale[..., None]


def kron_mix(z: np.ndarray, aa: np.ndarray, bb: np.ndarray) -> np.ndarray:
    """Kron(z; Aa, Bb) = Aaᵀ · Z · Bb on the row-major [b_a, b_b] reshape of the last axis.

    T[k][j] = Σ_i f32(Aa[i][k]·Z[i][j]) ascending i, then Y[k][m] = Σ_j f32(T[k][j]·Bb[j][m])
    ascending j (docs/spec/deployment-numerics.md §1), vectorised over every other index.
    """
    ba, bbn = aa.shape[0], bb.shape[0]
    lead = z.shape[:-1]
    Z = f32(z).reshape(lead + (ba, bbn))
    t = np.zeros(lead + (ba, bbn), dtype=F32)
    for i in range(ba):
        t = t + aa[i][:, None] * Z[..., i, None, :]
    y = np.zeros(lead + (ba, bbn), dtype=F32)
    for j in range(bbn):
        y = y + t[..., :, j, None] * bb[j][None, :]
    return y.reshape(lead + (ba * bbn,))


# ---- float mode (the trained model, not a bit-exact target) ---------------------------
#
# Float mode multiplies f32 activations by dequantised f32 weights.  A BLAS f32 GEMM is the
# obvious way, but OpenBLAS picks its kernel (and so its summation order and FMA use) by CPU
# and by matrix shape: a [9, d] prefill product and a [1, d] decode product of the same row
# then differ in the last bit or two, and where the result feeds a quantiser (Needle 3's
# per-head int8 Q/K/V round trip, the CQ KV cache) a 1-ulp change can move a value by a whole
# quantum (issue 14 §1).  The helpers below make every float-mode product a function of its
# own row only, and almost surely of the exact real value only:
#
# * each product term x_c·w_c of two f32 numbers is exact in f64 (24 + 24 < 53 bits), so the
#   only rounding error is the f64 summation, at most ~n·2⁻⁵³·Σ|x_c·w_c| (n ≤ a few thousand),
#   i.e. ≲ 2⁻⁴⁰ relative to Σ|x_c·w_c| — some 2¹⁶ times finer than an f32 ulp;
# * the sum is rounded once to f32, so whatever kernel computed it (any CPU, any thread
#   count, any batch shape) gives the same f32 unless the exact value lies within that
#   2⁻⁴⁰ band around an f32 rounding boundary: odds ≲ 2⁻¹⁶·κ per output (κ = Σ|x·w| / |y|),
#   and in practice (errors ~√n·2⁻⁵³, not n·2⁻⁵³) far below that;
# * on top of that every row is computed by the same one-row call (a contiguous f64 row
#   times the same f64 Wᵀ: one DGEMV of fixed shape), so on one machine a row's value cannot
#   depend on how many other rows share the batch: prefill, decode and full-sequence forwards
#   agree exactly.
# Cost: about the same time as the f32 GEMMs at these sizes; f64 copies of the weights.

F64 = np.float64


def float_weights(indices, norms, bits: int, codebook, inp: int, group: int) -> np.ndarray:
    """Dense dequantised CQ weights [out, inp] f32 for float mode: W = u·H per group with the
    products and sums in f64 and one rounding to f32, i.e. quant.dequantize without its f32
    BLAS product (whose rounding depends on the CPU's kernel)."""
    u = quant.group_values(indices, norms, bits, codebook, group).astype(F64)
    w = (u @ quant.hadamard(group).astype(F64)).astype(F32)
    return w.reshape(indices.shape[0], -1)[:, :inp]


def float_matvec(wt64: np.ndarray, x: np.ndarray) -> np.ndarray:
    """y[..., r] = f32(Σ_c x[..., c]·W[r][c]) for float mode, wt64 = Wᵀ in f64 [in, out]:
    f64 products and sums, one rounding to f32, one call per row (see above)."""
    x64 = np.ascontiguousarray(x, dtype=F64).reshape(-1, wt64.shape[0])
    y = np.empty((x64.shape[0], wt64.shape[1]), dtype=F32)
    for i in range(x64.shape[0]):
        y[i] = x64[i] @ wt64                  # f64 result, rounded to f32 on assignment
    return y.reshape(np.shape(x)[:-1] + (wt64.shape[1],))
