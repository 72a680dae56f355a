"""Metrics that every comparison shares: relative error, cosine, and COCO mAP (no torch).

One definition each, so a pass check, the parity table, the divergence curve and the
training log all mean the same thing by the same word.
"""

from __future__ import annotations

import contextlib
import io
import math

import numpy as np

from edgeport.models.decode import Detections


def relative(max_abs: float, ref_max_abs: float) -> float:
    """``max_abs / ref_max_abs``: 0 when both are zero, inf when only the reference is."""
    if ref_max_abs > 0:
        return max_abs / ref_max_abs
    return 0.0 if max_abs == 0 else math.inf


def max_abs_rel(ref: np.ndarray, got: np.ndarray) -> float:
    """``max|got - ref| / max|ref|`` in float64."""
    r = np.asarray(ref, np.float64)
    return relative(float(np.abs(r - np.asarray(got, np.float64)).max(initial=0.0)), float(np.abs(r).max(initial=0.0)))


def cosine(ref: np.ndarray, got: np.ndarray) -> float:
    """Cosine similarity of the flattened tensors in float64, clamped to [-1, 1] (rounding can put two
    equal tensors at 1.0000000000000002, which the gate rightly refuses); NaN when either holds NaN/Inf
    (an angle with those in it means nothing), 1 when both are zero, 0 when one is."""
    r = np.asarray(ref, np.float64).ravel()
    g = np.asarray(got, np.float64).ravel()
    if not (np.isfinite(r).all() and np.isfinite(g).all()):
        return math.nan
    nr, ng = float(np.linalg.norm(r)), float(np.linalg.norm(g))
    if nr == 0 and ng == 0:
        return 1.0
    if nr == 0 or ng == 0:
        return 0.0
    return min(1.0, max(-1.0, float(np.dot(r, g) / (nr * ng))))


def coco_map(samples, detections: list[Detections], *, per_class: bool = False) -> dict:
    """COCO mAP of ``detections`` (original-image xyxy; must come from ``models.decode``'s ``COCO_EVAL``
    protocol) against the ground truth of ``samples`` (``validate.datasets.Sample``): ``{"map50",
    "map50_95"}``, and with ``per_class`` ``"classes"``: class -> ``{"ap50", "ap50_95", "instances"}``
    for each class with a labelled box (its AP NaN-free: a class no image holds has none)."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    num_classes = max([int(c) for s in samples for c in s.classes] + [0]) + 1
    gt = {"images": [], "annotations": [], "categories": [{"id": c + 1} for c in range(num_classes)]}
    dt = []
    for img_id, (s, d) in enumerate(zip(samples, detections, strict=True), start=1):
        gt["images"].append({"id": img_id, "width": s.width, "height": s.height})
        for box, cls in zip(s.boxes, s.classes):
            x1, y1, x2, y2 = (float(v) for v in box)
            gt["annotations"].append({"id": len(gt["annotations"]) + 1, "image_id": img_id, "category_id": int(cls) + 1,
                                      "bbox": [x1, y1, x2 - x1, y2 - y1], "area": (x2 - x1) * (y2 - y1), "iscrowd": 0})
        for box, score, cls in zip(d.boxes, d.scores, d.classes):
            x1, y1, x2, y2 = (float(v) for v in box)
            dt.append({"image_id": img_id, "category_id": int(cls) + 1, "bbox": [x1, y1, x2 - x1, y2 - y1], "score": float(score)})
    instances = np.bincount([a["category_id"] - 1 for a in gt["annotations"]], minlength=num_classes)
    if not gt["annotations"]:
        return {"map50": float("nan"), "map50_95": float("nan"), **({"classes": {}} if per_class else {})}
    if not dt:
        return {"map50": 0.0, "map50_95": 0.0, **({"classes": {c: {"ap50": 0.0, "ap50_95": 0.0, "instances": int(n)}
                                                             for c, n in enumerate(instances) if n}} if per_class else {})}
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its tables
        coco_gt = COCO()
        coco_gt.dataset = gt
        coco_gt.createIndex()
        coco_dt = coco_gt.loadRes(dt)
        ev = COCOeval(coco_gt, coco_dt, "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    out = {"map50": float(ev.stats[1]), "map50_95": float(ev.stats[0])}
    if per_class:
        # precision: [IoU threshold, recall point, class, area range, max detections]; -1 where a class has no box
        precision = ev.eval["precision"][:, :, :, 0, -1]
        out["classes"] = {c: {"ap50": _mean_of_known(precision[0, :, c]), "ap50_95": _mean_of_known(precision[:, :, c]),
                              "instances": int(n)} for c, n in enumerate(instances) if n}
    return out


def _mean_of_known(precision: np.ndarray) -> float:
    known = precision[precision > -1]
    return float(known.mean()) if known.size else 0.0
