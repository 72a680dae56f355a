from __future__ import annotations

import numpy as np

from edgeport.models.decode import Detections
from edgeport.validate.parity.detections import compare_detections, match_detections


def _d(boxes, scores, classes=None):
    boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
    return Detections(boxes, np.asarray(scores, np.float32), np.asarray(classes or [0] * len(boxes), np.int64))


def test_same_detections_agree_fully():
    a = _d([[0, 0, 10, 10], [20, 20, 40, 40]], [0.9, 0.8])
    agg = compare_detections([a], [a])
    assert (agg.matched, agg.missed, agg.extra, agg.recall, agg.mean_iou, agg.max_score_delta) == (2, 0, 0, 1.0, 1.0, 0.0)


def test_missed_extra_and_class_mismatch():
    ref = _d([[0, 0, 10, 10], [20, 20, 40, 40]], [0.9, 0.8])
    got = _d([[0, 0, 10, 11], [20, 20, 40, 40], [60, 60, 70, 70]], [0.7, 0.8, 0.5], [0, 1, 0])
    agg = compare_detections([ref], [got])
    assert (agg.matched, agg.missed, agg.extra) == (1, 1, 2)
    assert abs(agg.max_score_delta - 0.2) < 1e-6
    assert match_detections(ref, _d([], [])) == []
