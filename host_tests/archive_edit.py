"""Byte-level editing of `.cact` archives for the reader tests (docs/spec/cact-format.md §1–§5, §11).

Everything here works on the *layout as written* (a 28-entry codebook, records at
`HDR + 112 + 44·i`), not on what a possibly-corrupted header claims, so patches can be
applied in any order.  Every function returns new `bytes`; inputs are never modified.

    patch_header(data, "kv_bits", 5)
    patch_record(data, 3, nbytes=1087)            # tensor 3 = layer00.k_proj in `tiny`
    patch_record(data, 3, shape=(32, 100))
    patch_bytes(data, offset, b"\\xff")
    record_field_offset(data, 3, "offset")        # absolute byte of a record field

For edits that change blob lengths (so every later offset moves) take the archive apart
with `decompose()` and lay it out again with `rebuild()` (the package layout algorithm).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace

import numpy as np

from generator.archive import quant
from generator.archive import reader
from generator.archive import roles
from generator.archive import tokenizer
from generator.archive import writer
from generator.archive.format import CODEBOOK_LEN, CQ, FP16, FP32, HEADER_BYTES, HEADER_FIELDS, RECORD_BYTES, TAGS

# ---- header --------------------------------------------------------------------------

def generation(data: bytes) -> int:
    """The generation the tag claims (2 or 3); KeyError for an unknown tag."""
    return TAGS[struct.unpack_from("<I", data, 0)[0]]


def header_offset(name: str, gen: int = 2) -> int:
    """Absolute byte offset of a header field."""
    return 4 * HEADER_FIELDS[gen].index(name)


def get_header(data: bytes, name: str, gen: int | None = None):
    gen = generation(data) if gen is None else gen
    fmt = "<f" if name == "rope_theta" else "<I"
    return struct.unpack_from(fmt, data, header_offset(name, gen))[0]


def patch_header(data: bytes, name: str, value, gen: int | None = None) -> bytes:
    """Overwrite one header field by name (u32, or f32 for rope_theta)."""
    gen = generation(data) if gen is None else gen
    fmt = "<f" if name == "rope_theta" else "<I"
    return patch_bytes(data, header_offset(name, gen), struct.pack(fmt, value))


def patch_tag(data: bytes, tag: int) -> bytes:
    return patch_bytes(data, 0, struct.pack("<I", tag))


# ---- codebook ------------------------------------------------------------------------

def codebook_offset(entry: int, gen: int = 2) -> int:
    return HEADER_BYTES[gen] + 4 * entry


def patch_codebook(data: bytes, entry: int, value: float, gen: int | None = None) -> bytes:
    gen = generation(data) if gen is None else gen
    return patch_bytes(data, codebook_offset(entry, gen), struct.pack("<f", value))


# ---- directory records ---------------------------------------------------------------

# field -> (offset inside the 44-byte record, struct format)
RECORD_LAYOUT = {
    "dtype": (0, "<B"), "ndim": (1, "<B"), "pad": (2, "<H"),
    "shape0": (4, "<I"), "shape1": (8, "<I"), "shape2": (12, "<I"), "shape3": (16, "<I"),
    "offset": (20, "<Q"), "nbytes": (28, "<Q"), "group": (36, "<I"), "bits": (40, "<I"),
}


def record_offset(index: int, gen: int = 2) -> int:
    """Absolute byte offset of directory record `index` (layout as written)."""
    return HEADER_BYTES[gen] + 4 * CODEBOOK_LEN + RECORD_BYTES * index


def record_field_offset(data: bytes, index: int, name: str) -> int:
    return record_offset(index, generation(data)) + RECORD_LAYOUT[name][0]


def directory_end(data: bytes) -> int:
    gen = generation(data)
    return record_offset(get_header(data, "num_tensors", gen), gen)


def get_record(data: bytes, index: int) -> dict:
    """A record's fields by name; `shape` is the full 4-entry tuple."""
    base = record_offset(index, generation(data))
    out = {name: struct.unpack_from(fmt, data, base + off)[0]
           for name, (off, fmt) in RECORD_LAYOUT.items()}
    out["shape"] = tuple(out[f"shape{k}"] for k in range(4))
    return out


