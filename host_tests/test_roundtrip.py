"""Write → read → dequantise: the archive reproduces what the writer was given.

Spec: docs/spec/cact-format.md §1 (layout), §2 (header), §4 (codebook), §5 (records), §6 (blob
encodings, bit packing, dequantisation), §11 (tokenizer).

Known float matrices (Gaussian rows, widths 300 and 8 so the last CQ group is padded)
are written with `generator.writer` into a complete, canonical Needle 2 archive of a small
custom geometry, one archive per CQ width, and read back with `generator.reader`.

Measured relative Frobenius errors of CQ on Gaussian rows of width 300 (seeded,
[1024, 300] embedding): 2-bit 0.333, 3-bit 0.180, 4-bit 0.094, ternary 0.425, binary
(Needle 3 only) 0.592.  The bounds below bracket those with margin; the lower bounds
catch a tensor decoded at the wrong width or scale.
"""

from __future__ import annotations

import math
import struct
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import archive_edit as ae
from generator.archive import quant
from generator.archive import reader
from generator.archive import roles
from generator.commands import synth
from generator.archive import writer
from generator.archive.format import (BLOB_ALIGN, CODEBOOK_LEN, CQ, CQ_GROUP, FP16, FP32, HEADER_BYTES,
                              RAW, RECORD_BYTES, TAG_N2, TERNARY, cq_geometry, round_up)

# width code -> (low, high) relative Frobenius error on the [1024, 300] Gaussian embedding
ERROR_BOUNDS = {2: (0.30, 0.37), 3: (0.16, 0.20), 4: (0.08, 0.11), TERNARY: (0.39, 0.46)}
BINARY_BOUNDS = (0.55, 0.64)
WIDTH_IDS = {2: "cq2", 3: "cq3", 4: "cq4", TERNARY: "ternary"}

# d 300 (in_pad 384: the third group holds 44 real columns), hada_n 512, one layer,
# two lanes, one engram site with 8-wide table rows (in_pad 128: 120 padding columns).
RT_HEADER = dict(
    kv_window=0, kv_bits=8, vocab=1024, d_model=300, num_heads=4, num_kv_heads=2,
    num_layers=1, head_dim=16, max_seq_len=256, hada_n=512, mhc_lanes=2,
    engram_slots=32, engram_sub_dim=8, num_engram_tables=2, engram_conv_taps=4,
    engram_conv_dilation=3, num_engram_orders=2, engram_order0=2, engram_order1=3,
    engram_order2=0, engram_order3=0, num_engram_sites=1, engram_site0=0, engram_site1=0,
    engram_site2=0, engram_site3=0, rope_theta=10000.0,
)


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got.astype(np.float64) - want) / np.linalg.norm(want))


@lru_cache(maxsize=None)
def rt_archive(bits: int):
    """(archive bytes, {role: float64 matrix or FP16 source}, header, [writer.Tensor])."""
    rng = np.random.default_rng(1000 + bits)
    cb = quant.default_codebook()
    floats, tensors = {}, []
    for role in roles.core_roles(2, RT_HEADER):
        if role.dtype == CQ:
            w = rng.normal(size=role.shape)
            tensors.append(writer.cq(role.name, w, bits, cb))
        else:
            w = rng.normal(0.0, 0.5, size=role.shape)
            tensors.append(writer.fp16(role.name, w))
        floats[role.name] = w
    blob = synth.tokenizer_blob("tok1k.model")
    tensors.append(writer.raw("tokenizer", blob))
    data = writer.write(2, RT_HEADER, cb, tensors)
    return data, floats, dict(RT_HEADER), tensors


@pytest.fixture(scope="module", params=sorted(ERROR_BOUNDS), ids=lambda b: WIDTH_IDS[b])
def rt(request):
    bits = request.param
    data, floats, header, tensors = rt_archive(bits)
    return bits, reader.read(data), floats, header, tensors


# ---- dequantisation error ---------------------------------------------------------------------

def test_dequantised_embedding_error_within_bounds(rt):
    bits, a, floats, _, _ = rt
    lo, hi = ERROR_BOUNDS[bits]
    t = a.cq("embedding")
    assert (t.bits, t.group, t.in_pad) == (bits, 128, 384)
    err = rel_err(t.dequantize(), floats["embedding"])
    assert lo < err < hi, f"{WIDTH_IDS[bits]} embedding error {err:.4f} outside ({lo}, {hi})"


def test_every_cq_tensor_dequantises_close(rt):
    bits, a, floats, _, _ = rt
    lo, hi = ERROR_BOUNDS[bits]
    cq_roles = [r.role for r in a.records if r.dtype == CQ]
    assert len(cq_roles) == 1 + 5 + 3 + 3  # embedding, 5 projections, 3 mHC maps, 3 engram
    for role in cq_roles:
        w = floats[role]
        got = a.cq(role).dequantize()
        assert got.shape == w.shape and got.dtype == np.float32
        err = rel_err(got, w)
        # padded groups discard part of the error, small tensors scatter: upper bound only
        assert err < hi * 1.15, f"{role}: error {err:.4f}"


