"""Detection-level agreement: does a runtime find the same objects as PyTorch, beyond what a
change that means nothing already moves?

Each runtime's raw outputs go through the one decoder (``models.decode``); boxes are then
matched greedily per image and class, highest reference score first, at IoU >= 0.5.

A box set after a confidence threshold, NMS and a max-detections cut is unstable: near-equal
scores, IoUs near NMS's threshold and the cut let a change at 1e-6 of the outputs' range (what
folding BN alone does) swap dozens of a busy detector's boxes. So the reference's boxes are
first decoded under ``PERTURBATIONS`` perturbations of its raw outputs, each within a bound that
means nothing for the row's variant (``NoiseBound``): a box found under every one is *stable*.
A box is *possible* when some candidate of PyTorch's (before NMS and the max-detections cut)
reaches the confidence threshold with every value raised by the bound (scores rise with every
head's score channels): no perturbation within the bound produces a box outside that set. A row
is then held to PyTorch's stable boxes (missed) and to boxes outside the possible set (extra);
what NMS alone moves is reported as the noise floor, and never fails a row.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from edgeport.models.decode import Detections, box_iou

MATCH_IOU = 0.5
# every value up by the bound, down by it, and ten seeded uniform draws within it: the shifts move
# every score across the confidence threshold at once; the draws reorder near-equal scores, as a
# converter's rounding does (a box a two-way tie keeps survives all ten by chance once in a thousand)
PERTURBATIONS = ("+", "-", *range(10))


@dataclass(frozen=True)
class NoiseBound:
    """How far a change that means nothing may move each value: ``fraction`` of its channel
    group's range (``relative_to``: ``max_abs``, the tensor tolerance's own measure, or
    ``range``, max - min), per group of the head, else per output."""

    fraction: float
    relative_to: str  # "max_abs" or "range"

    def describe(self) -> str:
        what = "max|value|" if self.relative_to == "max_abs" else "range"
        return f"+-{self.fraction:.3g} x each channel group's {what}"


@dataclass(frozen=True)
class Stability:
    """The reference's boxes under perturbations within a ``NoiseBound``, per image."""

    bound: NoiseBound
    stable: list[np.ndarray]  # per image: indices of the reference's boxes found under every perturbation
    possible: list[Detections]  # per image: every candidate that reaches the threshold with values raised by the bound
    moved: int  # the most boxes one perturbation moved (missed + added) against the reference: the noise floor


def perturb(outputs: list[np.ndarray], groups_of, bound: NoiseBound, how, scale_from: list[np.ndarray] | None = None) -> list[np.ndarray]:
    """``outputs`` moved within ``bound``: ``how`` is "+" or "-" (every value by the whole bound) or
    a seed (uniform draws). ``groups_of(k, shape)``: output k's channel groups (``models.heads.Group``);
    an index group (a class id) is never moved. ``scale_from``: the tensors the bound is measured on
    (default ``outputs``): parity's tolerances are measured over every input, the random ones too."""
    rng = np.random.default_rng(how) if isinstance(how, int) else None
    out = []
    for k, o in enumerate(outputs):
        o64 = o.astype(np.float64)
        s64 = (scale_from[k] if scale_from is not None else o).astype(np.float64)
        amp = np.full(o.shape, _amplitude(s64, bound))
        for g in groups_of(k, o.shape):
            idx = [slice(None)] * o.ndim
            idx[g.axis] = list(g.channels)
            amp[tuple(idx)] = 0.0 if g.index else _amplitude(s64[tuple(idx)], bound)
        step = amp if how == "+" else -amp if how == "-" else amp * rng.uniform(-1.0, 1.0, o.shape)
        out.append((o64 + step).astype(o.dtype))
    return out


def _amplitude(values: np.ndarray, bound: NoiseBound) -> float:
    if not values.size:
        return 0.0
    finite = values[np.isfinite(values)]
    if not finite.size:
        return 0.0
    scale = np.abs(finite).max() if bound.relative_to == "max_abs" else np.ptp(finite)
    return bound.fraction * float(scale)


def stability(ref: list[Detections], perturbed: list[list[Detections]], possible: list[Detections],
              bound: NoiseBound) -> Stability:
    """Which of the reference's boxes survive every perturbed decode; ``possible``: per image, as ``Stability.possible``."""
    stable = []
    per_draw = [0] * len(perturbed)
    for n, r in enumerate(ref):
        keep = np.ones(len(r), bool)
        for d, dets in enumerate(perturbed):
            pairs = match_detections(r, dets[n])
            hit = np.zeros(len(r), bool)
            hit[[i for i, _, _ in pairs]] = True
            keep &= hit
            per_draw[d] += (len(r) - len(pairs)) + (len(dets[n]) - len(pairs))
        stable.append(np.nonzero(keep)[0])
    return Stability(bound, stable, list(possible), max(per_draw, default=0))


def possible_protocol(protocol):
    """``protocol`` without NMS and without the max-detections cut: every candidate over the threshold."""
    from dataclasses import replace

    return replace(protocol, name=f"{protocol.name}-candidates", iou_thres=1.0, max_det=np.iinfo(np.int32).max)


def explained(got: Detections, possible: Detections, iou_thres: float = MATCH_IOU) -> int:
    """How many of ``got``'s boxes overlap a possible candidate of their class at ``iou_thres``."""
    if len(got) == 0 or len(possible) == 0:
        return 0
    ious = box_iou(got.boxes, possible.boxes)
    ious[got.classes[:, None] != possible.classes[None, :]] = 0.0
    return int((ious.max(axis=1) >= iou_thres).sum())


