"""Hand-made malformed archives: `reader.read` must raise CactError naming the cause.

Spec: docs/spec/cact-format.md §1–§11 and the validation rules of §13 (F1–F6, G1–G10, R1–R13,
T1–T4).  Each case edits a valid archive (`tiny` preset unless noted; a ternary variant
of it; a small Needle 3 archive built by `archive_edit.build_n3_tiny`) and asserts

* the exception is a CactError (nothing else escapes),
* the message matches patterns naming the field (``header field kv_bits``) or the
  tensor (``tensor 3 (layer00.k_proj)``) and what is wrong with it,
* `err.offset` is the absolute byte the message blames, where there is one.

Layout of `tiny` (55 tensors): header 0–120, codebook 120–232, directory 232–2652,
blob 0 (embedding) at 2688 … tensor 54 (tokenizer) at 142784–154074.  Tensor indices
used below: 0 embedding, 1 layer00.norm_in, 3 layer00.k_proj, 5/6 layer00.q_norm/k_norm,
10 layer00.attn_gate, 11 layer00.pre_hada, 17 layer01.k_proj, 32 mhc.b_pre,
46 final_norm, 47 heads.manifest, 48–50 head.contrastive.*, 51–53 head.confidence.*,
54 tokenizer (checked by `test_tiny_layout_is_what_the_cases_assume`).

Directory-level errors (R1–R5, R9) currently name only ``tensor N``; the patterns accept
an optional ``(role)`` so they keep passing once the reader adds it (see the xfail test
`test_directory_errors_name_the_role`).
"""

from __future__ import annotations

import re
import struct
from dataclasses import replace

import numpy as np
import pytest

import archive_edit as ae
from generator.archive import reader
from generator.archive import writer
from generator.errors import CactError
from generator.archive.format import FP16, FP32, RAW, TAG_N2, TAG_N3, cq_geometry, round_up

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1

# Some messages currently print NumPy scalar reprs ("np.float32(nan)"); the patterns
# tolerate the prefix, `test_messages_print_plain_numbers` (xfail) records the bug.
NP32 = r"(np\.float32\()?"
NP64 = r"(np\.float64\()?"

TINY_ROLES = {0: "embedding", 1: "layer00.norm_in", 3: "layer00.k_proj", 4: "layer00.v_proj",
              5: "layer00.q_norm", 6: "layer00.k_norm", 10: "layer00.attn_gate",
              11: "layer00.pre_hada", 17: "layer01.k_proj", 32: "mhc.b_pre",
              46: "final_norm", 47: "heads.manifest", 48: "head.contrastive.probes",
              49: "head.contrastive.proj", 50: "head.contrastive.bias",
              51: "head.confidence.probes", 52: "head.confidence.proj",
              53: "head.confidence.bias", 54: "tokenizer"}


# ---- message patterns ------------------------------------------------------------------

def hf(name: str) -> str:
    """A header-field error."""
    return rf"^header field {name}: "


def tn(i: int) -> str:
    """A directory-level record error: `tensor i: ` (role optional, see module doc)."""
    role = TINY_ROLES.get(i)
    opt = rf"( \({re.escape(role)}\))?" if role else r"( \([\w.]+\))?"
    return rf"^tensor {i}{opt}: "


def tr(i: int, role: str | None = None) -> str:
    """An error naming the tensor with its role."""
    role = role or TINY_ROLES[i]
    return rf"^tensor {i} \({re.escape(role)}\): "


def expect_error(data: bytes, patterns, at=None, check_data: bool = True) -> CactError:
    with pytest.raises(CactError) as info:
        reader.read(data, check_data=check_data)
    err = info.value
    msg = str(err)
    assert "\n" not in msg, msg
    for p in patterns:
        assert re.search(p, msg), f"pattern {p!r} not found in {msg!r}"
    if at is not None:
        assert err.offset == at, f"offset {err.offset} != {at}: {msg!r}"
        assert msg.endswith(f"(at byte {at})"), msg
    return err


# ---- the archives the cases edit ---------------------------------------------------------

class Ctx:
    """Valid archives plus shortcuts into their layout."""

    def __init__(self, tiny: bytes, ternary: bytes, n3: bytes):
        self.tiny, self.ternary, self.n3 = tiny, ternary, n3
        self.a = reader.read(tiny)
        self.a3 = reader.read(n3)

    def rec(self, i: int) -> reader.Record:
        return self.a.records[i]

    def ro(self, i: int, field: str = "dtype", data: bytes | None = None) -> int:
        """Absolute offset of a record field."""
        return ae.record_field_offset(data or self.tiny, i, field)

    def r3(self, role: str) -> reader.Record:
        return self.a3.record(role)

    def tok_piece(self, i: int) -> ae.Piece:
        return ae.tokenizer_pieces(self.tiny)[1][i]

    def piece_with(self, surface: bytes) -> ae.Piece:
        return next(p for p in ae.tokenizer_pieces(self.tiny)[1] if p.surface == surface)


@pytest.fixture(scope="module")
def ctx(tiny_bytes, ternary_bytes, n3_bytes) -> Ctx:
    return Ctx(tiny_bytes, ternary_bytes, n3_bytes)


def test_tiny_layout_is_what_the_cases_assume(ctx):
    assert len(ctx.tiny) == 154074
    assert len(ctx.a.records) == 55
    for i, role in TINY_ROLES.items():
        assert ctx.a.records[i].role == role
    assert ae.region_boundaries(ctx.tiny)["directory.end"] == 2652
    assert ctx.rec(0).offset == 2688
    assert ctx.rec(54).offset == 142784


# ---- the table ------------------------------------------------------------------------------

def case(id_, make, *patterns, at=None, check_data=True, marks=()):
    return pytest.param(make, patterns, at, check_data, id=id_, marks=marks)


T = ae  # short alias inside the lambdas
H = ae.patch_header


def _swap_offsets(c: Ctx, i: int, j: int) -> bytes:
    oi, oj = c.rec(i).offset, c.rec(j).offset
    return T.patch_record(T.patch_record(c.tiny, i, offset=oj), j, offset=oi)


def _drop_last_piece(c: Ctx) -> bytes:
    from generator.archive import tokenizer
    tok = tokenizer.parse_blob(c.a.tokenizer_blob())
    tok = replace(tok, n_pieces=tok.n_pieces - 1, pieces=tok.pieces[:-1])
    return T.with_tokenizer_blob(c.tiny, T.repack_tokenizer(tok))


def _without_final_norm_and_heads(c: Ctx) -> bytes:
    def fn(tensors, hdr):
        del tensors[46:54]
    return T.edit_tensors(c.tiny, fn)


def _drop_tensor(c: Ctx, i: int) -> bytes:
    def fn(tensors, hdr):
        del tensors[i]
    return T.edit_tensors(c.tiny, fn)


def _extra_tensor_before_tokenizer(c: Ctx) -> bytes:
    def fn(tensors, hdr):
        tensors.insert(-1, writer.fp16("stray", np.zeros(4)))
    return T.edit_tensors(c.tiny, fn)


def _duplicate_surface(c: Ctx) -> bytes:
    a, b = c.tok_piece(297), c.tok_piece(319)  # two NORMAL pieces with 5-byte surfaces
    assert len(a.surface) == len(b.surface) == 5
    return T.patch_bytes(c.tiny, b.surface_at, a.surface)


