"""Detection-level agreement: does a runtime find the same objects as PyTorch?

Each runtime's raw outputs go through the one decoder (``models.decode``); boxes are then
matched greedily per image and class, highest reference score first, at IoU >= 0.5.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from edgeport.models.decode import Detections, box_iou

MATCH_IOU = 0.5


@dataclass(frozen=True)
class DetectionAgreement:
    reference_boxes: int
    matched: int
    missed: int  # in the reference, not found by the runtime
    extra: int  # found by the runtime, not in the reference
    mean_iou: float  # over matched pairs
    max_score_delta: float  # over matched pairs
    mean_score_delta: float

    @property
    def recall(self) -> float:
        return self.matched / self.reference_boxes if self.reference_boxes else 1.0

    def to_dict(self) -> dict:
        return {**asdict(self), "recall": self.recall}


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


def compare_detections(ref: list[Detections], got: list[Detections]) -> DetectionAgreement:
    total = matched = extra = 0
    ious: list[float] = []
    deltas: list[float] = []
    for r, g in zip(ref, got, strict=True):
        pairs = match_detections(r, g)
        total += len(r)
        matched += len(pairs)
        extra += len(g) - len(pairs)
        ious += [p[2] for p in pairs]
        deltas += [abs(float(r.scores[i]) - float(g.scores[j])) for i, j, _ in pairs]
    return DetectionAgreement(
        reference_boxes=total,
        matched=matched,
        missed=total - matched,
        extra=extra,
        mean_iou=float(np.mean(ious)) if ious else 1.0,
        max_score_delta=float(np.max(deltas)) if deltas else 0.0,
        mean_score_delta=float(np.mean(deltas)) if deltas else 0.0,
    )
