"""Trained parameters to a .cact archive and back, with the project's own writer and reader.

`export` quantises every matrix to CQ exactly as the format defines it (generator/archive/
quant.py: per 128-wide group, Walsh-Hadamard rotation, f16 norm, nearest codebook level) and
stores the control tensors as fp16; `params_from_archive` reads an archive's dequantised
weights back as parameters, which is how the test puts the same weights into this module's
model and into the NumPy reference.
"""

from __future__ import annotations

import numpy as np

from generator.archive import reader, roles as R, writer
from generator.archive import quant
from generator.archive.format import CQ, FP16
from generator.commands.synth import tokenizer_blob
from generator.model import numerics as nm


def export(hdr: dict, params: dict, bits: int = 4, tokenizer_model: str = "tok1k.model") -> bytes:
    """A Needle 2 archive (no probe heads) holding `params` in canonical order."""
    codebook = quant.default_codebook()
    tensors = []
    for role in R.core_roles(2, hdr):
        w = np.asarray(params[role.name], dtype=np.float64)
        if role.dtype == CQ:
            tensors.append(writer.cq(role.name, w, bits, codebook))
        elif role.dtype == FP16:
            tensors.append(writer.fp16(role.name, w.reshape(role.shape)))
        else:   # pragma: no cover - Needle 2 has no fp32 tensors
            raise AssertionError(role)
    tensors.append(writer.raw("tokenizer", tokenizer_blob(tokenizer_model)))
    return writer.write(2, hdr, codebook, tensors)


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


def quantised(params: dict, hdr: dict, bits: int = 4) -> dict:
    """The parameters as the archive will hold them (CQ round trip, fp16 rounding): what the
    float reference computes with after export."""
    codebook = quant.default_codebook()
    out = {}
    for role in R.core_roles(2, hdr):
        w = np.asarray(params[role.name], dtype=np.float64)
        if role.dtype == CQ:
            idx, norms = quant.quantize(w, bits, codebook)
            out[role.name] = nm.float_weights(idx, norms, bits, codebook, w.shape[1], quant.CQ_GROUP)
        else:
            out[role.name] = w.astype(np.float16).astype(np.float32)
    return out


__all__ = ["export", "params_from_archive", "quantised"]
