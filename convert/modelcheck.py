"""Shared evidence for model passes: run two models on the same inputs and compare."""

from __future__ import annotations

import numpy as np

from edgeport.errors import PassCheckError
from edgeport.models.inference import forward
from edgeport.validate.metrics import max_abs_rel


def assert_same_outputs(pass_name: str, before, after, inputs: np.ndarray, *, rel_tol: float) -> float:
    """Raise PassCheckError when outputs differ by more than ``rel_tol`` x max|output|.

    ``rel_tol=0`` demands bit-identical outputs. Returns the worst relative error seen.
    """
    worst = 0.0
    for i, (a, b) in enumerate(zip(forward(before, inputs), forward(after, inputs), strict=True)):
        if a.shape != b.shape:
            raise PassCheckError(f"{pass_name}: output {i} changed shape {a.shape} -> {b.shape}")
        err = max_abs_rel(a, b)
        worst = max(worst, err)
        if err > rel_tol:
            raise PassCheckError(
                f"{pass_name}: output {i} changed by {err:.3g} x max|output| (allowed {rel_tol:g})"
            )
    return worst