def test_fwht_dequantisation_matches_dense(rt):
    """The butterfly with one final 1/√g multiply equals W = u·H to f32 rounding."""
    _, a, _, _, _ = rt
    for role in ("embedding", "layer00.out_proj", "engram0.tables"):
        t = a.cq(role)
        dense, fast = t.dequantize(), t.dequantize(fwht=True)
        scale = np.abs(dense).max()
        np.testing.assert_allclose(fast, dense, rtol=0, atol=scale * 1e-5)


def test_padding_columns_are_dropped(rt):
    _, a, _, _, _ = rt
    t = a.cq("engram0.tables")
    assert (t.out, t.inp, t.in_pad, t.ng) == (64, 8, 128, 1)
    assert t.dequantize().shape == (64, 8)
    assert t.indices().shape == (64, 128)


def test_binary_width_roundtrip_in_needle3():
    """bits = 1 (Needle 3 only): levels ±√(2/π)/√g."""
    rng = np.random.default_rng(5)
    w = rng.normal(size=(1024, 64))

    def fn(tensors, hdr):
        tensors[0] = writer.cq("embedding", w, 1, quant.default_codebook())
    a = reader.read(ae.edit_tensors(ae.build_n3_tiny(), fn))
    t = a.cq("embedding")
    assert t.bits == 1
    np.testing.assert_array_equal(t.levels(), np.array([-0.07052370, 0.07052370], np.float32))
    lo, hi = BINARY_BOUNDS
    assert lo < rel_err(t.dequantize(), w) < hi


# ---- idempotence ---------------------------------------------------------------------------------

def test_requantising_dequantised_weights_is_idempotent(rt):
    """Quantising a dequantised matrix again gives the same indices.

    The norms are *not* reproduced: a dequantised group is level(idx)·ν·H, whose norm is
    ν·‖level(idx)‖, and ‖level(idx)‖ ≠ 1 in general (≈ √(1 − D) for a Lloyd-Max code
    with distortion D).  So the second pass stores ν' = f16(ν·‖level(idx)‖), and the
    dequantised result is the first one scaled per group by ν'/ν.
    """
    bits, a, _, _, _ = rt
    for role in ("embedding", "layer00.q_proj", "mhc.phi_res"):
        t = a.cq(role)
        idx, nu = t.indices(), t.norms()
        full = quant.dequantize(idx, nu, bits, a.codebook, t.in_pad)  # padding columns kept
        idx2, nu2 = quant.quantize(full, bits, a.codebook)
        np.testing.assert_array_equal(idx2, idx, err_msg=role)
        lv = t.levels()[idx].reshape(t.out, t.ng, CQ_GROUP).astype(np.float64)
        want = nu.astype(np.float64) * np.sqrt((lv ** 2).sum(axis=-1))
        np.testing.assert_allclose(nu2.astype(np.float64), want, rtol=2**-10, err_msg=role)
        # a third pass keeps the indices again
        again = quant.dequantize(idx2, nu2, bits, a.codebook, t.in_pad)
        np.testing.assert_array_equal(quant.quantize(again, bits, a.codebook)[0], idx)


def test_requantising_truncated_dequantisation_keeps_full_groups(rt):
    """With the padding columns dropped, groups that lie wholly inside `in` keep their indices."""
    bits, a, _, _, _ = rt
    t = a.cq("embedding")
    idx = t.indices()
    idx2, _ = quant.quantize(t.dequantize(), bits, a.codebook)
    full_groups = t.inp // CQ_GROUP * CQ_GROUP  # 256 of 300 columns
    np.testing.assert_array_equal(idx2[:, :full_groups], idx[:, :full_groups])


def test_writer_quantisation_is_deterministic(rt):
    bits, a, floats, _, _ = rt
    w = floats["layer00.k_proj"]
    t = writer.cq("layer00.k_proj", w, bits, a.codebook)
    assert t.payload == bytes(a.blob(a.record("layer00.k_proj")))


# ---- FP16 / FP32 / RAW ---------------------------------------------------------------------------

def test_fp16_tensors_roundtrip_exactly(rt):
    _, a, floats, _, _ = rt
    n = 0
    for r in a.records:
        if r.dtype != FP16:
            continue
        got = a.array(r.role)
        want = np.asarray(floats[r.role], dtype=np.float32).astype(np.float16).astype(np.float32)
        assert got.shape == want.shape
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), err_msg=r.role)
        n += 1
    assert n == 9 + 6 + 1 + 1  # one layer's 9, six mHC, engram taps, final_norm


