"""Shared evidence for model passes: run two models on the same inputs and compare."""

from __future__ import annotations

import numpy as np

from edgeport.errors import PassCheckError


def forward(module, inputs: np.ndarray) -> list[np.ndarray]:
    import torch

    with torch.no_grad():
        out = module(torch.from_numpy(np.ascontiguousarray(inputs)))
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o.detach().float().numpy() for o in outs]


def assert_same_outputs(pass_name: str, before, after, inputs: np.ndarray, *, rel_tol: float) -> float:
    """Raise PassCheckError when outputs differ by more than ``rel_tol`` x max|output|.

    ``rel_tol=0`` demands bit-identical outputs. Returns the worst relative error seen.
    """
    worst = 0.0
    for i, (a, b) in enumerate(zip(forward(before, inputs), forward(after, inputs), strict=True)):
        if a.shape != b.shape:
            raise PassCheckError(f"{pass_name}: output {i} changed shape {a.shape} -> {b.shape}")
        scale = max(float(np.abs(a).max()), 1e-12)
        err = float(np.abs(a - b).max()) / scale
        worst = max(worst, err)
        if err > rel_tol:
            raise PassCheckError(
                f"{pass_name}: output {i} changed by {err:.3g} x max|output| (allowed {rel_tol:g})"
            )
    return worst
