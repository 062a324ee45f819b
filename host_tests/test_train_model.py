"""The trainer's JAX model is the project's float reference (issue 15 item 2).

Same weights, same logits: the JAX forward pass of train/model.py against
generator/model/needle2.py in float mode, on an archive's dequantised weights.  Also the
pieces the equality rests on: the vectorised engram hash, the CQ fake quantisation against the
format's quantiser, and the export round trip through the project's writer and reader.

Needs the trainer's packages (pip install -r train/requirements.txt; .ci/run installs them).
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="the trainer's packages: pip install -r train/requirements.txt")
jnp = jax.numpy

from generator.archive import quant, reader, roles as R  # noqa: E402
from generator.archive.format import CQ  # noqa: E402
from generator.commands import synth  # noqa: E402
from generator.model.needle2 import Needle2  # noqa: E402
from train import export as X, model as M, quant_jax as QJ  # noqa: E402


@pytest.fixture(scope="module")
def tiny():
    return reader.read(synth.synthesize("tiny", 3))


def _tokens(n, V, seed):
    toks = np.random.default_rng(seed).integers(3, V, size=(1, n))
    toks[0, 0] = 2
    return toks


def test_engram_rows_equal_reference_hash(tiny):
    ref = Needle2(tiny, "float")
    geo = M.Geometry.from_header(tiny.header)
    toks = _tokens(40, geo.V, 1)
    rows, valid = M.engram_rows(geo, toks)
    for t in range(40):
        slots = ref.engram_slots(list(toks[0]), t)
        assert [tau * geo.M + s for tau, (s, _) in enumerate(slots)] == list(rows[0, t])
        assert [float(v) for _, v in slots] == list(valid[0, t])


@pytest.mark.parametrize("n_tokens", [30, 100])   # 100 > the tiny preset's KV window of 64
def test_same_weights_same_logits(tiny, n_tokens):
    """Tolerance: both sides are f32 with different summation orders (the reference sums
    matrix products in f64, XLA in f32 blocks).  Each of the ~40 rounding steps per layer adds
    a relative error of a few 2⁻²⁴ of the values it combines; through 2 layers, norms that
    renormalise, and a head over |z| ≈ √d, the logits (|logit| ≤ ~15) move by well under
    1e-4.  A wrong step (a missing gate, a transposed map, a shifted conv tap) moves them by
    O(0.1-1), three orders of magnitude above the bound."""
    geo = M.Geometry.from_header(tiny.header)
    params = {k: jnp.asarray(v) for k, v in X.params_from_archive(tiny).items()}
    toks = _tokens(n_tokens, geo.V, n_tokens)
    rows, valid = M.engram_rows(geo, toks)
    got = np.asarray(M.forward(geo, params, jnp.asarray(toks), rows, valid))[0]
    want = Needle2(tiny, "float").logits(list(toks[0]))
    assert np.abs(got - want).max() < 1e-4
    assert (got.argmax(-1) == want.argmax(-1)).all()


def test_fake_quant_is_the_format_quantiser():
    w = np.random.default_rng(5).normal(0, 0.1, size=(24, 200))
    for bits in (2, 3, 4):
        idx, norms = quant.quantize(w, bits, quant.default_codebook())
        want = quant.dequantize(idx, norms.astype(np.float32), bits, quant.default_codebook(), 200)
        got = np.asarray(QJ.cq_roundtrip(jnp.asarray(w, jnp.float32), bits))
        # the archive's norms are f16 (2^-11 relative) and a coordinate sitting on a level
        # midpoint may round the other way in f32: compare with that slack, and most exactly
        rel = np.abs(got - want) / (np.abs(w).max())
        assert np.median(rel) < 1e-3 and rel.max() < 0.2


def test_export_round_trip(tiny):
    hdr = {k: v for k, v in tiny.header.items() if k not in ("tag", "num_tensors", "codebook_len")}
    params = M.init_params(hdr, 4)
    blob = X.export(hdr, params, bits=4)
    back = X.params_from_archive(reader.read(blob))
    want = X.quantised(params, hdr, bits=4)
    for role in R.core_roles(2, hdr):
        assert back[role.name].shape == role.shape
        tol = 1e-6 if role.dtype == CQ else 0
        assert np.abs(back[role.name] - want[role.name]).max() <= tol * max(1.0, np.abs(want[role.name]).max()), role.name