@dataclass(frozen=True)
class DetectionAgreement:
    reference_boxes: int
    matched: int
    missed: int  # in the reference, not found by the runtime
    extra: int  # found by the runtime, not in the reference
    mean_iou: float  # over matched pairs
    max_score_delta: float  # over matched pairs
    mean_score_delta: float
    # above the noise floor (``Stability``), when one was measured: what the row is judged by
    stable_boxes: int | None = None  # PyTorch's boxes found under every perturbation
    missed_stable: int | None = None  # of those, not found by the runtime
    extra_beyond: int | None = None  # found by the runtime, and by no perturbation of PyTorch's outputs
    noise_floor: int | None = None  # the most boxes one perturbation moved
    noise_bound: str | None = None  # the perturbation, in words

    @property
    def judged(self) -> tuple[int, int, int]:
        """(boxes held, missed, extra) as the gate counts them: above the noise floor where it was measured."""
        if self.stable_boxes is None:
            return self.reference_boxes, self.missed, self.extra
        return self.stable_boxes, self.missed_stable, self.extra_beyond

    @property
    def recall(self) -> float:
        return self.matched / self.reference_boxes if self.reference_boxes else 1.0

    def to_dict(self) -> dict:
        return {**asdict(self), "recall": self.recall}


def anchor_strides(anchors: int, strides, imgsz: int) -> np.ndarray | None:
    """Each anchor's stride, where the anchors are the levels' cells in order (one an anchor-free cell,
    or three: YOLOv5's); None where the strides do not say how many each level holds."""
    if not strides or any(int(s) <= 0 or imgsz % int(s) for s in strides):  # (0: an output that is no level)
        return None
    for per_cell in (1, 3):
        counts = [(imgsz // int(s)) ** 2 * per_cell for s in strides]
        if sum(counts) == anchors:
            return np.repeat(np.asarray(strides, np.int64), counts)
    return None


def box_errors(head, ref: list[np.ndarray], got: list[np.ndarray], strides, imgsz: int, conf: float) -> dict | None:
    """How far a row's boxes lie from PyTorch's, anchor by anchor, over the anchors PyTorch scores at
    least ``conf``: the mean distance of the box centres in input pixels, over all and per stride (where
    the strides say which anchor is whose), and of the corners. None for a head without one box an
    anchor, or where PyTorch scores no anchor that high."""
    theirs, mine = head.anchors(ref), head.anchors(got)
    if theirs is None or mine is None:
        return None
    centre, corner, which = [], [], []
    per_anchor = anchor_strides(len(theirs[0][0]), strides, imgsz)
    for (rb, rs), (gb, _) in zip(theirs, mine):
        keep = rs >= conf
        rc, gc = (rb[keep, :2] + rb[keep, 2:]) / 2, (gb[keep, :2] + gb[keep, 2:]) / 2
        centre.append(np.hypot(*(gc - rc).T))
        corner.append(np.abs(gb[keep] - rb[keep]).mean(axis=1))
        if per_anchor is not None:
            which.append(per_anchor[keep])
    centre, corner = np.concatenate(centre), np.concatenate(corner)
    if not centre.size:
        return None
    out = {"box_centre_px": float(centre.mean()), "box_corner_px": float(corner.mean()), "boxes_judged": int(centre.size)}
    if which:
        which = np.concatenate(which)
        out["box_centre_px_by_stride"] = {str(s): float(centre[which == s].mean()) for s in np.unique(which)}
    return out


def match_detections(ref: Detections, got: Detections, iou_thres: float = MATCH_IOU) -> list[tuple[int, int, float]]:
    """Greedy (ref_index, got_index, iou) pairs, same class only."""
    if len(ref) == 0 or len(got) == 0:
        return []
    ious = box_iou(ref.boxes, got.boxes)
    ious[ref.classes[:, None] != got.classes[None, :]] = 0.0
    used: set[int] = set()
    pairs = []
    for i in np.argsort(-ref.scores, kind="stable"):
        candidates = [(ious[i, j], j) for j in range(len(got)) if j not in used and ious[i, j] >= iou_thres]
        if candidates:
            iou, j = max(candidates)
            used.add(j)
            pairs.append((int(i), int(j), float(iou)))
    return pairs


def compare_detections(ref: list[Detections], got: list[Detections], floor: Stability | None = None) -> DetectionAgreement:
    """``got`` against ``ref``, image by image; with ``floor``, also above its noise floor: the
    stable boxes ``got`` misses, and the boxes it adds that no perturbation produces."""
    total = matched = extra = 0
    stable = missed_stable = beyond = 0
    ious: list[float] = []
    deltas: list[float] = []
    for n, (r, g) in enumerate(zip(ref, got, strict=True)):
        pairs = match_detections(r, g)
        total += len(r)
        matched += len(pairs)
        extra += len(g) - len(pairs)
        ious += [p[2] for p in pairs]
        deltas += [abs(float(r.scores[i]) - float(g.scores[j])) for i, j, _ in pairs]
        if floor is not None:
            hit = {i for i, _, _ in pairs}
            stable += len(floor.stable[n])
            missed_stable += sum(int(i) not in hit for i in floor.stable[n])
            beyond += len(g) - explained(g, floor.possible[n])
    return DetectionAgreement(
        reference_boxes=total,
        matched=matched,
        missed=total - matched,
        extra=extra,
        mean_iou=float(np.mean(ious)) if ious else 1.0,
        max_score_delta=float(np.max(deltas)) if deltas else 0.0,
        mean_score_delta=float(np.mean(deltas)) if deltas else 0.0,
        stable_boxes=stable if floor is not None else None,
        missed_stable=missed_stable if floor is not None else None,
        extra_beyond=beyond if floor is not None else None,
        noise_floor=floor.moved if floor is not None else None,
        noise_bound=floor.bound.describe() if floor is not None else None,
    )
