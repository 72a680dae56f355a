"""Comparators: typed results, never a bare bool.

``compare_tensors`` measures one output of one runtime against the reference and says
whether it passes the variant's tolerance and what tolerance it would take to pass.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from edgeport.validate.metrics import cosine, relative


@dataclass(frozen=True)
class Tolerance:
    """Pass when ``max_abs <= max_abs_rel * max|reference|`` and ``cosine >= min_cosine``.

    ``None`` leaves that metric ungated.
    """

    max_abs_rel: float | None = None
    min_cosine: float | None = None


# Float32 converters only reorder float arithmetic; int8 is judged on shape of the signal.
FLOAT32 = Tolerance(max_abs_rel=1e-4, min_cosine=0.99999)
INT8 = Tolerance(max_abs_rel=None, min_cosine=0.99)
TOLERANCES = {"folded": FLOAT32, "onnx": FLOAT32, "float32": FLOAT32, "int8": INT8}


@dataclass(frozen=True)
class TensorMetrics:
    max_abs: float
    mean_abs: float
    rmse: float
    cosine: float
    snr_db: float
    p99_abs: float
    ref_max_abs: float

    @property
    def max_abs_rel(self) -> float:
        return relative(self.max_abs, self.ref_max_abs)


@dataclass(frozen=True)
class TensorComparison:
    name: str
    metrics: TensorMetrics
    tolerance: Tolerance
    passed: bool
    # the loosest-needed tolerance under which this comparison would pass
    needed: Tolerance
    reasons: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        d = {"name": self.name, **asdict(self.metrics), "max_abs_rel": self.metrics.max_abs_rel}
        d.update(passed=self.passed, tolerance=asdict(self.tolerance), needed=asdict(self.needed), reasons=list(self.reasons))
        return d


def tensor_metrics(ref: np.ndarray, got: np.ndarray) -> TensorMetrics:
    if ref.shape != got.shape:
        raise ValueError(f"shape mismatch: reference {ref.shape}, got {got.shape}")
    r = ref.astype(np.float64).ravel()
    g = got.astype(np.float64).ravel()
    diff = np.abs(r - g)
    signal = float(np.sum(r * r))
    noise = float(np.sum((r - g) ** 2))
    if not math.isfinite(noise):
        snr = math.nan
    elif noise == 0:
        snr = math.inf
    elif signal == 0:
        snr = -math.inf
    else:
        snr = 10.0 * math.log10(signal / noise)
    return TensorMetrics(
        max_abs=float(diff.max(initial=0.0)),
        mean_abs=float(diff.mean()) if diff.size else 0.0,
        rmse=float(math.sqrt(noise / max(diff.size, 1))),
        cosine=cosine(r, g),
        snr_db=snr,
        p99_abs=float(np.quantile(diff, 0.99)) if diff.size else 0.0,
        ref_max_abs=float(np.abs(r).max(initial=0.0)),
    )


def compare_tensors(name: str, ref: np.ndarray, got: np.ndarray, tol: Tolerance) -> TensorComparison:
    m = tensor_metrics(ref, got)
    reasons = []
    finite = bool(np.isfinite(got).all())
    if not finite:
        reasons.append("non-finite values")
    if tol.max_abs_rel is not None and not m.max_abs_rel <= tol.max_abs_rel:
        reasons.append(f"max_abs {m.max_abs:.3g} > {tol.max_abs_rel:g} x max|ref| ({m.ref_max_abs:.3g})")
    if tol.min_cosine is not None and not m.cosine >= tol.min_cosine:
        reasons.append(f"cosine {m.cosine:.6f} < {tol.min_cosine}")
    needed = Tolerance(
        max_abs_rel=m.max_abs_rel if tol.max_abs_rel is not None else None,
        min_cosine=m.cosine if tol.min_cosine is not None else None,
    )
    return TensorComparison(name, m, tol, passed=not reasons, needed=needed, reasons=tuple(reasons))


# log10 |error| bin edges for the report's histograms: 1e-9 .. 1e2, half a decade per bin
HIST_EDGES = tuple(float(e) for e in np.arange(-9.0, 2.01, 0.5))


def error_histogram(refs: list[np.ndarray], gots: list[np.ndarray]) -> dict:
    """Counts of |error| per half-decade over all outputs (exact zeros counted apart)."""
    diff = np.concatenate([np.abs(r.astype(np.float64) - g.astype(np.float64)).ravel() for r, g in zip(refs, gots)])
    zeros = int((diff == 0).sum())
    logs = np.log10(diff[diff > 0]) if diff.size > zeros else np.zeros(0)
    counts, _ = np.histogram(np.clip(logs, HIST_EDGES[0], HIST_EDGES[-1]), bins=np.asarray(HIST_EDGES))
    return {"log10_edges": list(HIST_EDGES), "counts": counts.astype(int).tolist(), "exact_zeros": zeros}
