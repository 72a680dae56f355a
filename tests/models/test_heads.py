"""Detector heads: the published output formats, decoded without the frameworks that wrote them."""

from __future__ import annotations

import numpy as np
import pytest

from edgeport.errors import BadInputError
from edgeport.models.decode import COCO_EVAL, DETECT
from edgeport.models.heads import HEADS, channel_groups, decode_head, resolve_head


def _v8(n_anchors=50, nc=2):
    """Ultralytics v8/11 export format (1, 4+nc, A): one confident box of class 1, the rest noise."""
    rng = np.random.default_rng(0)
    out = np.zeros((1, 4 + nc, n_anchors), np.float32)
    out[0, :4] = rng.uniform(10, 60, (4, n_anchors))
    out[0, 4:] = rng.uniform(0, 0.1, (nc, n_anchors))
    out[0, :4, 7] = [100, 80, 40, 20]  # cx, cy, w, h in pixels
    out[0, 4 + 1, 7] = 0.9
    return out


def test_yolov8_boxes_are_xywh_pixels_then_class_scores():
    (det,) = decode_head("yolov8", [_v8()], protocol=DETECT)
    assert len(det) == 1 and det.classes.tolist() == [1]
    np.testing.assert_allclose(det.boxes[0], [80, 70, 120, 90])
    assert det.scores[0] == pytest.approx(0.9)
    (every,) = decode_head("yolov8", [_v8()], protocol=COCO_EVAL)
    assert len(every) > 1  # the COCO protocol keeps the low-confidence candidates too


def test_yolov5_score_is_objectness_times_class():
    out = np.zeros((1, 30, 7), np.float32)  # (1, A, 5+nc), nc = 2
    out[0, :, :4] = [50, 50, 10, 10]
    out[0, 3] = [200, 100, 60, 40, 0.8, 0.1, 0.75]
    (det,) = decode_head("yolov5", [out])
    assert det.classes.tolist() == [1] and det.scores[0] == pytest.approx(0.6)
    np.testing.assert_allclose(det.boxes[0], [170, 80, 230, 120])


def test_auto_picks_the_head_the_shapes_admit():
    assert resolve_head("auto", [(1, 5, 2100)]) == "yolov8"
    assert resolve_head(None, [(1, 25200, 6)]) == "yolov5"
    assert resolve_head("auto", [(1, 6, 20, 20), (1, 6, 10, 10)], (8, 16)) == "pdet"
    assert resolve_head("auto", [(1, 1000)]) == "raw"  # a classifier: tensors only
    assert resolve_head("auto", [(1, 21, 64, 64)]) == "raw"  # a segmenter without strides


def test_a_named_head_must_fit_the_outputs():
    assert resolve_head("raw", [(1, 5, 2100)]) == "raw"
    with pytest.raises(BadInputError, match=r"--head yolov5 expects one \(N, A, 5\+nc\) output; the model's outputs are \[\(1, 5, 2100\)\]"):
        resolve_head("yolov5", [(1, 5, 2100)])
    with pytest.raises(BadInputError, match="--head 'ssd' is not one of auto, pdet, yolov8, yolov5, raw"):
        resolve_head("ssd", [(1, 5, 2100)])


def test_channel_groups_separate_box_pixels_from_scores():
    assert channel_groups("yolov8", (1, 5, 2100)) == [("boxes", slice(0, 4), 1), ("scores", slice(4, 5), 1)]
    assert channel_groups("yolov5", (1, 25200, 7)) == [("boxes", slice(0, 4), 2), ("scores", slice(4, 7), 2)]
    assert channel_groups("pdet", (1, 6, 20, 20)) == [] and channel_groups("raw", (1, 5, 2100)) == []


def test_the_cli_offers_exactly_the_heads():
    from edgeport.cli import HEAD_CHOICES

    assert HEAD_CHOICES == ("auto", *HEADS)
