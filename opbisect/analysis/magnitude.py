"""Magnitude: how far apart the runs of a source's result are, from the whole tensors of the sources only.

For a set of runs of one tensor: the largest absolute difference between any two runs at any element, the
largest distance in units in the last place (ULP), and the fraction of elements that are not bitwise
identical in every run.
"""

from __future__ import annotations

import math

import numpy as np

from ..record.model import Magnitude

_INT_OF = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}


def _ordered(bits: np.ndarray) -> np.ndarray:
    """Float bit patterns (as signed ints) mapped to integers that order like the floats, as int64."""
    b = bits.astype(np.int64)
    sign_free = b & np.int64((1 << (8 * bits.dtype.itemsize - 1)) - 1)
    return np.where(b < 0, -sign_free, sign_free)


def of_runs(arrays: list[np.ndarray]) -> Magnitude:
    arrays = [np.asarray(a) for a in arrays]
    if len({a.shape for a in arrays}) > 1:  # dynamic shapes that differ between runs
        return Magnitude(math.inf, math.inf, 1.0, max(a.size for a in arrays))
    stack = np.stack(arrays).reshape(len(arrays), -1)
    if stack.size == 0:
        return Magnitude(0.0, 0.0, 0.0, 0)
    kind = stack.dtype.kind
    if kind == "c":  # complex: compare real and imaginary parts as floats
        stack = stack.view(stack.real.dtype)
        kind = "f"
    if kind == "b":
        stack = stack.astype(np.int8)
        kind = "i"
    is_float = kind == "f" or stack.dtype.name == "bfloat16"
    bits = stack.view(_INT_OF[stack.dtype.itemsize])
    differ = (bits != bits[:1]).any(axis=0)
    frac = float(differ.mean())
    if not differ.any():
        return Magnitude(0.0, 0.0, 0.0, stack.shape[1])
    cols = stack[:, differ]
    if is_float:
        values = cols.astype(np.float64)
        finite = np.isfinite(values).all(axis=0)
        max_abs = float((values[:, finite].max(0) - values[:, finite].min(0)).max()) if finite.any() else 0.0
        if not finite.all():
            max_abs = math.inf  # a NaN or Inf in some runs but not others
        ordered = _ordered(bits[:, differ]).astype(np.float64)  # float64: exact below 2^53 ULPs
        max_ulp = float((ordered.max(0) - ordered.min(0)).max())
    else:
        values = cols.astype(np.float64)
        max_abs = max_ulp = float((values.max(0) - values.min(0)).max())
    return Magnitude(max_abs, max_ulp, frac, stack.shape[1])


def of_source(tensor_runs: list[list[np.ndarray]]) -> Magnitude:
    """Combine the magnitudes of a source's differing tensors: `tensor_runs[i]` holds tensor i in every run."""
    parts = [of_runs(runs) for runs in tensor_runs]
    total = sum(p.elements for p in parts)
    return Magnitude(
        max_abs_diff=max(p.max_abs_diff for p in parts),
        max_ulp_diff=max(p.max_ulp_diff for p in parts),
        frac_elements_differing=(sum(p.frac_elements_differing * p.elements for p in parts) / total) if total
        else max(p.frac_elements_differing for p in parts),
        elements=total,
    )