def test_fp16_representable_values_are_exact():
    """Values exactly representable in binary16 survive bit for bit (incl. ±0, subnormals)."""
    special = np.array([0.0, -0.0, 1.0, -2.5, 65504.0, -65504.0, 2.0**-14, 2.0**-24,
                        0.099975586, 1023.5], dtype=np.float32)
    assert np.array_equal(special.astype(np.float16).astype(np.float32), special)
    data, _, _, tensors = rt_archive(2)

    def fn(ts, hdr):
        ts[1] = writer.fp16("layer00.norm_in", np.resize(special, 300))
    a = reader.read(ae.edit_tensors(data, fn))
    got = a.array("layer00.norm_in")
    np.testing.assert_array_equal(got.view(np.uint32), np.resize(special, 300).view(np.uint32))


def test_fp32_permutations_roundtrip_exactly(n3_bytes):
    perm = np.random.default_rng(3).permutation(64).astype(np.float32)

    def fn(ts, hdr):
        i = next(k for k, t in enumerate(ts) if t.role == "hada_p2")
        ts[i] = writer.fp32("hada_p2", perm)
    a = reader.read(ae.edit_tensors(n3_bytes, fn))
    rec = a.record("hada_p2")
    assert (rec.dtype, rec.shape, rec.nbytes) == (FP32, (64,), 256)
    np.testing.assert_array_equal(a.array("hada_p2"), perm)


def test_tokenizer_blob_roundtrips(rt):
    _, a, _, _, _ = rt
    assert a.tokenizer_blob() == synth.tokenizer_blob("tok1k.model")
    assert a.tokenizer.n_pieces == 1024
    assert a.records[-1].dtype == RAW


# ---- header, codebook and records ----------------------------------------------------------------

def test_header_reads_back_identically(rt):
    _, a, _, header, tensors = rt
    assert a.generation == 2
    assert a.header["tag"] == TAG_N2
    assert a.header["num_tensors"] == len(tensors)
    assert a.header["codebook_len"] == CODEBOOK_LEN
    for name, value in header.items():
        assert a.header[name] == value, name
    assert isinstance(a.header["rope_theta"], float)


def test_codebook_reads_back_bit_for_bit(rt):
    _, a, _, _, _ = rt
    assert a.codebook.dtype == np.float32 and a.codebook.shape == (28,)
    np.testing.assert_array_equal(a.codebook.view(np.uint32), quant.default_codebook().view(np.uint32))


def test_records_read_back_identically(rt):
    bits, a, _, _, tensors = rt
    assert [r.role for r in a.records] == [t.role for t in tensors]
    for r, t in zip(a.records, tensors):
        assert (r.dtype, r.shape, r.group, r.bits, r.nbytes) == \
               (t.dtype, t.shape, t.group, t.bits, len(t.payload)), r.role
        assert bytes(a.blob(r)) == t.payload, r.role
        if r.dtype == CQ:
            assert r.nbytes == cq_geometry(r.shape[0], r.shape[1], 128, bits)[3]


def test_layout_follows_the_writer_algorithm(rt):
    _, a, _, _, tensors = rt
    pos = HEADER_BYTES[2] + 4 * CODEBOOK_LEN + RECORD_BYTES * len(tensors)
    assert a.directory_end == pos
    for r in a.records:
        pos = round_up(pos, BLOB_ALIGN)
        assert r.offset == pos, r.role
        pos += r.nbytes
    assert a.size == pos


def test_raw_directory_bytes(rt):
    """The record bytes themselves (§5): layout, zero padding and zero shape tail."""
    _, a, _, _, tensors = rt
    data = bytes(a.data)
    for i, t in enumerate(tensors):
        ro = HEADER_BYTES[2] + 4 * CODEBOOK_LEN + RECORD_BYTES * i
        dtype, ndim, pad, *shape4 = struct.unpack_from("<BBH4I", data, ro)
        offset, nbytes, group, bits = struct.unpack_from("<QQII", data, ro + 20)
        assert (dtype, ndim, pad) == (t.dtype, len(t.shape), 0)
        assert tuple(shape4) == tuple(t.shape) + (0,) * (4 - len(t.shape))
        assert (nbytes, group, bits) == (len(t.payload), t.group, t.bits)


# ---- bit packing -------------------------------------------------------------------------------

ALPHABET = {1: [0, 1], 2: [0, 1, 2, 3], 3: list(range(8)), 4: list(range(16)),
            TERNARY: [0, 1, 3]}


