"""Archive writer: the layout algorithm of docs/spec/cact-format.md §1 and the tensor payload encoders.

The writer takes a header (by field name) and the tensors in canonical order, and lays them
out exactly as the packages do: header, codebook, directory, zero padding to 64, each blob
at the next multiple of 64, the tokenizer last, no trailing bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from generator.archive import quant
from generator.archive.format import (BLOB_ALIGN, CODEBOOK_LEN, CQ, CQ_GROUP, FP16, FP32, HEADER_BYTES,
                     HEADER_FIELDS, RAW, RECORD_BYTES, TAG_N2, TAG_N3, round_up)


@dataclass
class Tensor:
    """A tensor ready to be written: directory fields plus its encoded payload."""

    role: str
    dtype: int
    shape: tuple[int, ...]
    payload: bytes
    group: int = 0
    bits: int = 0


def fp16(role: str, values) -> Tensor:
    arr = np.asarray(values, dtype=np.float32)
    shape = arr.shape or (1,)
    return Tensor(role, FP16, tuple(shape), arr.astype("<f2").tobytes())


def fp32(role: str, values) -> Tensor:
    arr = np.asarray(values, dtype=np.float32)
    return Tensor(role, FP32, tuple(arr.shape), arr.astype("<f4").tobytes())


def cq(role: str, weights, bits: int, codebook: np.ndarray, group: int = CQ_GROUP) -> Tensor:
    """Quantise an [out, in] float matrix into a CQ tensor of the given width code."""
    w = np.asarray(weights)
    idx, norms = quant.quantize(w, bits, codebook, group)
    return Tensor(role, CQ, tuple(w.shape), quant.blob_bytes(idx, norms, bits), group, bits)


def cq_raw(role: str, shape, indices: np.ndarray, norms: np.ndarray, bits: int,
           group: int = CQ_GROUP) -> Tensor:
    """A CQ tensor from already-quantised indices and norms (used to copy or edit archives)."""
    return Tensor(role, CQ, tuple(shape), quant.blob_bytes(indices, norms, bits), group, bits)


def raw(role: str, data: bytes) -> Tensor:
    return Tensor(role, RAW, (), bytes(data))


def write(generation: int, header: dict, codebook: np.ndarray, tensors: list[Tensor]) -> bytes:
    """Serialise an archive.  `header` needs every field but tag and num_tensors."""
    names = HEADER_FIELDS[generation]
    hdr = dict(header)
    hdr["tag"] = TAG_N2 if generation == 2 else TAG_N3
    hdr["num_tensors"] = len(tensors)
    hdr["codebook_len"] = CODEBOOK_LEN
    head = struct.pack(f"<{len(names) - 1}If", *[int(hdr[n]) for n in names[:-1]],
                       float(hdr["rope_theta"]))
    assert len(head) == HEADER_BYTES[generation]
    cb = np.asarray(codebook, dtype="<f4").tobytes()
    pos = len(head) + len(cb) + RECORD_BYTES * len(tensors)
    directory = bytearray()
    offsets = []
    for t in tensors:
        pos = round_up(pos, BLOB_ALIGN)
        offsets.append(pos)
        shape4 = list(t.shape) + [0] * (4 - len(t.shape))
        directory += struct.pack("<BBH4IQQII", t.dtype, len(t.shape), 0, *shape4, pos,
                                 len(t.payload), t.group, t.bits)
        pos += len(t.payload)
    out = bytearray(pos)
    out[:len(head)] = head
    out[len(head):len(head) + len(cb)] = cb
    start = len(head) + len(cb)
    out[start:start + len(directory)] = directory
    for t, off in zip(tensors, offsets):
        out[off:off + len(t.payload)] = t.payload
    return bytes(out)


__all__ = ["Tensor", "fp16", "fp32", "cq", "cq_raw", "raw", "write", "FP16", "FP32", "CQ", "RAW"]