def _n3_audio_section(c: Ctx) -> bytes:
    def fn(tensors, hdr):
        manifest = next(i for i, t in enumerate(tensors) if t.role == "heads.manifest")
        del tensors[manifest:-1]
        tensors.insert(-1, writer.fp32("audio.manifest", [3246.0] + [0.0] * 12))
    return T.edit_tensors(c.n3, fn)


def _n3_vocab_below_pieces(c: Ctx) -> bytes:
    def fn(tensors, hdr):
        hdr["vocab"] = 1000
        tensors[0] = writer.cq("embedding", np.ones((1000, 64)), 4, c.a3.codebook)
    return T.edit_tensors(c.n3, fn)


def _n3_perm(c: Ctx, role: str, k: int, value: float) -> bytes:
    return T.patch_bytes(c.n3, c.r3(role).offset + 4 * k, struct.pack("<f", value))


def _cq_norm_offset(c: Ctx, i: int, k: int) -> int:
    r = c.rec(i)
    _, _, row_bytes, _ = cq_geometry(r.shape[0], r.shape[1], r.group, r.bits)
    return r.offset + r.shape[0] * row_bytes + 2 * k


def _past_eof_offset(c: Ctx) -> int:
    return round_up(len(c.tiny), 64) + 64


CASES = [
    # ---- F2: tag -------------------------------------------------------------------------
    case("tag-garbage", lambda c: T.patch_tag(c.tiny, 0xDEADBEEF),
         r"^not a \.cact archive \(tag 0xDEADBEEF\) \(at byte 0\)$", at=0),
    case("tag-all-zero-file", lambda c: bytes(4096),
         r"^not a \.cact archive \(tag 0x00000000\)", at=0),
    case("tag-byte-swapped", lambda c: struct.pack(">I", TAG_N2) + c.tiny[4:],
         r"^not a \.cact archive \(tag 0x832AE105\)", at=0),
    case("tag-n2-plus-2", lambda c: T.patch_tag(c.tiny, TAG_N2 + 2),
         r"^not a \.cact archive \(tag 0x05E12A85\)", at=0),
    # the other generation's tag on a Needle 2 body: parsed as a 196-byte header, the
    # "codebook" then starts in the middle of the real one and is not increasing
    case("n3-tag-on-n2-body", lambda c: T.patch_tag(c.tiny, TAG_N3),
         r"^codebook: codebook \d-bit block is not strictly increasing"),
    case("n3-tag-on-120-byte-n2-header", lambda c: T.patch_tag(c.tiny[:120], TAG_N3),
         r"^header: truncated header: Needle 3 needs 196 bytes, file has 120", at=120),
    case("n3-tag-on-n2-header-and-codebook", lambda c: T.patch_tag(c.tiny[:232], TAG_N3),
         hf("num_tensors"), r"ends at byte 2728, past the end of the 232-byte file", at=4),
    case("n2-tag-on-n3-body", lambda c: T.patch_tag(c.n3, TAG_N2),
         r"^codebook: codebook 2-bit block is not strictly increasing"),
    # ---- F3: codebook_len ------------------------------------------------------------------
    case("codebook_len-27", lambda c: H(c.tiny, "codebook_len", 27),
         hf("codebook_len"), r"codebook_len is 27, expected 28", at=8),
    case("codebook_len-0", lambda c: H(c.tiny, "codebook_len", 0),
         hf("codebook_len"), r"codebook_len is 0, expected 28", at=8),
    case("codebook_len-u32max", lambda c: H(c.tiny, "codebook_len", U32_MAX),
         hf("codebook_len"), r"codebook_len is 4294967295", at=8),
    # ---- F4/F6: num_tensors --------------------------------------------------------------
    case("num_tensors-u32max", lambda c: H(c.tiny, "num_tensors", U32_MAX),
         hf("num_tensors"), rf"directory of 4294967295 records ends at byte {232 + 44 * U32_MAX}, "
         r"past the end of the 154074-byte file", at=4),
    case("num_tensors-2^31", lambda c: H(c.tiny, "num_tensors", 2**31),
         hf("num_tensors"), r"directory of 2147483648 records", at=4),
    case("num_tensors-just-past-eof", lambda c: H(c.tiny, "num_tensors", (154074 - 232) // 44 + 1),
         hf("num_tensors"), r"directory of 3497 records ends at byte 154100, past the end", at=4),
    case("num_tensors-one-too-many", lambda c: H(c.tiny, "num_tensors", 56),
         tn(0), r"blob offset 2688 lies inside the header/directory \(ends at 2696\)",
         at=232 + 20),
    case("num_tensors-0", lambda c: H(c.tiny, "num_tensors", 0),
         hf("num_tensors"), r"num_tensors is 0: an archive holds at least", at=4),
    case("num_tensors-1", lambda c: H(c.tiny, "num_tensors", 1),
         hf("num_tensors"), r"num_tensors is 1", at=4),
    # the last position is where the tokenizer must be, so the message names that role
    case("num_tensors-one-too-few", lambda c: H(c.tiny, "num_tensors", 54),
         r"^tensor 53 \(tokenizer\): ", r"last record is not the RAW tokenizer", at=232 + 44 * 53),
    case("not-canonical-no-final_norm-no-heads", _without_final_norm_and_heads,
         hf("num_tensors"), r"num_tensors is 47, but the geometry needs 47 model tensors plus a "
         r"tokenizer", at=4),
    case("not-canonical-num_layers-3", lambda c: H(c.tiny, "num_layers", 3),
         hf("num_tensors"), r"geometry needs 61 model tensors", at=4),
    # ---- F5: codebook values ------------------------------------------------------------------
    case("codebook-nan", lambda c: T.patch_codebook(c.tiny, 5, float("nan")),
         rf"^codebook: codebook entry 5 is {NP32}nan", at=140),
    case("codebook-inf", lambda c: T.patch_codebook(c.tiny, 20, float("inf")),
         rf"^codebook: codebook entry 20 is {NP32}inf", at=200),
    case("codebook-magnitude-1", lambda c: T.patch_codebook(c.tiny, 27, 1.0),
         rf"^codebook: codebook entry 27 is {NP32}1\.0\)?: must be finite with \|v\| < 1", at=228),
    case("codebook-magnitude-first-of-block", lambda c: T.patch_codebook(c.tiny, 12, -1.5),
         rf"codebook entry 12 is {NP32}-1\.5", at=168),
    case("codebook-swapped-2bit", lambda c: T.patch_bytes(c.tiny, 120, c.tiny[124:128] + c.tiny[120:124]),
         r"^codebook: codebook 2-bit block is not strictly increasing at entry 1", at=124),
    case("codebook-equal-4bit", lambda c: T.patch_bytes(c.tiny, 172, c.tiny[168:172]),
         r"codebook 4-bit block is not strictly increasing at entry 13", at=172),
    # ---- G1: sizes -------------------------------------------------------------------------------
    *[case(f"{name}-0", (lambda n: lambda c: H(c.tiny, n, 0))(name),
           hf(name), rf"{name} is 0, must be at least 1", at=ae.header_offset(name))
      for name in ("d_model", "vocab", "num_layers", "num_heads", "num_kv_heads", "mhc_lanes",
                   "max_seq_len")],
    case("heads-not-divisible", lambda c: H(c.tiny, "num_kv_heads", 3),
         hf("num_kv_heads"), r"num_heads 4 is not a multiple of num_kv_heads 3", at=32),
    case("kv-heads-above-heads", lambda c: H(c.tiny, "num_kv_heads", 8),
         hf("num_kv_heads"), r"num_heads 4 is not a multiple of num_kv_heads 8", at=32),
    # ---- G2, G3 --------------------------------------------------------------------------------
    case("head_dim-odd", lambda c: H(c.tiny, "head_dim", 15),
         hf("head_dim"), r"head_dim is 15, must be even and at least 2", at=40),
    case("head_dim-0", lambda c: H(c.tiny, "head_dim", 0), hf("head_dim"), r"head_dim is 0", at=40),
    case("hada_n-not-power-of-two", lambda c: H(c.tiny, "hada_n", 63),
         hf("hada_n"), r"hada_n is 63, expected 64 \(smallest power of two >= d_model 64\)", at=48),
    case("hada_n-wrong-power-128", lambda c: H(c.tiny, "hada_n", 128),
         hf("hada_n"), r"hada_n is 128, expected 64", at=48),
    case("hada_n-wrong-power-32", lambda c: H(c.tiny, "hada_n", 32),
         hf("hada_n"), r"hada_n is 32, expected 64", at=48),
    case("d_model-65-needs-hada_n-128", lambda c: H(c.tiny, "d_model", 65),
         hf("hada_n"), r"hada_n is 64, expected 128 \(smallest power of two >= d_model 65\)", at=48),
    # ---- G4, G5, G6 ----------------------------------------------------------------------------
    *[case(f"kv_bits-{v}", (lambda v: lambda c: H(c.tiny, "kv_bits", v))(v),
           hf("kv_bits"), rf"kv_bits is {v}, must be 2, 3, 4 or 8", at=16)
      for v in (5, 0, 1, 16, U32_MAX)],
    case("kv_window-above-max_seq_len", lambda c: H(c.tiny, "kv_window", 257),
         hf("kv_window"), r"kv_window 257 exceeds max_seq_len 256", at=12),
    case("kv_window-u32max", lambda c: H(c.tiny, "kv_window", U32_MAX),
         hf("kv_window"), r"kv_window 4294967295 exceeds", at=12),
    *[case(f"rope_theta-{name}", (lambda v: lambda c: H(c.tiny, "rope_theta", v))(v),
           hf("rope_theta"), rf"rope_theta is {text}, must be finite and > 0", at=116)
      for name, v, text in (("nan", float("nan"), "nan"), ("zero", 0.0, r"0\.0"),
                            ("negative", -1.0, r"-1\.0"), ("inf", float("inf"), "inf"),
                            ("minus-zero", -0.0, r"-0\.0"))],
    # ---- G7: engram orders -----------------------------------------------------------------------
    case("engram-dilation-not-max-order", lambda c: H(c.tiny, "engram_conv_dilation", 2),
         hf("engram_conv_dilation"), r"engram_conv_dilation is 2, expected max\(orders\) = 3", at=72),
    case("engram-dilation-above-max-order", lambda c: H(c.tiny, "engram_conv_dilation", 4),
         hf("engram_conv_dilation"), r"is 4, expected", at=72),
    case("engram-conv-taps-3", lambda c: H(c.tiny, "engram_conv_taps", 3),
         hf("engram_conv_taps"), r"engram_conv_taps is 3, expected 4", at=68),
    case("engram-tables-not-multiple-of-orders", lambda c: H(c.tiny, "num_engram_tables", 3),
         hf("num_engram_tables"), r"num_engram_tables is 3, must be a positive multiple of "
         r"num_engram_orders 2", at=64),
    case("engram-tables-0", lambda c: H(c.tiny, "num_engram_tables", 0),
         hf("num_engram_tables"), r"num_engram_tables is 0", at=64),
    case("engram-unused-order-slot-nonzero", lambda c: H(c.tiny, "engram_order3", 4),
         hf("engram_order3"), r"unused order slot 3 is 4, must be 0", at=92),
    case("engram-used-order-0", lambda c: H(c.tiny, "engram_order0", 0),
         hf("engram_order0"), r"engram order 0 is 0, must be at least 1", at=80),
    case("engram-num-orders-0-with-sites", lambda c: H(c.tiny, "num_engram_orders", 0),
         hf("engram_order0"), r"unused order slot 0 is 2", at=80),
    case("engram-num-orders-0-all-slots-0",
         lambda c: H(H(H(c.tiny, "num_engram_orders", 0), "engram_order0", 0), "engram_order1", 0),
         hf("num_engram_orders"), r"engram sites present but num_engram_orders is 0", at=76),
    case("engram-num-orders-5", lambda c: H(c.tiny, "num_engram_orders", 5),
         hf("num_engram_orders"), r"num_engram_orders is 5, at most 4 allowed", at=76),
    case("engram-sub_dim-0", lambda c: H(c.tiny, "engram_sub_dim", 0),
         hf("engram_sub_dim"), r"engram_sub_dim is 0, must be at least 1", at=60),
    case("engram-slots-0", lambda c: H(c.tiny, "engram_slots", 0),
         hf("engram_slots"), r"engram_slots is 0", at=56),
    # ---- G8: engram sites ------------------------------------------------------------------------
    case("engram-site-past-num_layers", lambda c: H(c.tiny, "engram_site1", 2),
         hf("engram_site1"), r"engram site 1 is layer 2, past num_layers 2", at=104),
    case("engram-site-u32max", lambda c: H(c.tiny, "engram_site0", U32_MAX),
         hf("engram_site0"), r"engram site 0 is layer 4294967295", at=100),
    case("engram-duplicate-sites", lambda c: H(c.tiny, "engram_site1", 0),
         hf("engram_site1"), r"engram sites must be strictly increasing \(0 then 0\)", at=104),
    case("engram-decreasing-sites",
         lambda c: H(H(c.tiny, "engram_site0", 1), "engram_site1", 0),
         hf("engram_site1"), r"strictly increasing \(1 then 0\)", at=104),
    case("engram-unused-site-slot-nonzero", lambda c: H(c.tiny, "engram_site2", 1),
         hf("engram_site2"), r"unused site slot 2 is 1, must be 0", at=108),
    case("engram-num-sites-5", lambda c: H(c.tiny, "num_engram_sites", 5),
         hf("num_engram_sites"), r"num_engram_sites is 5, at most 4 allowed", at=96),
    # ---- R10: geometry vs directory -------------------------------------------------------------
    case("mhc_lanes-2-shape-mismatch", lambda c: H(c.tiny, "mhc_lanes", 2),
         tr(32), r"shape \[2, 4\] differs from the geometry's \[2, 2\]", at=232 + 44 * 32 + 4),
    case("vocab-1000-embedding-shape", lambda c: H(c.tiny, "vocab", 1000),
         tr(0), r"shape \[1024, 64\] differs from the geometry's \[1000, 64\]", at=232 + 4),
    case("layer01-k_proj-shape", lambda c: T.patch_record(c.tiny, 17, shape=(32, 100)),
         tr(17), r"shape \[32, 100\] differs from the geometry's \[32, 64\]", at=232 + 44 * 17 + 4),
    case("q_norm-shape-rank", lambda c: T.patch_record(c.tiny, 5, ndim=2, shape=(4, 4)),
         tr(5), r"shape \[4, 4\] differs from the geometry's \[16\]", at=232 + 44 * 5 + 4),
    case("norm_in-fp32-instead-of-fp16",
         lambda c: T.patch_record(c.tiny, 1, dtype=FP32, shape=(32,)),
         tr(1), r"is FP32, the canonical order wants FP16", at=232 + 44),
    case("k_proj-fp16-instead-of-cq",
         lambda c: T.patch_record(c.tiny, 3, dtype=FP16, ndim=1, shape=(544,), group=0, bits=0),
         tr(3), r"is FP16, the canonical order wants CQ", at=232 + 44 * 3),
    case("final_norm-cq-instead-of-fp16-via-writer",
         lambda c: T.edit_tensors(c.tiny, lambda ts, h: ts.__setitem__(
             46, writer.cq("final_norm", np.ones((1, 64)), 2, c.a.codebook))),
         tr(46), r"is CQ, the canonical order wants FP16"),
    # ---- R1: record fields -----------------------------------------------------------------------
    *[case(f"dtype-{v}", (lambda v: lambda c: T.patch_record(c.tiny, 3, dtype=v))(v),
           tn(3), rf"dtype code {v} is not 1 \(FP16\), 2 \(FP32\), 3 \(CQ\) or 4 \(RAW\)",
           at=232 + 44 * 3)
      for v in (0, 5, 9, 255)],
    case("ndim-5", lambda c: T.patch_record(c.tiny, 3, ndim=5),
         tn(3), r"ndim is 5, at most 4", at=232 + 44 * 3 + 1),
    case("ndim-255", lambda c: T.patch_record(c.tiny, 1, ndim=255),
         tn(1), r"ndim is 255", at=232 + 44 + 1),
    case("shape-entry-past-ndim", lambda c: T.patch_record(c.tiny, 1, shape1=7),
         tn(1), r"shape entry 1 is 7 past ndim 1, must be 0", at=232 + 44 + 8),
    case("shape-entry-3-on-cq", lambda c: T.patch_record(c.tiny, 3, shape3=1),
         tn(3), r"shape entry 3 is 1 past ndim 2", at=232 + 44 * 3 + 16),
    case("record-padding-nonzero", lambda c: T.patch_record(c.tiny, 3, pad=1),
         tn(3), r"record padding is 1, must be 0", at=232 + 44 * 3 + 2),
    # ---- R2: offsets ----------------------------------------------------------------------------
    case("offset-not-multiple-of-64", lambda c: T.patch_record(c.tiny, 3, offset=c.rec(3).offset + 1),
         tn(3), r"blob offset 72577 is not a multiple of 64", at=232 + 44 * 3 + 20),
    case("offset-32-aligned", lambda c: T.patch_record(c.tiny, 3, offset=c.rec(3).offset + 32),
         tn(3), r"blob offset 72608 is not a multiple of 64", at=232 + 44 * 3 + 20),
    case("offset-inside-directory", lambda c: T.patch_record(c.tiny, 0, offset=2560),
         tn(0), r"blob offset 2560 lies inside the header/directory \(ends at 2652\)", at=252),
    case("offset-0", lambda c: T.patch_record(c.tiny, 3, offset=0),
         tn(3), r"blob offset 0 lies inside the header/directory", at=232 + 44 * 3 + 20),
    case("offset-past-eof", lambda c: T.patch_record(c.tiny, 5, offset=_past_eof_offset(c)),
         tn(5), r"blob \[154176, 154208\) runs past the end of the 154074-byte file",
         at=232 + 44 * 5 + 28),
    case("offset-u64-near-max", lambda c: T.patch_record(c.tiny, 5, offset=2**64 - 64),
         tn(5), r"blob \[18446744073709551552, 18446744073709551584\) runs past the end",
         at=232 + 44 * 5 + 28),
    case("nbytes-u64-max-overflows", lambda c: T.patch_record(c.tiny, 5, nbytes=U64_MAX),
         tn(5), r"blob \[74752, 18446744073709626367\) runs past the end", at=232 + 44 * 5 + 28),
    case("nbytes-wraps-to-zero", lambda c: T.patch_record(c.tiny, 5, nbytes=2**64 - c.rec(5).offset),
         tn(5), r"blob \[74752, 18446744073709551616\) runs past the end", at=232 + 44 * 5 + 28),
    case("nbytes-one-past-eof", lambda c: T.patch_record(c.tiny, 54, nbytes=c.rec(54).nbytes + 1),
         tn(54), r"blob \[142784, 154075\) runs past the end of the 154074-byte file",
         at=232 + 44 * 54 + 28),
    # ---- R3: order ---------------------------------------------------------------------------------
    case("overlapping-blobs", lambda c: T.patch_record(c.tiny, 4, offset=c.rec(3).offset + 64),
         tn(4), r"blob at 72640 overlaps or precedes the previous blob \(which ends at 73664\)",
         at=232 + 44 * 4 + 20),
    case("out-of-order-blobs", lambda c: _swap_offsets(c, 5, 6),
         tn(6), r"blob at 74752 overlaps or precedes the previous blob \(which ends at 74848\)",
         at=232 + 44 * 6 + 20),
    case("same-offset-twice", lambda c: T.patch_record(c.tiny, 6, offset=c.rec(5).offset),
         tn(6), r"overlaps or precedes", at=232 + 44 * 6 + 20),
    # ---- R4: FP16 / FP32 lengths ------------------------------------------------------------------
    case("fp16-nbytes-short", lambda c: T.patch_record(c.tiny, 1, nbytes=126),
         tn(1), r"FP16 shape \[64\] needs 128 bytes, record says 126", at=232 + 44 + 28),
    case("fp16-nbytes-long", lambda c: T.patch_record(c.tiny, 1, nbytes=192),
         tn(1), r"FP16 shape \[64\] needs 128 bytes, record says 192", at=232 + 44 + 28),
    case("fp16-huge-shape", lambda c: T.patch_record(c.tiny, 1, ndim=4, shape=(U32_MAX,) * 4),
         tn(1), rf"FP16 shape \[{U32_MAX}, {U32_MAX}, {U32_MAX}, {U32_MAX}\] needs "
         rf"{2 * U32_MAX ** 4} bytes, record says 128", at=232 + 44 + 28),
    case("fp16-bits-nonzero", lambda c: T.patch_record(c.tiny, 1, bits=2),
         tn(1), r"group/bits are 0/2, must be 0 for FP16", at=232 + 44 + 36),
    case("fp16-group-nonzero", lambda c: T.patch_record(c.tiny, 1, group=128),
         tn(1), r"group/bits are 128/0, must be 0 for FP16", at=232 + 44 + 36),
    case("fp32-length-mismatch", lambda c: T.patch_record(c.tiny, 1, dtype=FP32),
         tn(1), r"FP32 shape \[64\] needs 256 bytes, record says 128", at=232 + 44 + 28),
    # ---- R5, R6: CQ records ---------------------------------------------------------------------
    case("cq-nbytes-short", lambda c: T.patch_record(c.tiny, 3, nbytes=1087),
         tn(3), r"CQ2 \[32, 64\] needs 1088 bytes, record says 1087", at=232 + 44 * 3 + 28),
    case("cq-nbytes-one-group-row-short", lambda c: T.patch_record(c.tiny, 3, nbytes=1088 - 34),
         tn(3), r"needs 1088 bytes, record says 1054", at=232 + 44 * 3 + 28),
    case("cq-shape-times-bits-overflows-u64",
         lambda c: T.patch_record(c.tiny, 3, shape=(U32_MAX, U32_MAX)),
         tn(3), rf"CQ2 \[{U32_MAX}, {U32_MAX}\] needs "
         rf"{cq_geometry(U32_MAX, U32_MAX, 128, 2)[3]} bytes, record says 1088",
         at=232 + 44 * 3 + 28),
    case("cq4-huge-out-rows", lambda c: T.patch_record(c.tiny, 0, shape=(2**31, 64)),
         tn(0), rf"CQ4 \[2147483648, 64\] needs {2**31 * 66} bytes, record says 67584",
         at=232 + 28),
    case("cq-group-96-not-power-of-two", lambda c: T.patch_record(c.tiny, 3, group=96),
         tn(3), r"CQ group 96 is not a power of two >= 8", at=232 + 44 * 3 + 36),
    case("cq-group-4", lambda c: T.patch_record(c.tiny, 3, group=4),
         tn(3), r"CQ group 4 is not a power of two >= 8", at=232 + 44 * 3 + 36),
    case("cq-group-0", lambda c: T.patch_record(c.tiny, 3, group=0),
         tn(3), r"CQ group 0 is not a power of two", at=232 + 44 * 3 + 36),
    case("cq-group-64-not-128", lambda c: T.patch_record(c.tiny, 3, group=64),
         tn(3), r"CQ group 64 differs from the codebook's group 128", at=232 + 44 * 3 + 36),
    case("cq-group-2^31", lambda c: T.patch_record(c.tiny, 3, group=2**31),
         tn(3), r"CQ group 2147483648 differs from the codebook's group 128", at=232 + 44 * 3 + 36),
    *[case(f"cq-bits-{v}-in-needle2", (lambda v: lambda c: T.patch_record(c.tiny, 3, bits=v))(v),
           tn(3), rf"CQ bits code {v} not allowed in Needle 2 \(allowed \[2, 3, 4, 5\]\)",
           at=232 + 44 * 3 + 40)
      for v in (6, 1, 0, U32_MAX)],
    case("cq-ndim-3", lambda c: T.patch_record(c.tiny, 3, ndim=3, shape=(32, 64, 1)),
         tn(3), r"CQ tensor has ndim 3, must be 2", at=232 + 44 * 3 + 1),
    case("cq-ndim-1", lambda c: T.patch_record(c.tiny, 3, ndim=1, shape=(32,)),
         tn(3), r"CQ tensor has ndim 1, must be 2", at=232 + 44 * 3 + 1),
    case("cq-width-changed-without-length", lambda c: T.patch_record(c.tiny, 3, bits=4),
         tn(3), r"CQ4 \[32, 64\] needs 2112 bytes, record says 1088", at=232 + 44 * 3 + 28),
    # ---- R9: RAW --------------------------------------------------------------------------------
    case("raw-not-last", lambda c: T.patch_record(c.tiny, 1, dtype=RAW),
         tn(1), r"RAW record before the last position \(the tokenizer must be last\)", at=232 + 44),
    case("raw-missing", lambda c: T.patch_record(c.tiny, 54, dtype=FP16, ndim=1, shape=(11290 // 2,)),
         tn(54), r"last record is not the RAW tokenizer", at=232 + 44 * 54),
    case("raw-ndim-1", lambda c: T.patch_record(c.tiny, 54, ndim=1, shape=(11290,)),
         tn(54), r"RAW record must have ndim, group and bits 0", at=232 + 44 * 54 + 1),
    case("raw-bits-nonzero", lambda c: T.patch_record(c.tiny, 54, bits=2),
         tn(54), r"RAW record must have ndim, group and bits 0", at=232 + 44 * 54 + 1),
    # ---- trailing bytes, padding ------------------------------------------------------------------
    case("trailing-1-byte", lambda c: c.tiny + b"\0",
         r"^file: 1 trailing bytes after the last blob", at=154074),
    case("trailing-64-bytes", lambda c: c.tiny + bytes(64),
         r"^file: 64 trailing bytes after the last blob", at=154074),
    case("trailing-junk", lambda c: c.tiny + b"junk",
         r"^file: 4 trailing bytes", at=154074),
    case("padding-after-directory-nonzero", lambda c: T.patch_bytes(c.tiny, 2660, b"\x01"),
         tr(0), r"non-zero byte in the alignment padding before this blob", at=2660),
    case("padding-between-blobs-nonzero", lambda c: T.patch_bytes(c.tiny, 79400, b"\xff"),
         tr(11), r"non-zero byte in the alignment padding", at=79400),
    case("padding-before-tokenizer-nonzero", lambda c: T.patch_bytes(c.tiny, 142783, b"\x80"),
         tr(54), r"non-zero byte in the alignment padding", at=142783),
    # ---- R7: ternary crumb 2 -------------------------------------------------------------------
    case("ternary-crumb-2-first-byte",
         lambda c: T.patch_bytes(c.ternary, reader.read(c.ternary).records[3].offset, b"\x02"),
         tr(3), r"ternary stream holds the unused crumb value 2",
         at=lambda c: reader.read(c.ternary).records[3].offset),
    case("ternary-crumb-2-high-bits-mid-blob",
         lambda c: T.patch_bytes(c.ternary, reader.read(c.ternary).records[0].offset + 1000, b"\x80"),
         tr(0), r"ternary stream holds the unused crumb value 2",
         at=lambda c: reader.read(c.ternary).records[0].offset + 1000),
    # ---- R8: CQ norms ---------------------------------------------------------------------------
    case("cq-norm-negative", lambda c: T.patch_f16(c.tiny, _cq_norm_offset(c, 3, 5), -1.0),
         tr(3), r"group norm 5 is -1\.0: must be finite and >= 0", at=73600 + 10),
    case("cq-norm-nan", lambda c: T.patch_f16(c.tiny, _cq_norm_offset(c, 3, 0), float("nan")),
         tr(3), r"group norm 0 is nan", at=73600),
    case("cq-norm-inf", lambda c: T.patch_f16(c.tiny, _cq_norm_offset(c, 0, 1023), float("inf")),
         tr(0), r"group norm 1023 is inf", at=2688 + 1024 * 64 + 2046),
    case("cq-norm-minus-inf", lambda c: T.patch_f16(c.tiny, _cq_norm_offset(c, 3, 31), -np.inf),
         tr(3), r"group norm 31 is -inf", at=73600 + 62),
    case("fp16-value-nan", lambda c: T.patch_f16(c.tiny, c.rec(1).offset + 6, float("nan")),
         tr(1), r"value 3 is not finite", at=70272 + 6),
    case("fp16-head-proj-inf", lambda c: T.patch_f16(c.tiny, c.rec(52).offset, float("inf")),
         tr(52), r"value 0 is not finite", at=141696),
    # ---- R12, R13: heads ------------------------------------------------------------------------
    case("manifest-bad-code-3", lambda c: T.patch_f16(c.tiny, c.rec(47).offset + 2, 3.0),
         tr(47), rf"manifest entry 1 is {NP64}3\.0\)?, allowed head codes are \[1, 2\]", at=123650),
    case("manifest-code-0", lambda c: T.patch_f16(c.tiny, c.rec(47).offset, 0.0),
         tr(47), rf"manifest entry 0 is {NP64}0\.0", at=123648),
    case("manifest-code-fraction", lambda c: T.patch_f16(c.tiny, c.rec(47).offset, 1.5),
         tr(47), rf"manifest entry 0 is {NP64}1\.5", at=123648),
    case("manifest-code-nan", lambda c: T.patch_f16(c.tiny, c.rec(47).offset, float("nan")),
         tr(47), rf"manifest entry 0 is {NP64}nan", at=123648),
    case("manifest-not-increasing",
         lambda c: T.patch_bytes(c.tiny, c.rec(47).offset, np.array([2, 1], "<f2").tobytes()),
         tr(47), r"manifest codes must be strictly increasing", at=123650),
    case("manifest-duplicate-code",
         lambda c: T.patch_bytes(c.tiny, c.rec(47).offset, np.array([1, 1], "<f2").tobytes()),
         tr(47), r"manifest codes must be strictly increasing", at=123650),
    case("manifest-one-code-six-tensors",
         lambda c: T.patch_record(c.tiny, 47, shape=(1,), nbytes=2),
         tr(47), r"manifest lists 1 heads \(needs 3 tensors\) but 6 tensors follow it",
         at=232 + 44 * 47),
    case("manifest-two-codes-five-tensors", lambda c: _drop_tensor(c, 53),
         tr(47), r"manifest lists 2 heads \(needs 6 tensors\) but 5 tensors follow it"),
    case("manifest-two-codes-seven-tensors", _extra_tensor_before_tokenizer,
         tr(47), r"manifest lists 2 heads \(needs 6 tensors\) but 7 tensors follow it"),
    case("manifest-not-rank-1", lambda c: T.patch_record(c.tiny, 47, ndim=2, shape=(1, 2)),
         tr(47), r"tensor 47 is not an FP16 rank-1 head manifest", at=232 + 44 * 47),
    case("head-proj-wrong-width", lambda c: T.patch_record(c.tiny, 52, shape=(2, 256)),
         tr(52), r"proj must be FP16 \[out, 512\] \(P·d columns\); found FP16 \[2, 256\]",
         at=232 + 44 * 52),
    case("head-contrastive-proj-wrong-width", lambda c: T.patch_record(c.tiny, 49, shape=(64, 128)),
         tr(49), r"proj must be FP16 \[out, 256\]", at=232 + 44 * 49),
    case("head-probes-wrong-d", lambda c: T.patch_record(c.tiny, 48, shape=(8, 32)),
         tr(48), r"probes must be FP16 \[P, 64\]; found FP16 \[8, 32\]", at=232 + 44 * 48),
    case("head-bias-wrong-shape", lambda c: T.patch_record(c.tiny, 50, ndim=2, shape=(2, 16)),
         tr(50), r"bias must be FP16 \[32\]; found FP16 \[2, 16\]", at=232 + 44 * 50),
    # ---- G10, T1–T4: the tokenizer --------------------------------------------------------------
    case("vocab-differs-from-n_pieces", _drop_last_piece,
         hf("vocab"), r"tokenizer has 1023 pieces but header vocab is 1024", at=20),
    case("tok-n_pieces-0", lambda c: T.patch_bytes(c.tiny, 142784, struct.pack("<I", 0)),
         r"^tokenizer header: n_pieces is 0", at=142784),
    case("tok-n_pieces-u32max", lambda c: T.patch_bytes(c.tiny, 142784, struct.pack("<I", U32_MAX)),
         r"^tokenizer header: n_pieces 4294967295 needs at least", at=142784),
    case("tok-n_pieces-plus-one", lambda c: T.patch_bytes(c.tiny, 142784, struct.pack("<I", 1025)),
         r"^tokenizer piece 1024: record header needs 7 bytes but only 0", at=lambda c: len(c.tiny)),
    case("tok-n_pieces-minus-one", lambda c: T.patch_bytes(c.tiny, 142784, struct.pack("<I", 1023)),
         r"^tokenizer blob: 11 trailing bytes after the last piece \(piece 1022\)",
         at=lambda c: c.tok_piece(1023).record),
    case("tok-pad_id-out-of-range", lambda c: T.patch_bytes(c.tiny, 142788, struct.pack("<I", 1024)),
         r"^tokenizer header: pad_id 1024 is not below n_pieces 1024", at=142788),
    case("tok-unk_id-u32max", lambda c: T.patch_bytes(c.tiny, 142800, struct.pack("<I", U32_MAX)),
         r"^tokenizer header: unk_id 4294967295 is not below", at=142800),
    case("tok-add_dummy_prefix-2", lambda c: T.patch_bytes(c.tiny, 142804, b"\x02"),
         r"^tokenizer header: add_dummy_prefix is 2, expected 0 or 1", at=142804),
    case("tok-bad-utf8", lambda c: T.patch_bytes(c.tiny, c.tok_piece(293).surface_at, b"\xff"),
         r"^tokenizer piece 293: surface is not valid UTF-8 \(byte 0xFF",
         at=lambda c: c.tok_piece(293).surface_at),
    case("tok-truncated-utf8-sequence",
         lambda c: T.patch_bytes(c.tiny, c.tok_piece(1023).surface_at + 3, b"A"),
         r"^tokenizer piece 1023: surface is not valid UTF-8",
         at=lambda c: c.tok_piece(1023).surface_at),
    case("tok-surface-length-past-blob-end",
         lambda c: T.patch_u16(c.tiny, c.tok_piece(1023).length_at, 0xFFFF),
         r"^tokenizer piece 1023: surface of 65535 bytes runs past the end of the blob \(4 bytes left\)",
         at=lambda c: c.tok_piece(1023).length_at),
    case("tok-mid-length-past-blob-end",
         lambda c: T.patch_u16(c.tiny, c.tok_piece(500).length_at, 0xFFFF),
         r"^tokenizer piece 500: surface of 65535 bytes runs past the end of the blob"),
    case("tok-empty-surface", lambda c: T.patch_u16(c.tiny, c.tok_piece(7).length_at, 0),
         r"^tokenizer piece 7: surface is empty", at=lambda c: c.tok_piece(7).length_at),
    case("tok-type-5", lambda c: T.patch_bytes(c.tiny, c.tok_piece(10).type_at, b"\x05"),
         r"^tokenizer piece 10: type 5 is not one of 0 NORMAL", at=lambda c: c.tok_piece(10).type_at),
    case("tok-score-nan",
         lambda c: T.patch_bytes(c.tiny, c.tok_piece(300).record, struct.pack("<f", float("nan"))),
         r"^tokenizer piece 300: score of .* is NaN"),
    case("tok-duplicate-surface", _duplicate_surface,
         r"^tokenizer piece 319: surface .* duplicates piece 297"),
    case("tok-byte-piece-lowercase-hex",
         lambda c: T.patch_bytes(c.tiny, c.piece_with(b"<0xAB>").surface_at, b"<0xab>"),
         r"BYTE piece surface '<0xab>' is not <0xHH> with two uppercase hex digits"),
    case("tok-byte-piece-missing",
         lambda c: T.patch_bytes(c.tiny, c.piece_with(b"<0x41>").type_at, b"\x00"),
         r"^tokenizer header: byte_fallback is 1 but there is no BYTE piece <0x41>", at=142805),
    case("tok-blob-trailing-byte", lambda c: T.with_tokenizer_blob(c.tiny, c.a.tokenizer_blob() + b"\0"),
         r"^tokenizer blob: 1 trailing bytes after the last piece \(piece 1023\)"),
    case("tok-blob-shorter-than-header", lambda c: T.with_tokenizer_blob(c.tiny, c.a.tokenizer_blob()[:10]),
         r"^tokenizer header: tokenizer blob is 10 bytes, shorter than its 24-byte header"),
    case("tok-blob-empty", lambda c: T.with_tokenizer_blob(c.tiny, b""),
         r"^tokenizer header: tokenizer blob is 0 bytes"),
    case("tok-blob-cut-inside-last-record",
         lambda c: T.with_tokenizer_blob(c.tiny, c.a.tokenizer_blob()[:-3]),
         r"^tokenizer piece 1023: surface of 4 bytes runs past the end of the blob \(1 bytes left\)"),
    # ---- Needle 3 specific ------------------------------------------------------------------------
    case("n3-truncated-header", lambda c: c.n3[:150],
         r"^header: truncated header: Needle 3 needs 196 bytes, file has 150", at=150),
    case("n3-permutation-repeats", lambda c: _n3_perm(c, "hada_p1", 0, float(
        np.frombuffer(c.n3, "<f4", 1, c.r3("hada_p1").offset + 4)[0])),
        r"^tensor 64 \(hada_p1\): permutation repeats a value"),
    case("n3-permutation-fraction", lambda c: _n3_perm(c, "hada_p2", 3, 1.5),
         rf"^tensor 65 \(hada_p2\): permutation entry 3 is {NP64}1\.5\)?, not an integer in \[0, 64\)"),
    case("n3-permutation-out-of-range", lambda c: _n3_perm(c, "hada_p1", 7, 64.0),
         rf"^tensor 64 \(hada_p1\): permutation entry 7 is {NP64}64\.0"),
    case("n3-permutation-checked-without-data-scan", lambda c: _n3_perm(c, "hada_p1", 0, -1.0),
         rf"^tensor 64 \(hada_p1\): permutation entry 0 is {NP64}-1\.0", check_data=False),
    case("n3-global-mask-bit-at-L", lambda c: H(c.n3, "global_mask_lo", 0b110),
         hf("global_mask_lo"), r"global layer mask 0x6 marks a layer at or past num_layers 2", at=68),
    case("n3-global-mask-hi-rejected", lambda c: H(c.n3, "global_mask_hi", 1),
         r"^header field global_mask_(lo|hi): global layer mask 0x100000002 marks a layer at or "
         r"past num_layers 2"),
    case("n3-global-mask-hi-names-the-field", lambda c: H(c.n3, "global_mask_hi", 1),
         hf("global_mask_hi"), r"global layer mask 0x100000002", at=72),
    case("n3-out_vocab-above-vocab", lambda c: H(c.n3, "out_vocab", 1025),
         hf("out_vocab"), r"out_vocab 1025 exceeds vocab 1024", at=24),
    case("n3-num_layers-65", lambda c: H(c.n3, "num_layers", 65),
         hf("num_layers"), r"num_layers is 65, Needle 3 allows at most 64", at=40),
    case("n3-engram_seed_heads-too-small", lambda c: H(c.n3, "engram_seed_heads", 1),
         hf("engram_seed_heads"), r"engram_seed_heads 1 is smaller than the heads per order 2", at=100),
    case("n3-qk_head_dim-odd", lambda c: H(c.n3, "qk_head_dim", 15),
         hf("qk_head_dim"), r"qk_head_dim is 15", at=44),
    case("n3-v_head_dim-0", lambda c: H(c.n3, "v_head_dim", 0),
         hf("v_head_dim"), r"v_head_dim is 0, must be at least 1", at=48),
    case("n3-num-sites-17", lambda c: H(c.n3, "num_engram_sites", 17),
         hf("num_engram_sites"), r"num_engram_sites is 17, at most 16 allowed", at=124),
    case("n3-cq-bits-6", lambda c: T.patch_record(c.n3, 3, bits=6),
         r"^tensor 3( \(layer00\.k_proj\))?: CQ bits code 6 not allowed in Needle 3 "
         r"\(allowed \[1, 2, 3, 4, 5\]\)"),
    case("n3-manifest-code-4",
         lambda c: T.patch_f16(c.n3, c.r3("heads.manifest").offset + 2, 4.0),
         rf"^tensor 75 \(heads\.manifest\): manifest entry 1 is {NP64}4\.0\)?, allowed head codes are \[1, 2, 3\]"),
    case("n3-head-gain-shape",
         lambda c: T.patch_record(c.n3, c.r3("head.confidence.gain").index, shape=(4, 3)),
         r"^tensor 77 \(head\.confidence\.gain\): gain must be FP16 \[3, 4\]; found FP16 \[4, 3\]"),
    case("n3-head-proj-columns",
         lambda c: T.patch_record(c.n3, c.r3("head.confidence.proj").index, shape=(1, 200)),
         r"^tensor 80 \(head\.confidence\.proj\): proj must be \[out, 256\]"),
    case("n3-head-probes-rows-not-multiple-of-L+1",
         lambda c: T.patch_record(c.n3, c.r3("head.confidence.probes").index, shape=(11, 64),
                                  nbytes=cq_geometry(11, 64, 128, 4)[3]),
         r"^tensor 76 \(head\.confidence\.probes\): probes must be CQ \[\(L\+1\)·k, 64\]; "
         r"found CQ \[11, 64\]"),
    case("n3-audio-section", _n3_audio_section,
         r"^tensor 75 \(heads\.manifest\): archive carries an audio section"),
    case("n3-vocab-1000-embedding-shape", lambda c: H(c.n3, "vocab", 1000),
         r"^tensor 0 \(embedding\): shape \[1024, 64\] differs from the geometry's \[1000, 64\]"),
    case("n3-tokenizer-more-pieces-than-vocab", _n3_vocab_below_pieces,
         hf("vocab"), r"tokenizer has 1024 pieces, more than header vocab 1000", at=20),
]


@pytest.mark.parametrize("make, patterns, at, check_data", CASES)
def test_malformed(ctx, make, patterns, at, check_data):
    data = make(ctx)
    assert data != ctx.tiny
    expect_error(data, patterns, at(ctx) if callable(at) else at, check_data=check_data)


def test_case_table_is_large_enough():
    assert len(CASES) >= 40
    ids = [p.id for p in CASES]
    assert len(ids) == len(set(ids)), "duplicate case ids"


# ---- the exact text of the bad-tag error ----------------------------------------------------

@pytest.mark.parametrize("tag", [0xDEADBEEF, 0, 0x05E12A82, 0x835E12A0, U32_MAX])
def test_bad_tag_exact_message(tiny_bytes, tag):
    with pytest.raises(CactError) as info:
        reader.read(ae.patch_tag(tiny_bytes, tag))
    assert info.value.message == f"not a .cact archive (tag 0x{tag:08X})"
    assert str(info.value) == f"not a .cact archive (tag 0x{tag:08X}) (at byte 0)"


def test_text_file_is_not_an_archive():
    with pytest.raises(CactError, match=r"^not a \.cact archive \(tag 0x706D6F63\)"):
        reader.read(b"composer.json is not a model\n" * 10)


# ---- truncation at every region boundary -----------------------------------------------------

def _tiny_cut_points():
    from generator.commands import synth
    data = synth.synthesize("tiny", 1)
    marks = ae.region_boundaries(data)
    marks["header.mid"] = 60
    marks["codebook.mid"] = 176
    marks["directory.mid"] = 232 + 44 * 27 + 9
    tok = marks["blob54.start"]
    marks["tokenizer.header.mid"] = tok + 12
    marks["tokenizer.mid"] = (tok + len(data)) // 2
    cuts = {0: "empty", 1: "tag+1", 2: "tag+2", 3: "tag+3"}
    for name, pos in marks.items():
        for delta in (-1, 0, 1):
            cut = pos + delta
            if 0 <= cut < len(data):
                cuts.setdefault(cut, f"{name}{delta:+d}")
    return sorted(cuts.items())


CUTS = _tiny_cut_points()


@pytest.mark.parametrize("cut", [c for c, _ in CUTS], ids=[f"{n}@{c}" for c, n in CUTS])
def test_truncated(ctx, cut):
    data = ctx.tiny[:cut]
    if cut < 4:
        expect_error(data, [rf"^header field tag: truncated: file is {cut} bytes, too short to hold "
                            r"a tag"], at=0)
    elif cut < 120:
        expect_error(data, [rf"^header: truncated header: Needle 2 needs 120 bytes, file has {cut}"],
                     at=cut)
    elif cut < 2652:
        expect_error(data, [hf("num_tensors"), rf"directory of 55 records ends at byte 2652, past "
                            rf"the end of the {cut}-byte file"], at=4)
    else:
        first = next(r for r in ctx.a.records if r.offset + r.nbytes > cut)
        expect_error(data, [tn(first.index), rf"blob \[{first.offset}, {first.offset + first.nbytes}\) "
                            rf"runs past the end of the {cut}-byte file"],
                     at=ae.record_field_offset(ctx.tiny, first.index, "nbytes"))


def test_truncation_cut_points_cover_every_region():
    names = " ".join(n for _, n in CUTS)
    for region in ("tag", "header", "codebook", "directory", "blob0", "blob27", "blob54",
                   "tokenizer"):
        assert region in names
    assert len(CUTS) > 150


@pytest.mark.parametrize("cut", [0, 1, 4, 20, 23, 24, 25, 31, 32, 100, 5000, -8, -1])
def test_tokenizer_blob_truncated_inside(ctx, cut):
    """The RAW record is consistent but the tokenizer blob itself is cut (T1)."""
    blob = ctx.a.tokenizer_blob()
    data = ae.with_tokenizer_blob(ctx.tiny, blob[:cut])
    err = expect_error(data, [r"^tokenizer (header|piece \d+|blob): "])
    assert err.offset is not None and ae.blobs(ctx.tiny)[-1].offset <= err.offset <= len(data)


def test_n3_truncated_everywhere(ctx):
    """Every boundary of the Needle 3 archive, ±1: only CactError, naming a cause."""
    marks = ae.region_boundaries(ctx.n3)
    for pos in sorted(set(marks.values())):
        for cut in (pos - 1, pos, pos + 1):
            if 0 <= cut < len(ctx.n3):
                with pytest.raises(CactError, match=r"truncated|past the end"):
                    reader.read(ctx.n3[:cut])


# ---- checks the spec makes optional for a data scan -----------------------------------------

def test_check_data_false_skips_payload_scans(ctx):
    """Padding, norms and crumbs are payload checks; structure is always checked."""
    a = reader.read(ae.patch_bytes(ctx.tiny, 2660, b"\x01"), check_data=False)
    assert len(a.records) == 55
    reader.read(ae.patch_f16(ctx.tiny, _cq_norm_offset(ctx, 3, 0), -1.0), check_data=False)
    with pytest.raises(CactError, match="trailing bytes"):
        reader.read(ctx.tiny + b"\0", check_data=False)


def test_valid_variants_are_accepted(tiny_bytes, small_bytes, ternary_bytes, n3_bytes):
    """Control group: what the malformed cases start from, and legal variations, read fine."""
    from generator.commands import synth
    for data in (tiny_bytes, small_bytes, ternary_bytes, n3_bytes,
                 synth.synthesize("tiny", 2, heads=False),
                 synth.synthesize("tiny", 3, bitmap="embedding=3,attn.k_proj=4,mhc=1.58,default=2"),
                 synth.synthesize("tiny", 4, kv_window=0, kv_bits=2),
                 ae.build_n3_tiny(heads=()), ae.build_n3_tiny(heads=(1, 2, 3), bits=2)):
        reader.read(data)


def test_reader_reports_unreadable_paths(tmp_path):
    with pytest.raises(CactError, match=r"^cannot read archive .*missing\.cact"):
        reader.read(tmp_path / "missing.cact")
    with pytest.raises(CactError, match=r"^cannot read archive"):
        reader.read(tmp_path)
    empty = tmp_path / "empty.cact"
    empty.write_bytes(b"")
    with pytest.raises(CactError, match=r"file is 0 bytes"):
        reader.read(empty)


# ---- reader bugs ---------------------------------------------------------------------------------

ROLE_CASES = [
    pytest.param(3, dict(offset=72577), "layer00.k_proj", id="misaligned-offset"),
    pytest.param(17, dict(dtype=0), "layer01.k_proj", id="dtype-0"),
    pytest.param(35, dict(nbytes=1), "mhc.phi_pre", id="cq-length"),
    pytest.param(1, dict(nbytes=126), "layer00.norm_in", id="fp16-length"),
    pytest.param(54, dict(ndim=1, shape=(11290,)), "tokenizer", id="raw-ndim"),
]


@pytest.mark.parametrize("index, fields, role", ROLE_CASES)
def test_directory_errors_name_the_role(tiny_bytes, index, fields, role):
    with pytest.raises(CactError) as info:
        reader.read(ae.patch_record(tiny_bytes, index, **fields))
    assert str(info.value).startswith(f"tensor {index} ({role}): ")


NUMBER_CASES = [
    pytest.param(lambda c: ae.patch_codebook(c.tiny, 5, float("nan")), "codebook entry 5 is nan:",
                 id="codebook-entry"),
    pytest.param(lambda c: ae.patch_f16(c.tiny, c.rec(47).offset + 2, 3.0),
                 "manifest entry 1 is 3.0,", id="manifest-entry"),
    pytest.param(lambda c: _n3_perm(c, "hada_p2", 3, 1.5), "permutation entry 3 is 1.5,",
                 id="permutation-entry"),
]


@pytest.mark.parametrize("make, text", NUMBER_CASES)
def test_messages_print_plain_numbers(ctx, make, text):
    with pytest.raises(CactError) as info:
        reader.read(make(ctx))
    assert text in str(info.value)
    assert "np." not in str(info.value)