def unpack_by_spec(packed: np.ndarray, bits: int, in_pad: int) -> np.ndarray:
    """§6.2 read literally: index k occupies bits [k·w, (k+1)·w) of the row, LSB first;
    for w = 3 read the 16-bit little-endian window at byte floor(3k/8), shift, mask."""
    w = 2 if bits == TERNARY else bits
    out = np.zeros((packed.shape[0], in_pad), dtype=np.uint8)
    for r in range(packed.shape[0]):
        row = packed[r].tobytes()
        for k in range(in_pad):
            if w == 3:
                byte, shift = divmod(3 * k, 8)
                window = row[byte] | ((row[byte + 1] << 8) if shift + 3 > 8 else 0)
                out[r, k] = (window >> shift) & 7
            else:
                byte, shift = divmod(k * w, 8)
                out[r, k] = (row[byte] >> shift) & ((1 << w) - 1)
    return out


@pytest.mark.parametrize("bits", [1, 2, 3, 4, TERNARY], ids=["w1", "w2", "w3", "w4", "ternary"])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_pack_unpack_roundtrip(bits, data):
    out = data.draw(st.integers(1, 4), label="out")
    groups = data.draw(st.integers(1, 3), label="groups")
    group = data.draw(st.sampled_from([8, 16, 128]), label="group")
    in_pad = groups * group
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    idx = np.random.default_rng(seed).choice(ALPHABET[bits], size=(out, in_pad)).astype(np.uint8)
    packed = quant.pack(idx, bits)
    w = 2 if bits == TERNARY else bits
    assert packed.shape == (out, in_pad * w // 8) and packed.dtype == np.uint8
    np.testing.assert_array_equal(quant.unpack(packed, bits, in_pad), idx)
    np.testing.assert_array_equal(unpack_by_spec(packed, bits, in_pad), idx)


def test_packing_conventions_of_the_spec():
    """The worked views of §6.2."""
    # w = 4: even column in the low nibble
    assert quant.pack(np.array([[0x3, 0xA] * 4], np.uint8), 4).tobytes() == bytes([0xA3] * 4)
    # w = 2: column 4m + i in bits 2i..2i+1
    assert quant.pack(np.array([[1, 2, 3, 0] * 2], np.uint8), 2).tobytes() == bytes([0b00111001] * 2)
    # w = 1: column 8m + i in bit i
    assert quant.pack(np.array([[1, 0, 0, 0, 0, 0, 0, 1]], np.uint8), 1).tobytes() == b"\x81"
    # w = 3: eight indices in one 3-byte little-endian word, index k at bit 3k
    idx = np.array([[1, 2, 3, 4, 5, 6, 7, 0]], np.uint8)
    word = sum(int(v) << (3 * k) for k, v in enumerate(idx[0]))
    assert quant.pack(idx, 3).tobytes() == word.to_bytes(3, "little")
    # ternary: trit −c → crumb 3, 0 → crumb 0, +c → crumb 1
    np.testing.assert_array_equal(quant.TERNARY_INDEX_TO_CRUMB, [3, 0, 1])


def test_stored_ternary_crumbs_use_only_0_1_3(ternary_bytes):
    a = reader.read(ternary_bytes)
    for r in a.records:
        if r.dtype == CQ:
            assert r.bits == TERNARY
            crumbs = np.unique(a.cq(r.role).indices())
            assert set(crumbs.tolist()) <= {0, 1, 3}, r.role


# ---- codebook provenance -------------------------------------------------------------------

def test_analytic_levels_match_the_spec():
    assert struct.pack("<f", quant.ternary_level(128)) == struct.pack("<I", 0x3DDD919F)
    assert quant.binary_level(128) == np.float32(0.07052370)
    assert struct.pack("<f", quant.inv_sqrt(128)) == struct.pack("<I", 0x3DB504F3)
    words = quant.default_codebook().view(np.uint32)[:4].tolist()
    assert words == [0xBE085E47, 0xBD237060, 0x3D23FC09, 0x3E08A9DB]


def test_default_codebook_is_sorted_per_width():
    cb = quant.default_codebook()
    for bits in (2, 3, 4):
        block = cb[(1 << bits) - 4:(1 << bits) - 4 + (1 << bits)]
        assert np.all(np.diff(block) > 0)
        assert np.all(np.abs(block) < 1)


@pytest.mark.slow
def test_lloyd_max_recipe_reproduces_default_codebook():
    """§4.1 rerun (400 000 RandomState(0) samples, 200 iterations per width; ~3 s)."""
    recomputed = np.concatenate([quant.lloyd_max_levels(b) for b in (2, 3, 4)])
    assert recomputed.dtype == np.float32 and recomputed.shape == (28,)
    np.testing.assert_array_equal(recomputed.view(np.uint32), quant.default_codebook().view(np.uint32))
    # the unscaled 2-bit values quoted in §4.1
    unscaled = quant.lloyd_max_levels(2).astype(np.float64) * math.sqrt(128)
    np.testing.assert_allclose(unscaled, [-1.5067, -0.4514, 0.4529, 1.5099], atol=2e-4)
