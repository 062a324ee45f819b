"""The trainer's JAX models are the project's float references (issue 15 item 2).

Same weights, same logits: the JAX forward passes of train/model.py and train/model3.py
against generator/model/needle2.py and needle3.py in float mode, on an archive's dequantised
weights.  Also the
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
from generator.model import numerics as nm  # noqa: E402
from generator.model.needle2 import Needle2  # noqa: E402
from generator.model.needle3 import Needle3  # noqa: E402
from train import export as X, model as M, model3 as M3, quant_jax as QJ  # noqa: E402


@pytest.fixture(scope="module")
def tiny():
    return reader.read(synth.synthesize("tiny", 3))


@pytest.fixture(scope="module")
def tiny3():
    return reader.read(synth.synthesize("needle3-tiny", 3))


def _header(a):
    return {k: v for k, v in a.header.items() if k not in ("tag", "num_tensors", "codebook_len")}


def _tokens(n, V, seed):
    toks = np.random.default_rng(seed).integers(3, V, size=(1, n))
    toks[0, 0] = 2
    return toks

def assert_rows_are_the_references(ref, geo, toks, rows, valid):
    """Table rows and validity of the vectorised hash equal the reference's slots, per position."""
    for t in range(toks.shape[1]):
        slots = ref.engram_slots(list(toks[0]), t)
        assert [tau * geo.M + s for tau, (s, _) in enumerate(slots)] == list(rows[0, t])
        assert [float(v) for _, v in slots] == list(valid[0, t])



def test_engram_rows_equal_reference_hash(tiny):
    ref = Needle2(tiny, "float")
    geo = M.Geometry.from_header(tiny.header)
    toks = _tokens(40, geo.V, 1)
    rows, valid = M.engram_rows(geo, toks)
    assert_rows_are_the_references(ref, geo, toks, rows, valid)


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
    hdr = _header(tiny)
    params = M.init_params(hdr, 4)
    blob = X.export(hdr, params, bits=4)
    back = X.params_from_archive(reader.read(blob))
    want = X.quantised(params, hdr, bits=4)
    for role in R.core_roles(2, hdr):
        assert back[role.name].shape == role.shape
        tol = 1e-6 if role.dtype == CQ else 0
        assert np.abs(back[role.name] - want[role.name]).max() <= tol * max(1.0, np.abs(want[role.name]).max()), role.name


# ---- Needle 3 ----------------------------------------------------------------------------

