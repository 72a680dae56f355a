"""Shared evidence for model passes: run two models on the same inputs and compare."""

from __future__ import annotations

import numpy as np

from edgeport.errors import PassCheckError
from edgeport.models.inference import forward
from edgeport.validate.metrics import max_abs_rel


def rows_match(a: np.ndarray, b: np.ndarray, rel_tol: float) -> bool:
    """Whether ``a`` and ``b`` hold the same rows (along axis 1) in another order, each within
    ``rel_tol`` x max|a|: what a top-k or NMS tail gives when a rewrite moves a tied score by an ulp."""
    # rows of a few values each (a detection's box, score, class): what such a tail returns
    if a.ndim != 3 or a.shape != b.shape or a.shape[2] > 16 or a.shape[1] > 4096:
        return False
    scale = max(float(np.abs(a).max(initial=0.0)), 1e-30)
    for n in range(a.shape[0]):
        ra, rb = a[n].astype(np.float64), b[n].astype(np.float64)
        used = np.zeros(len(rb), bool)
        for row in ra:
            diff = np.abs(rb - row).max(axis=1) / scale
            diff[used] = np.inf
            j = int(np.argmin(diff))
            if not diff[j] <= rel_tol:
                return False
            used[j] = True
    return True


def assert_same_outputs(pass_name: str, before, after, inputs: np.ndarray, *, rel_tol: float) -> float:
    """Raise PassCheckError when outputs differ by more than ``rel_tol`` x max|output|.

    ``rel_tol=0`` demands bit-identical outputs. An output whose rows come back in another order,
    each row matching (a top-k or NMS tail reordering ties), is the same output. Returns the worst
    relative error seen (element by element).
    """
    worst = 0.0
    for i, (a, b) in enumerate(zip(forward(before, inputs), forward(after, inputs), strict=True)):
        if a.shape != b.shape:
            raise PassCheckError(f"{pass_name}: output {i} changed shape {a.shape} -> {b.shape}")
        err = max_abs_rel(a, b)
        if err > rel_tol and not rows_match(a, b, max(rel_tol, 1e-6)):
            raise PassCheckError(
                f"{pass_name}: output {i} changed by {err:.3g} x max|output| (allowed {rel_tol:g})"
            )
        worst = max(worst, err if err <= rel_tol else 0.0)
    return worst
