"""Cactus Quants: codebooks, Hadamard rotations, quantise / pack / unpack / dequantise.

Spec: docs/spec/cact-format.md §4 (codebooks) and §6 (blob encodings, dequantisation).  These are
pure NumPy functions on arrays; the writer and the reader wrap them with file layout.
"""

from __future__ import annotations

import math

import numpy as np

from generator.archive.format import CQ_GROUP, TERNARY, codebook_block, index_width

F32 = np.float32

TERNARY_LEVEL_UNSCALED = 1.2240064
# Trit index (0: -c, 1: 0, 2: +c) -> crumb written to the stream.
TERNARY_INDEX_TO_CRUMB = np.array([3, 0, 1], dtype=np.uint8)   # crumb 2 is never written (rule R7)


def inv_sqrt(n: int) -> np.float32:
    """f32(1/sqrt(n)), correctly rounded from double."""
    return F32(1.0 / math.sqrt(n))


def hadamard(g: int) -> np.ndarray:
    """The normalised Sylvester Walsh-Hadamard matrix of order g, as f32 (±f32(1/√g))."""
    m = np.arange(g)
    parity = np.bitwise_count(m[:, None] & m[None, :]) & 1
    return np.where(parity == 1, -inv_sqrt(g), inv_sqrt(g)).astype(F32)


