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
TOLERANCES = {"folded": FLOAT32, "onnx": FLOAT32, "float32": FLOAT32, "int8": INT8, "uint8": INT8}
# Every channel of a quantised file on its own: one that PyTorch varies must vary too, and keep
# this cosine; an output's overall cosine hides a channel that collapsed next to larger ones.
CHANNEL = Tolerance(max_abs_rel=None, min_cosine=0.98)
QUANTISED = ("int8", "uint8")


@dataclass(frozen=True)
class DetectionTolerance:
    """How many of PyTorch's boxes a runtime may miss, and how many it may add, at IoU 0.5: a row
    fails beyond ``max(slack, fraction x PyTorch's boxes)`` of either."""

    fraction: float
    slack: int = 1

    def allowed(self, boxes: int) -> int:
        return max(self.slack, int(self.fraction * boxes))


# float files compute what PyTorch computes: a box more or less is a tie at the threshold; int8
# moves scores by a step or two around the 0.25 confidence threshold
DETECTION_TOLERANCES = {"folded": DetectionTolerance(0.02), "onnx": DetectionTolerance(0.02), "float32": DetectionTolerance(0.02),
                        "int8": DetectionTolerance(0.2), "uint8": DetectionTolerance(0.2)}


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


def compare_channels(name: str, ref: np.ndarray, got: np.ndarray, axis: int, tol: Tolerance = CHANNEL,
                     group_of=lambda c: "") -> TensorComparison:
    """Every channel along ``axis`` on its own: a channel PyTorch varies (beyond float noise) that
    came back constant has collapsed; one whose cosine falls under ``tol`` has lost its signal.
    The metrics are the worst channel's; the reasons name each failing channel (and its group)."""
    r = np.moveaxis(ref.astype(np.float64), axis, 0).reshape(ref.shape[axis], -1)
    g = np.moveaxis(got.astype(np.float64), axis, 0).reshape(got.shape[axis], -1)
    scale = float(np.abs(r).max(initial=0.0))
    varies = np.ptp(r, axis=1) > 1e-6 * max(scale, 1e-30) if r.shape[1] else np.zeros(r.shape[0], bool)
    reasons, worst, worst_rel = [], 1.0, 0.0
    for c in np.flatnonzero(varies):
        label = f"channel {c}" + (f" ({group_of(int(c))})" if group_of(int(c)) else "")
        cos = cosine(r[c], g[c])
        rel = relative(float(np.abs(r[c] - g[c]).max()), float(np.abs(r[c]).max()))
        worst, worst_rel = min(worst, cos) if cos == cos else float("nan"), max(worst_rel, rel)
        if np.ptp(g[c]) == 0:
            reasons.append(f"{label} collapsed to the constant {g[c][0]:.4g}; PyTorch's varies {r[c].min():.4g}..{r[c].max():.4g}")
        elif not cos >= tol.min_cosine:
            reasons.append(f"{label} cosine {cos:.4f} < {tol.min_cosine}")
    m = tensor_metrics(ref, got)
    metrics = TensorMetrics(max_abs=m.max_abs, mean_abs=m.mean_abs, rmse=m.rmse, cosine=worst, snr_db=m.snr_db, p99_abs=m.p99_abs,
                            ref_max_abs=m.ref_max_abs)
    shown = reasons[:8] + ([f"and {len(reasons) - 8} more channels"] if len(reasons) > 8 else [])
    return TensorComparison(f"{name}[channels]", metrics, tol, passed=not reasons, needed=Tolerance(min_cosine=worst),
                            reasons=tuple(shown))
