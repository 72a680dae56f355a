"""Shared evidence for model passes: run two models on the same inputs and compare."""

from __future__ import annotations

import numpy as np

from edgeport.errors import PassCheckError
from edgeport.models.inference import forward
from edgeport.validate.metrics import max_abs_rel


def rows_match(a: np.ndarray, b: np.ndarray, rel_tol: float) -> bool:
    """Whether ``a`` and ``b`` hold the same rows (along axis 1) in another order, each within
    ``rel_tol`` x max|a|: what a top-k or NMS tail gives when a rewrite moves a tied score by an ulp.

    A top-k also cuts between tied scores: where the rows that pair with none are, in each, the
    lowest-ranked -- in every column both keep in falling order (the score, and any other that
    happens to fall with it), their value within ``rel_tol`` of that column's own size of the last
    row's, and the two last rows' within it of each other -- the two kept different rows of equal
    score at the cut, and hold the same rows otherwise."""
    # rows of a few values each (a detection's box, score, class): what such a tail returns
    if a.ndim != 3 or a.shape != b.shape or a.shape[2] > 16 or a.shape[1] > 4096:
        return False
    scale = max(float(np.abs(a).max(initial=0.0)), 1e-30)
    for n in range(a.shape[0]):
        ra, rb = a[n].astype(np.float64), b[n].astype(np.float64)
        used, alone = np.zeros(len(rb), bool), []
        for i, row in enumerate(ra):
            diff = np.abs(rb - row).max(axis=1) / scale
            diff[used] = np.inf
            j = int(np.argmin(diff))
            if diff[j] <= rel_tol:
                used[j] = True
            else:
                alone.append(i)
        if alone and not _tied_at_the_cut(ra, rb, alone, np.flatnonzero(~used), rel_tol):
            return False
    return True


def _tied_at_the_cut(ra: np.ndarray, rb: np.ndarray, alone_a, alone_b, rel_tol: float) -> bool:
    """Whether the unpaired rows of ``ra`` and ``rb`` (one image's) are rows a top-k kept at its cut
    among scores tied within ``rel_tol``: see ``rows_match``."""
    if len(alone_a) == len(ra):
        return False  # nothing in common: not a cut, another result
    ranked = [c for c in range(ra.shape[1]) if np.all(np.diff(ra[:, c]) <= 0) and np.all(np.diff(rb[:, c]) <= 0)
              and ra[0, c] > ra[-1, c]]
    if not ranked:
        return False  # no score to cut on
    for c in ranked:  # a column that falls with the score by chance must tie too: it cannot make a cut of a difference
        tol = rel_tol * max(float(np.abs(ra[:, c]).max()), float(np.abs(rb[:, c]).max()))
        last_a, last_b = ra[-1, c], rb[-1, c]
        if not (abs(last_a - last_b) <= tol and np.all(ra[alone_a, c] - last_a <= tol) and np.all(rb[alone_b, c] - last_b <= tol)):
            return False
    return True


def assert_same_outputs(pass_name: str, before, after, inputs: np.ndarray, *, rel_tol: float) -> float:
    """Raise PassCheckError when outputs differ by more than ``rel_tol`` x max|output|.

    ``rel_tol=0`` demands bit-identical outputs; rows in another order (``rows_match``) are the same
    output. NaN and infinite values must stay where they were, as they were (a NaN's error is NaN,
    which no comparison with ``rel_tol`` refuses); the error is that of the finite values. Returns
    the worst relative error seen (element by element).
    """
    worst = 0.0
    for i, (a, b) in enumerate(zip(forward(before, inputs), forward(after, inputs), strict=True)):
        if a.shape != b.shape:
            raise PassCheckError(f"{pass_name}: output {i} changed shape {a.shape} -> {b.shape}")
        bad_a, bad_b = ~np.isfinite(a), ~np.isfinite(b)
        if not np.array_equal(bad_a, bad_b) or not np.array_equal(a[bad_a], b[bad_b], equal_nan=True):
            raise PassCheckError(f"{pass_name}: output {i} is NaN or infinite in other places than before "
                                 f"({int(bad_a.sum())} -> {int(bad_b.sum())} such values)")
        err = max_abs_rel(a[~bad_a], b[~bad_b])
        if err > rel_tol and not rows_match(a, b, max(rel_tol, 1e-6)):
            raise PassCheckError(
                f"{pass_name}: output {i} changed by {err:.3g} x max|output| (allowed {rel_tol:g})"
            )
        worst = max(worst, err if err <= rel_tol else 0.0)
    return worst