def fwht(x: np.ndarray) -> np.ndarray:
    """Unnormalised fast Walsh-Hadamard transform along the last axis, in f32.

    Butterfly stages of stride 1, 2, 4, ...; each maps (a, b) to (a + b, a - b).  This is the
    evaluation order docs/numerics.md fixes for every rotation of activations.
    """
    x = np.asarray(x, dtype=F32)
    g = x.shape[-1]
    lead = x.shape[:-1]
    h = 1
    while h < g:
        y = x.reshape(lead + (g // (2 * h), 2, h))
        a, b = y[..., 0, :], y[..., 1, :]
        x = np.stack((a + b, a - b), axis=-2).reshape(lead + (g,))
        h *= 2
    return x


def lloyd_max_levels(bits: int, group: int = CQ_GROUP) -> np.ndarray:
    """Recompute the header codebook block for `bits` exactly as the writers do (§4.1)."""
    k = 1 << bits
    samples = np.sort(np.random.RandomState(0).randn(400_000))
    idx = np.floor((np.arange(k) + 0.5) / k * samples.size).astype(np.int64)
    cent = samples[idx].astype(np.float64)
    for _ in range(200):
        bounds = (cent[:-1] + cent[1:]) / 2
        cell = np.searchsorted(bounds, samples, side="left")
        sums = np.bincount(cell, weights=samples, minlength=k)
        counts = np.bincount(cell, minlength=k)
        nz = counts > 0
        cent[nz] = sums[nz] / counts[nz]
    return (np.sort(cent) / math.sqrt(group)).astype(F32)


# The 28 f32 words `lloyd_max_levels` produces for widths 2, 3, 4 at group 128 (§4.1), kept
# as bit patterns so writing an archive does not rerun 600 Lloyd-Max iterations;
# host_tests/test_roundtrip.py::test_lloyd_max_recipe_reproduces_default_codebook recomputes them.
DEFAULT_CODEBOOK_WORDS = (
    0xbe085e47, 0xbd237060, 0x3d23fc09, 0x3e08a9db,
    0xbe41cdbb, 0xbdf16db0, 0xbd87797d, 0xbcac246c, 0x3cb50d39, 0x3d88c69c, 0x3df23363, 0x3e4261c1,
    0xbe7547c2, 0xbe390b02, 0xbe105747, 0xbddf41f9, 0xbda6f045, 0xbd67898a, 0xbd06eb34, 0xbc25be0a,
    0x3c5040f6, 0x3d124277, 0x3d738a80, 0x3dae086f, 0x3de6e514, 0x3e142b6e, 0x3e3ca926, 0x3e781699,
)


def default_codebook() -> np.ndarray:
    """The 28-entry codebook every writer stores (2-, 3-, 4-bit blocks)."""
    return np.array(DEFAULT_CODEBOOK_WORDS, dtype=np.uint32).view(F32).copy()


def ternary_level(group: int = CQ_GROUP) -> np.float32:
    return F32(TERNARY_LEVEL_UNSCALED / math.sqrt(group))


def binary_level(group: int = CQ_GROUP) -> np.float32:
    return F32(math.sqrt(2.0 / math.pi) / math.sqrt(group))


def level_table(bits: int, codebook: np.ndarray, group: int = CQ_GROUP) -> np.ndarray:
    """Stored index value -> f32 level.  For ternary the index is the crumb (0,1,3 used)."""
    if bits == TERNARY:
        c = ternary_level(group)
        return np.array([0.0, c, np.nan, -c], dtype=F32)
    if bits == 1:
        b = binary_level(group)
        return np.array([-b, b], dtype=F32)
    start, count = codebook_block(bits)
    return np.asarray(codebook[start:start + count], dtype=F32)


def quantize(w: np.ndarray, bits: int, codebook: np.ndarray, group: int = CQ_GROUP):
    """Quantise an [out, in] float matrix: returns (stored indices [out, in_pad] u8, norms f16).

    Each zero-padded group is rotated (ρ = x·H), its L2 norm is kept as f16 and the unit
    vector ρ/max(ν, 1e-12) is coded to the nearest level, ties to the lower level (§6.3).
    Ternary indices are returned already mapped to crumbs.
    """
    w = np.asarray(w, dtype=np.float64)
    out, inp = w.shape
    in_pad = -(-inp // group) * group
    padded = np.zeros((out, in_pad), dtype=np.float64)
    padded[:, :inp] = w
    groups = padded.reshape(out, in_pad // group, group)
    rho = groups @ hadamard(group).astype(np.float64)
    nu = np.sqrt(np.einsum("ogk,ogk->og", rho, rho))
    unit = (rho / np.maximum(nu, 1e-12)[..., None]).astype(F32)
    if bits == TERNARY:
        levels = np.array([-ternary_level(group), 0.0, ternary_level(group)], dtype=F32)
    elif bits == 1:
        levels = np.array([-binary_level(group), binary_level(group)], dtype=F32)
    else:
        levels = level_table(bits, codebook, group)
    mids = (levels[:-1].astype(np.float64) + levels[1:]) / 2
    idx = np.searchsorted(mids, unit.astype(np.float64), side="left").astype(np.uint8)
    if bits == TERNARY:
        idx = TERNARY_INDEX_TO_CRUMB[idx]
    return idx.reshape(out, in_pad), nu.astype(np.float16)


def pack(indices: np.ndarray, bits: int) -> np.ndarray:
    """Pack [out, in_pad] indices into LSB-first row bitstreams: [out, row_bytes] u8."""
    w = index_width(bits)
    out, in_pad = indices.shape
    bitplanes = (indices[..., None] >> np.arange(w, dtype=np.uint8)) & 1
    return np.packbits(bitplanes.reshape(out, in_pad * w), axis=1, bitorder="little")


def unpack(packed: np.ndarray, bits: int, in_pad: int) -> np.ndarray:
    """Inverse of `pack`: [out, row_bytes] u8 -> [out, in_pad] stored indices (u8)."""
    w = index_width(bits)
    out = packed.shape[0]
    flat = np.unpackbits(packed, axis=1, bitorder="little", count=in_pad * w)
    planes = flat.reshape(out, in_pad, w).astype(np.uint8)
    return (planes << np.arange(w, dtype=np.uint8)).sum(axis=-1, dtype=np.uint8)


def blob_bytes(indices: np.ndarray, norms: np.ndarray, bits: int) -> bytes:
    """The CQ blob: packed index rows, then the [out][ng] f16 norms (little-endian)."""
    return pack(indices, bits).tobytes() + np.asarray(norms, dtype="<f2").tobytes()


def group_values(indices: np.ndarray, norms: np.ndarray, bits: int, codebook: np.ndarray,
                 group: int = CQ_GROUP) -> np.ndarray:
    """u = level(idx) · norm, as f32, shaped [out, ng, group]."""
    out, in_pad = indices.shape
    lv = level_table(bits, codebook, group)[indices].reshape(out, in_pad // group, group)
    return lv * np.asarray(norms, dtype=F32)[..., None]


def dequantize(indices, norms, bits, codebook, inp, group=CQ_GROUP) -> np.ndarray:
    """Dense dequantisation W = u·H per group (§6.3), padding columns dropped: [out, inp] f32."""
    u = group_values(indices, norms, bits, codebook, group)
    w = (u @ hadamard(group)).astype(F32)
    return w.reshape(indices.shape[0], -1)[:, :inp]


def dequantize_fwht(indices, norms, bits, codebook, inp, group=CQ_GROUP) -> np.ndarray:
    """Dequantisation with the butterfly and one final f32(1/√g) multiply (docs/numerics.md)."""
    u = group_values(indices, norms, bits, codebook, group)
    w = fwht(u) * inv_sqrt(group)
    return w.reshape(indices.shape[0], -1)[:, :inp]