class _Recording(Needle3):
    """The float reference, keeping what goes into and out of every per-head int8 round trip
    (per layer: queries, keys, values)."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.codes = []

    def q_code(self, q):
        out = super().q_code(q)
        self.codes.append((q, out))
        return out

    def kv_code(self, x):
        out = super().kv_code(x)
        self.codes.append((x, out))
        return out


def test_n3_engram_rows_equal_reference_hash(tiny3):
    ref = Needle3(tiny3, "float")
    geo = M3.Geometry3.from_header(tiny3.header)
    assert geo.seed_stride == 3 != geo.Eh       # the preset's stride is not the default
    toks = _tokens(40, geo.V, 1)
    rows, valid = M3.engram_rows(geo, toks)
    assert_rows_are_the_references(ref, geo, toks, rows, valid)


@pytest.mark.parametrize("n_tokens,window", [(30, "deploy"), (100, "deploy"), (100, "package")])
def test_n3_same_weights_same_logits(tiny3, monkeypatch, n_tokens, window):
    """Needle 3's float mode rounds every query, key and value head vector through int8
    (numerics.int8_roundtrip), a step function: a value within float noise of a code boundary
    takes the neighbouring code on one side or the other, and that one code moves later logits
    by up to ~5e-2 (measured on other weights and sequences: 1e-3 to 6e-2, some arg-maxes
    too).  So this test shares the codes: at each round trip (per layer q, k, v, in the
    reference's order) the JAX model takes the reference's output, after checking that its
    own input there is the reference's input up to float noise (measured ≤ 1.2e-6 relative,
    bound 1e-4; a misplaced round trip, a missing tap or a wrong mask is O(0.1-1)).  The round
    trip itself is compared bit for bit in test_n3_int8_roundtrip_is_the_references.

    Tolerance: with the codes shared, both sides are f32 with different summation orders (the
    reference sums matrix products in f64 and everything else sequentially, XLA in f32 blocks),
    as in test_same_weights_same_logits: relative errors of a few 2⁻²⁴ per step, through 3
    layers, norms that renormalise and a head over |z| ≈ √d, the logits (|logit| ≲ 15) move
    by well under 1e-4 (measured ≤ 6e-6); a wrong step (a missing tap, an unmasked key, a
    transposed Kronecker factor, a wrong permutation) moves them by O(0.1-1).  100 tokens
    exceed the sliding band (8) and the deployment window (32): "deploy" checks both masks,
    "package" the global layer's whole causal prefix."""
    geo = M3.Geometry3.from_header(tiny3.header, window)
    assert geo.kv_window == (32 if window == "deploy" else 0) and geo.W_sw == 8
    params = {k: jnp.asarray(v) for k, v in X.params_from_archive(tiny3).items()}
    toks = _tokens(n_tokens, geo.V, n_tokens)
    ref = _Recording(tiny3, "float", window=window)
    want = ref.logits(list(toks[0]))
    assert len(ref.codes) == 3 * geo.L

    recorded = iter(ref.codes)
    drift = []

    def shared_code(x):
        r_in, r_out = next(recorded)
        r_in, r_out = jnp.asarray(r_in)[None], jnp.asarray(r_out)[None]
        assert x.shape == r_in.shape
        jax.debug.callback(drift.append, jnp.max(jnp.abs(x - r_in)) / jnp.max(jnp.abs(r_in)))
        return x + jax.lax.stop_gradient(r_out - x)

    monkeypatch.setattr(M3, "int8_roundtrip", shared_code)
    rows, valid = M3.engram_rows(geo, toks)
    # eager, as the Needle 2 test: op by op is faster here than compiling the whole graph once
    got = np.asarray(M3.forward(geo, params, jnp.asarray(toks), rows, valid))[0]
    assert got.shape == (n_tokens, geo.V_out) == want.shape and geo.V_out == 1000
    assert len(drift) == 3 * geo.L and max(float(d) for d in drift) < 1e-4
    assert np.abs(got - want).max() < 1e-4
    assert (got.argmax(-1) == want.argmax(-1)).all()


def test_n3_int8_roundtrip_is_the_references(tiny3):
    """Bit for bit on the reference's own query/key/value head vectors (and an all-zero one),
    and straight through for the gradient."""
    ref = _Recording(tiny3, "float")
    ref.logits(list(_tokens(40, tiny3.header["vocab"], 7)[0]))
    rt = jax.jit(M3.int8_roundtrip)
    for x, want in ref.codes + [(np.zeros((2, 3, 16), np.float32),) * 2]:
        assert np.array_equal(np.asarray(rt(jnp.asarray(x))), want)
        assert np.array_equal(want, nm.int8_roundtrip(x))
    g = jax.grad(lambda v: jnp.sum(M3.int8_roundtrip(v) * 3.0))(jnp.asarray(ref.codes[0][0]))
    assert np.all(np.asarray(g) == 3.0)


def test_n3_export_round_trip(tiny3):
    hdr = _header(tiny3)
    params = M3.init_params(hdr, 4)
    blob = X.export(hdr, params, bits=4, gen=3)
    a = reader.read(blob)
    assert a.generation == 3
    back = X.params_from_archive(a)
    want = X.quantised(params, hdr, bits=4)
    assert set(back) == {r.name for r in R.core_roles(3, hdr)}
    for role in R.core_roles(3, hdr):
        assert back[role.name].shape == role.shape
        tol = 1e-6 if role.dtype == CQ else 0
        assert np.abs(back[role.name] - want[role.name]).max() <= tol * max(1.0, np.abs(want[role.name]).max()), role.name
    for name, seed in (("hada_p1", 11), ("hada_p2", 13)):    # the synthesiser's permutations
        assert np.array_equal(back[name], np.random.RandomState(seed).permutation(hdr["hada_n"]))
    # the exported archive runs in the reference and in the JAX model alike
    assert np.isfinite(Needle3(a, "float").logits([2, 5, 9])).all()