def patch_record(data: bytes, index: int, **fields) -> bytes:
    """Overwrite record fields: dtype, ndim, pad, offset, nbytes, group, bits, shape0..3,
    or `shape=(...)` (written as 4 entries, zero-filled; ndim is left alone)."""
    base = record_offset(index, generation(data))
    buf = bytearray(data)
    if "shape" in fields:
        shape = tuple(fields.pop("shape"))
        if len(shape) > 4:
            raise ValueError("a record holds at most 4 shape entries")
        for k, v in enumerate(shape + (0,) * (4 - len(shape))):
            fields[f"shape{k}"] = v
    for name, value in fields.items():
        off, fmt = RECORD_LAYOUT[name]
        struct.pack_into(fmt, buf, base + off, value)
    return bytes(buf)


# ---- raw bytes -----------------------------------------------------------------------

def patch_bytes(data: bytes, offset: int, new: bytes) -> bytes:
    """Overwrite len(new) bytes at `offset` (must lie inside the file)."""
    if offset < 0 or offset + len(new) > len(data):
        raise ValueError(f"patch [{offset}, {offset + len(new)}) outside a {len(data)}-byte file")
    buf = bytearray(data)
    buf[offset:offset + len(new)] = new
    return bytes(buf)


def patch_u16(data: bytes, offset: int, value: int) -> bytes:
    return patch_bytes(data, offset, struct.pack("<H", value))


def patch_f16(data: bytes, offset: int, value: float) -> bytes:
    return patch_bytes(data, offset, np.array([value], dtype="<f2").tobytes())


# ---- layout facts --------------------------------------------------------------------

@dataclass(frozen=True)
class Blob:
    index: int
    role: str
    offset: int
    nbytes: int

    @property
    def end(self) -> int:
        return self.offset + self.nbytes


def blobs(data: bytes) -> list[Blob]:
    """Every blob of a *valid* archive, with its role."""
    a = reader.read(data, check_data=False)
    return [Blob(r.index, r.role, r.offset, r.nbytes) for r in a.records]


def region_boundaries(data: bytes) -> dict[str, int]:
    """Named byte offsets where one region of a valid archive ends and the next begins."""
    gen = generation(data)
    hdr = HEADER_BYTES[gen]
    out = {"tag.end": 4, "header.end": hdr, "codebook.end": hdr + 4 * CODEBOOK_LEN,
           "directory.end": directory_end(data)}
    for b in blobs(data):
        out[f"blob{b.index}.start"] = b.offset
        out[f"blob{b.index}.end"] = b.end
    return out


# ---- tokenizer blob walking ----------------------------------------------------------

@dataclass(frozen=True)
class Piece:
    """A tokenizer record located in the archive (absolute offsets)."""

    index: int
    record: int     # start of the record (score)
    type_at: int    # the u8 type
    length_at: int  # the u16 surface length
    surface_at: int
    surface: bytes
    ptype: int


def tokenizer_pieces(data: bytes) -> tuple[int, list[Piece]]:
    """(blob offset, pieces) of the tokenizer of a valid archive."""
    tok = blobs(data)[-1]
    pos = tok.offset + 24
    n = struct.unpack_from("<I", data, tok.offset)[0]
    out = []
    for i in range(n):
        _score, ptype, length = struct.unpack_from("<fBH", data, pos)
        s = pos + 7
        out.append(Piece(i, pos, pos + 4, pos + 5, s, bytes(data[s:s + length]), ptype))
        pos = s + length
    assert pos == tok.end
    return tok.offset, out


# ---- take apart and lay out again ----------------------------------------------------

def decompose(data: bytes):
    """(generation, header dict, codebook, [writer.Tensor]) of a valid archive."""
    a = reader.read(data)
    hdr = dict(a.header)
    tensors = [writer.Tensor(r.role, r.dtype, r.shape, bytes(a.blob(r)), r.group, r.bits)
               for r in a.records]
    return a.generation, hdr, a.codebook.copy(), tensors


def rebuild(gen: int, header: dict, codebook, tensors: list) -> bytes:
    """Lay tensors out with the package algorithm (num_tensors is recomputed)."""
    return writer.write(gen, header, codebook, tensors)


def edit_tensors(data: bytes, fn) -> bytes:
    """Rebuild an archive after `fn(tensors, header)` edited the tensor list in place."""
    gen, hdr, cb, tensors = decompose(data)
    fn(tensors, hdr)
    return rebuild(gen, hdr, cb, tensors)


def with_tokenizer_blob(data: bytes, blob: bytes) -> bytes:
    """The same archive with another RAW tokenizer payload (offsets recomputed)."""
    def fn(tensors, _hdr):
        tensors[-1] = replace(tensors[-1], payload=bytes(blob))
    return edit_tensors(data, fn)


