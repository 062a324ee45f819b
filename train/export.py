"""Trained parameters to a .cact archive and back, with the project's own writer and reader.

`export` quantises every matrix to CQ exactly as the format defines it (generator/archive/
quant.py: per 128-wide group, Walsh-Hadamard rotation, f16 norm, nearest codebook level) and
stores the control tensors as fp16 (Needle 3's permutations as the fp32 they are stored as);
`params_from_archive` reads an archive's dequantised
weights back as parameters, which is how the test puts the same weights into this module's
model and into the NumPy reference.
"""

from __future__ import annotations

import numpy as np

from generator.archive import reader, roles as R, writer
from generator.archive import quant
from generator.archive.format import CQ, FP16, FP32
from generator.commands.synth import tokenizer_blob
from generator.model import numerics as nm
from generator.model.geometry import generation_of


def export(hdr: dict, params: dict, bits: int = 4, tokenizer_model: str = "tok1k.model",
           gen: int | None = None) -> bytes:
    """A Needle 2 or 3 archive (no probe heads) holding `params` in canonical order;
    `gen` defaults to the header's generation."""
    gen = gen or generation_of(hdr)
    codebook = quant.default_codebook()
    tensors = []
    for role in R.core_roles(gen, hdr):
        w = np.asarray(params[role.name], dtype=np.float64)
        if role.dtype == CQ:
            tensors.append(writer.cq(role.name, w, bits, codebook))
        elif role.dtype == FP16:
            tensors.append(writer.fp16(role.name, w.reshape(role.shape)))
        elif role.dtype == FP32:
            tensors.append(writer.fp32(role.name, w.reshape(role.shape)))
        else:   # pragma: no cover - no other dtype in the core roles
            raise AssertionError(role)
    tensors.append(writer.raw("tokenizer", tokenizer_blob(tokenizer_model)))
    return writer.write(gen, hdr, codebook, tensors)


def params_from_archive(archive) -> dict:
    """role -> float32 array: dequantised CQ matrices (the float reference's weights) and the
    fp16 control tensors."""
    a = archive if isinstance(archive, reader.Archive) else reader.read(archive)
    out = {}
    for role in R.core_roles(a.generation, a.header):
        if role.dtype == CQ:
            t = a.cq(role.name)
            out[role.name] = nm.float_weights(t.indices(), t.norms(), t.bits, a.codebook,
                                              t.inp, t.group)
        else:
            out[role.name] = np.asarray(a.array(role.name), dtype=np.float32).reshape(role.shape)
    return out


def quantised(params: dict, hdr: dict, bits: int = 4, gen: int | None = None) -> dict:
    """The parameters as the archive will hold them (CQ round trip, fp16 rounding, fp32 as
    they are): what the float reference computes with after export."""
    gen = gen or generation_of(hdr)
    codebook = quant.default_codebook()
    out = {}
    for role in R.core_roles(gen, hdr):
        w = np.asarray(params[role.name], dtype=np.float64)
        if role.dtype == CQ:
            idx, norms = quant.quantize(w, bits, codebook)
            out[role.name] = nm.float_weights(idx, norms, bits, codebook, w.shape[1], quant.CQ_GROUP)
        elif role.dtype == FP32:
            out[role.name] = w.astype(np.float32)
        else:
            out[role.name] = w.astype(np.float16).astype(np.float32)
    return out


__all__ = ["export", "params_from_archive", "quantised"]
