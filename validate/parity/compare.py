"""Comparators: typed results, never a bare bool -- whether an output passes its variant's tolerance,
and the tolerance it would take to pass."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from edgeport.validate.metrics import cosine, relative
from edgeport.validate.parity.detections import NoiseBound
from edgeport.validate.parity.result import QUANTISED_FILES, REPAIRED


@dataclass(frozen=True)
class Tolerance:
    """Pass when ``max_abs <= max_abs_rel * max|reference|`` -- or ``max_abs_rel * scale`` where the
    output is a probability (``scale`` 1: its scale, whatever one run's values), or, for a float file,
    ``max_abs <= float32_error`` -- and ``cosine >= min_cosine``. ``None`` leaves that metric ungated.
    """

    max_abs_rel: float | None = None
    min_cosine: float | None = None
    # a float file's: what float32 itself errs by on this output (``FLOAT32_ERROR``), where measured
    float32_error: float | None = None
    scale: float | None = None


# Float32 converters only reorder float arithmetic; int8 is judged on shape of the signal.
FLOAT32 = Tolerance(max_abs_rel=1e-4, min_cosine=0.99999)
# the folded model (BatchNorms folded, upsamples rewritten): exact rewrites, held to the fold's own promise
FOLDED = Tolerance(max_abs_rel=1e-5, min_cosine=0.99999)
# A float file's output may lie from PyTorch's by what float32 itself errs by there: PyTorch's model
# in float32 against float64, on the same images, element by element, twice (each of the two float32
# computations errs by up to that). Measured only for a row its relative tolerance would fail.
FLOAT32_ERROR = 2.0
INT8 = Tolerance(max_abs_rel=None, min_cosine=0.99)
# a quantised file with a float tail (convert/passes/repair_pass.py) is held to what its pure file is held to
QUANTISED = (*QUANTISED_FILES, *(v + REPAIRED for v in QUANTISED_FILES))
TOLERANCES = {"folded": FOLDED, "onnx": FLOAT32, "float32": FLOAT32, **{v: INT8 for v in QUANTISED}}
FLOAT_VARIANTS = ("folded", "onnx", "float32")
# A quantised file's output that no head decodes (``--head raw``) and that PyTorch keeps within [0, 1]
# on every image -- a probability, a softmax's or a sigmoid's -- is a decision at some threshold the
# user's own code applies: each value held to 0.05 of PyTorch's (a dozen 8-bit steps of [0, 1]), so
# that no decision flips at a threshold further than that from PyTorch's value (MTCNN's P-Net: a
# quantised file that put 0.91 where PyTorch has 0.57, a face added, kept a cosine of 0.9995 over the map).
PROBABILITY_ERROR = 0.05


def probability_tolerance(ref: np.ndarray) -> Tolerance:
    """``PROBABILITY_ERROR`` as a share of the output's max|value| (what ``max_abs_rel`` is of)."""
    return Tolerance(max_abs_rel=PROBABILITY_ERROR / max(float(np.max(np.abs(ref))), PROBABILITY_ERROR), min_cosine=INT8.min_cosine)
# Every channel of a quantised file on its own: one that PyTorch varies must vary too, and keep
# this cosine; an output's overall cosine hides a channel that collapsed next to larger ones.
CHANNEL = Tolerance(max_abs_rel=None, min_cosine=0.98)


@dataclass(frozen=True)
class DetectionTolerance:
    """How many of PyTorch's boxes a runtime may miss, and how many it may add, at IoU 0.5: a row
    fails beyond ``max(slack, fraction x PyTorch's boxes)`` of either."""

    fraction: float
    slack: int = 1

    def allowed(self, boxes: int) -> int:
        return max(self.slack, int(self.fraction * boxes))


# float files compute what PyTorch computes (their tensors are held to 1e-4): a box more or less is a
# tie at the threshold or at NMS's overlap, more of them the more boxes crowd an image. int8 moves a
# score by a step across the 0.25 confidence threshold and a box by a step across NMS's 0.5 overlap,
# again more often the more boxes crowd an image. Measured: the shipped detector's int8 misses 4 to
# 6 of PyTorch's 36 boxes; YOLOv8n with a trained-like head (boxes of a few strides, 8 to an image)
# adds 24 to its 64 (37 %) by surviving NMS; a file adding 86 boxes to 187 (46 %) fails.
DETECTION_TOLERANCES = {"folded": DetectionTolerance(0.05), "onnx": DetectionTolerance(0.05), "float32": DetectionTolerance(0.05),
                        **{v: DetectionTolerance(0.4, 2) for v in QUANTISED}}

# What a change that means nothing moves, per variant (``detections.NoiseBound``): boxes that a
# perturbation within it moves are NMS's own instability, not the row's. A float file is held to
# 1e-4 of each group's max|value| (its tensor tolerance: a float row within tolerance moves no box
# such a perturbation cannot move). A quantised file moves every value by up to half a step, and a
# step is at least 1/255 of the group's range (8 bits over exactly its range, the finest scale an
# 8-bit file can give it): one full step, so that a rounding at either end of the range is covered.
FLOAT_NOISE = NoiseBound(FLOAT32.max_abs_rel, "max_abs")
QUANTISED_NOISE = NoiseBound(1 / 255, "range")
NOISE_BOUNDS = {"folded": FLOAT_NOISE, "onnx": FLOAT_NOISE, "float32": FLOAT_NOISE, **{v: QUANTISED_NOISE for v in QUANTISED}}


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
    needed: Tolerance  # the tolerance it would take to pass
    reasons: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        d = {"name": self.name, **asdict(self.metrics), "max_abs_rel": self.metrics.max_abs_rel}
        tolerance = {k: v for k, v in asdict(self.tolerance).items() if v is not None or k not in ("float32_error", "scale")}
        needed = {k: v for k, v in asdict(self.needed).items() if k not in ("float32_error", "scale")}
        d.update(passed=self.passed, tolerance=tolerance, needed=needed, reasons=list(self.reasons))
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
    if tol.max_abs_rel is not None and not m.max_abs_rel <= tol.max_abs_rel and \
            not (tol.float32_error is not None and m.max_abs <= tol.float32_error) and \
            not (tol.scale is not None and m.max_abs <= tol.max_abs_rel * max(m.ref_max_abs, tol.scale)):
        own = f" and float32's own error ({tol.float32_error:.3g})" if tol.float32_error is not None else ""
        reasons.append(f"max_abs {m.max_abs:.3g} > {tol.max_abs_rel:g} x max|ref| ({m.ref_max_abs:.3g}"
                       f"{f', a probability: {tol.scale:g}' if tol.scale is not None else ''}){own}")
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


# a channel "varies" when its values span at least this fraction of its group's range (boxes,
# scores, ...: the head's groups; where the head names none, channels of like magnitude, below):
# below it, int8 gives the channel fewer than 26 of the group's 256 steps, and its shape is not
# something int8 promises to keep (an untrained classifier's logits; a class no object in the
# images belongs to). A score or a keypoint visibility that collapsed spans its group's whole
# range in PyTorch.
VARYING = 0.1
# channels the head does not group are grouped by their own magnitude (max |value| in PyTorch): a
# group starts at its smallest channel and takes every channel up to this many times larger. Box
# pixels (0..480) and scores or an angle (0..1) are then apart, so a score that int8 flattened
# next to pixels is judged against the scores' range, not the pixels' -- whatever the head.
MAGNITUDE_RATIO = 10.0


def magnitude_groups(ref: np.ndarray, axis: int, channels=None) -> list[tuple[int, ...]]:
    """``channels`` (default: all along ``axis``) grouped by their magnitude in ``ref`` (``MAGNITUDE_RATIO``)."""
    r = np.moveaxis(np.asarray(ref, np.float64), axis, 0).reshape(ref.shape[axis], -1)
    chans = list(range(r.shape[0])) if channels is None else list(channels)
    scale = {c: float(np.abs(r[c][np.isfinite(r[c])]).max(initial=0.0)) for c in chans}
    groups: list[list[int]] = []
    start = None
    for c in sorted(chans, key=lambda c: (scale[c], c)):
        if groups and scale[c] <= MAGNITUDE_RATIO * start:
            groups[-1].append(c)
        else:
            groups.append([c])
            start = scale[c]
    return [tuple(sorted(g)) for g in groups]


def compare_channels(name: str, ref: np.ndarray, got: np.ndarray, axis: int,
                     groups: tuple[tuple[str, tuple[int, ...]], ...] = ()) -> TensorComparison:
    """Every channel along ``axis`` on its own: a varying channel (``VARYING``, against its group's
    range) that came back constant has collapsed; one whose cosine falls under ``CHANNEL`` has lost its
    signal. ``groups``: (name, channels) of the head's channel groups; channels in none are grouped
    by magnitude (``magnitude_groups``). The metrics are the worst varying channel's; the reasons
    name each failing channel, with its group."""
    r = np.moveaxis(ref.astype(np.float64), axis, 0).reshape(ref.shape[axis], -1)
    g = np.moveaxis(got.astype(np.float64), axis, 0).reshape(got.shape[axis], -1)
    group_of = {c: gname for gname, chans in groups for c in chans}
    ungrouped = [c for c in range(r.shape[0]) if c not in group_of]
    span_of = {c: float(np.abs(r[list(chans)]).max(initial=0.0)) for _, chans in groups if chans for c in chans}
    for chans in magnitude_groups(ref, axis, ungrouped) if ungrouped else ():
        span = float(np.abs(r[list(chans)]).max(initial=0.0))
        span_of.update({c: span for c in chans})
    reasons, worst = [], 1.0
    for c in range(r.shape[0]):
        if not r.shape[1] or not np.ptp(r[c]) > VARYING * span_of[c]:
            continue
        label = f"channel {c}" + (f" ({group_of[c]})" if c in group_of else "")
        cos = cosine(r[c], g[c])
        worst = cos if not cos >= worst else worst  # NaN sticks
        if np.ptp(g[c]) == 0:
            reasons.append(f"{label} collapsed to the constant {g[c][0]:.4g}; PyTorch's varies {r[c].min():.4g}..{r[c].max():.4g}")
        elif not cos >= CHANNEL.min_cosine:
            reasons.append(f"{label} cosine {cos:.4f} < {CHANNEL.min_cosine}")
    m = tensor_metrics(ref, got)
    metrics = TensorMetrics(max_abs=m.max_abs, mean_abs=m.mean_abs, rmse=m.rmse, cosine=worst, snr_db=m.snr_db, p99_abs=m.p99_abs,
                            ref_max_abs=m.ref_max_abs)
    shown = reasons[:8] + ([f"and {len(reasons) - 8} more channels"] if len(reasons) > 8 else [])
    return TensorComparison(f"{name}[channels]", metrics, CHANNEL, passed=not reasons, needed=Tolerance(min_cosine=worst),
                            reasons=tuple(shown))


def align_rows(ref: np.ndarray, got: np.ndarray) -> np.ndarray:
    """``got`` with its rows (axis 1) in ``ref``'s order, each paired with the nearest free row:
    what an end-to-end head's top-k returns is a set, and a tie between two scores orders it
    differently on another runtime. Per image, greedy, the closest pair first."""
    if ref.ndim != 3 or ref.shape != got.shape:
        return got
    out = got.copy()
    for n in range(ref.shape[0]):
        r, g = ref[n].astype(np.float64), got[n].astype(np.float64)
        cost = np.abs(r[:, None, :] - g[None, :, :]).max(axis=2)  # rows x rows: a few hundred, a few values each
        order = np.argsort(cost, axis=None, kind="stable")
        taken_r, taken_g, pairs = np.zeros(len(r), bool), np.zeros(len(g), bool), {}
        for flat in order:
            i, j = divmod(int(flat), len(g))
            if not taken_r[i] and not taken_g[j]:
                taken_r[i] = taken_g[j] = True
                pairs[i] = j
                if len(pairs) == len(r):
                    break
        out[n] = got[n][[pairs[i] for i in range(len(r))]]
    return out
