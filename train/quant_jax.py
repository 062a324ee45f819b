"""CQ fake quantisation in JAX, for quantisation-aware fine-tuning.

The forward value of every matrix is what the archive will hold (generator/archive/quant.py,
docs/spec/cact-format.md §6.3): per zero-padded 128-wide group, rotate by the normalised
Walsh-Hadamard matrix, keep the L2 norm, code the unit vector to the nearest codebook level,
and rebuild W = ν·level·H.  The gradient passes straight through (d Wq / d W = I), the usual
estimator for rounding.  The f16 rounding of the norm is left out: it is 2⁻¹¹ relative, far
below the level spacing.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from generator.archive import quant
from generator.archive.format import CQ_GROUP


def _levels(bits: int) -> np.ndarray:
    return quant.level_table(bits, quant.default_codebook(), CQ_GROUP).astype(np.float32)


def cq_roundtrip(w, bits: int):
    """W as its CQ encoding gives it back (same shape)."""
    out, inp = w.shape
    in_pad = -(-inp // CQ_GROUP) * CQ_GROUP
    Hm = jnp.asarray(quant.hadamard(CQ_GROUP))
    g = jnp.pad(w, ((0, 0), (0, in_pad - inp))).reshape(out, in_pad // CQ_GROUP, CQ_GROUP)
    rho = g @ Hm
    nu = jnp.sqrt(jnp.sum(rho * rho, axis=-1, keepdims=True))
    unit = rho / jnp.maximum(nu, 1e-12)
    levels = jnp.asarray(_levels(bits))
    mids = (levels[:-1] + levels[1:]) / 2
    # the nearest level: its index is the number of midpoints below the value (what
    # searchsorted(side="left") returns, as a compare-and-count XLA vectorises)
    q = levels[jnp.sum(unit[..., None] > mids, axis=-1)]
    back = (nu * q) @ Hm                       # H is symmetric and orthonormal: H⁻¹ = H
    return back.reshape(out, in_pad)[:, :inp]


def fake_quant(params: dict, cq_roles: set, bits: int) -> dict:
    """Parameters whose CQ matrices read as their quantised values (straight-through)."""
    out = {}
    for k, w in params.items():
        if k in cq_roles:
            out[k] = w + jax.lax.stop_gradient(cq_roundtrip(w, bits) - w)
        else:
            out[k] = w
    return out


__all__ = ["cq_roundtrip", "fake_quant"]