def tokenizer_blob(data: bytes) -> bytes:
    return reader.read(data, check_data=False).tokenizer_blob()


def repack_tokenizer(tok: "tokenizer.TokenizerData") -> bytes:
    """Serialise TokenizerData without validation (to build corrupt blobs)."""
    return tokenizer._pack_blob(tok)


# ---- a small Needle 3 archive --------------------------------------------------------

N3_TINY = dict(
    kv_window=64, kv_bits=8, vocab=1024, out_vocab=0, d_model=64, num_heads=4, num_kv_heads=2,
    num_layers=2, qk_head_dim=16, v_head_dim=16, max_seq_len=256, hada_n=64, mhc_lanes=4,
    sliding_window=32, global_mask_lo=0b10, global_mask_hi=0, qkv_conv_taps=3,
    engram_slots=64, engram_sub_dim=16, num_engram_tables=4, engram_conv_taps=4,
    engram_conv_dilation=3, engram_seed_heads=0, num_engram_orders=2,
    engram_order0=2, engram_order1=3, engram_order2=0, engram_order3=0,
    num_engram_sites=2, **{f"engram_site{i}": (i if i < 2 else 0) for i in range(16)},
    rope_theta=100000.0,
)


def build_n3_tiny(seed: int = 0, heads: tuple[int, ...] = (2, 3), bits: int = 4) -> bytes:
    """A small, valid Needle 3 archive (docs/spec/cact-format.md §9, §10.2) built with the writer.

    Heads use the CQ layout (k = q = 4); the tokenizer is the tiny preset's 1k model.
    """
    from generator.commands import synth
    rng = np.random.default_rng(seed)
    hdr = dict(N3_TINY)
    cb = quant.default_codebook()
    tensors = []
    for role in roles.core_roles(3, hdr):
        if role.dtype == CQ:
            tensors.append(writer.cq(role.name, rng.normal(size=role.shape), bits, cb))
        elif role.dtype == FP32:
            tensors.append(writer.fp32(role.name, rng.permutation(role.shape[0]).astype(np.float32)))
        else:
            tensors.append(writer.fp16(role.name, rng.normal(size=role.shape) * 0.1))
    if heads:
        d, L, k, q = hdr["d_model"], hdr["num_layers"], 4, 4
        tensors.append(writer.fp16("heads.manifest", np.array(heads, dtype=np.float32)))
        for code in heads:
            name = f"head.{roles.N3_HEAD_NAMES[code]}"
            out = {1: 32, 2: 1, 3: 3}[code]
            tensors += [
                writer.cq(f"{name}.probes", rng.normal(size=((L + 1) * k, d)), 4, cb),
                writer.fp16(f"{name}.gain", rng.normal(size=(L + 1, k))),
                writer.cq(f"{name}.query", rng.normal(size=(q, d)), 4, cb),
                writer.fp16(f"{name}.row_bias", rng.normal(size=(q, L + 1, k))),
                writer.cq(f"{name}.proj", rng.normal(size=(out, q * d)), 4, cb),
                writer.fp16(f"{name}.bias", rng.normal(size=(out,))),
            ]
            if code == 3:
                tensors.append(writer.fp16(f"{name}.calibration", [0.9, 0.0, 0.6]))
    tensors.append(writer.raw("tokenizer", synth.tokenizer_blob("tok1k.model")))
    return writer.write(3, hdr, cb, tensors)


def perturb_tensor(archive, role: str, seed: int) -> bytes:
    """The archive with one tensor's payload replaced by a perturbed version (FP16: shifted
    noise; FP32 permutation: another permutation; CQ: noise at the weights' own scale)."""
    rec = archive.record(role)
    rng = np.random.default_rng(seed)
    if rec.dtype == FP16:
        v = archive.array(role)
        new = writer.fp16(role, v + rng.normal(0.5, 0.25, v.shape)).payload
    elif rec.dtype == FP32:                           # a permutation: another permutation
        new = writer.fp32(role, np.roll(archive.array(role), 1)).payload
    else:
        w = archive.cq(role).dequantize()
        w = w + rng.normal(0, 1, w.shape) * np.abs(w).mean()
        new = writer.cq(role, w, rec.bits, archive.codebook).payload
    assert len(new) == rec.nbytes
    data = bytearray(archive.data)
    data[rec.offset:rec.offset + rec.nbytes] = new
    return bytes(data)
