"""Detector heads: the published output formats, decoded without the frameworks that wrote them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgeport.errors import BadInputError
from edgeport.models.decode import COCO_EVAL, DETECT
from edgeport.models.heads import HEADS, Head, Hints, head_hints, resolve_head


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
    (det,) = Head("yolov8", nc=2).decode([_v8()], DETECT)
    assert len(det) == 1 and det.classes.tolist() == [1]
    np.testing.assert_allclose(det.boxes[0], [80, 70, 120, 90])
    assert det.scores[0] == pytest.approx(0.9)
    (every,) = Head("yolov8", nc=2).decode([_v8()], COCO_EVAL)
    assert len(every) > 1  # the COCO protocol keeps the low-confidence candidates too


def test_yolov5_score_is_objectness_times_class():
    out = np.zeros((1, 30, 7), np.float32)  # (1, A, 5+nc), nc = 2
    out[0, :, :4] = [50, 50, 10, 10]
    out[0, 3] = [200, 100, 60, 40, 0.8, 0.1, 0.75]
    (det,) = Head("yolov5", nc=2).decode([out])
    assert det.classes.tolist() == [1] and det.scores[0] == pytest.approx(0.6)
    np.testing.assert_allclose(det.boxes[0], [170, 80, 230, 120])


def test_auto_picks_the_head_the_shapes_admit():
    assert resolve_head("auto", [(1, 5, 2100)]) == Head("yolov8", nc=1)
    assert resolve_head(None, [(1, 25200, 6)]) == Head("yolov5", nc=1)
    assert resolve_head("auto", [(1, 6, 20, 20), (1, 6, 10, 10)], (8, 16)) == Head("pdet", nc=1, strides=(8, 16))
    assert resolve_head("auto", [(1, 1000)]) == Head("classify", nc=1000)
    assert resolve_head("auto", [(1, 21, 64, 64)]) == Head("raw")  # a segmenter without strides
    assert resolve_head("auto", [(1, 38, 2100), (1, 32, 40, 40)]) == Head("yolov8-seg", nc=2, nm=32)


def test_auto_asks_when_the_shapes_fit_several_heads():
    """(1, 56, A) is YOLOv8 with 52 classes, or YOLOv8-pose with 1 and COCO's 17 keypoints: the shapes
    cannot say, the model can (its head's nc and kpt_shape), and else the user is asked."""
    with pytest.raises(BadInputError, match=r"fit several heads: yolov8 \(52 classes\); yolov8-pose \(1 class, 17 keypoints x 3\); "
                                            r"pass --head"):
        resolve_head("auto", [(1, 56, 2100)])
    assert resolve_head("auto", [(1, 56, 2100)], hints=Hints(nc=1, kpt_shape=(17, 3))) == Head("yolov8-pose", nc=1, kpt_shape=(17, 3))
    assert resolve_head("auto", [(1, 56, 2100)], hints=Hints(nc=52)) == Head("yolov8", nc=52)
    assert resolve_head("yolov8-pose", [(1, 56, 2100)]).kpt_shape == (17, 3)
    with pytest.raises(BadInputError, match="fit several heads: yolov10; yolov5 "):
        resolve_head("auto", [(1, 300, 6)])  # end-to-end rows, or anchor-based YOLOv5 with one class
    assert resolve_head("auto", [(1, 300, 6)], hints=Hints(nc=80, end2end=True)).name == "yolov10"


def test_hints_are_read_off_the_models_own_head():
    class Pose(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.nc, self.kpt_shape, self.conv = 1, (17, 3), torch.nn.Conv2d(1, 1, 1)

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 1, 1), Pose())
    assert head_hints(model) == Hints(nc=1, kpt_shape=(17, 3))
    assert head_hints(torch.nn.Conv2d(3, 1, 1)) == Hints()


def test_a_named_head_must_fit_the_outputs():
    assert resolve_head("raw", [(1, 5, 2100)]) == Head("raw")
    with pytest.raises(BadInputError, match=r"--head yolov5 expects one \(N, A, 5\+nc\) output; the model's outputs are \[\(1, 5, 2100\)\]"):
        resolve_head("yolov5", [(1, 5, 2100)])
    with pytest.raises(BadInputError, match="--head 'ssd' is not one of auto, pdet, yolov8"):
        resolve_head("ssd", [(1, 5, 2100)])


def test_channel_groups_separate_what_lives_on_different_scales():
    groups = Head("yolov8", nc=1).groups(0, (1, 5, 2100))
    assert [(g.name, g.axis, g.channels) for g in groups] == [("boxes", 1, (0, 1, 2, 3)), ("scores", 1, (4,))]
    groups = Head("yolov5", nc=2).groups(0, (1, 25200, 7))
    assert [(g.name, g.axis, g.channels) for g in groups] == [("boxes", 2, (0, 1, 2, 3)), ("objectness", 2, (4,)),
                                                              ("scores", 2, (5, 6))]
    pose = {g.name: g.channels for g in Head("yolov8-pose", nc=1, kpt_shape=(17, 3)).groups(0, (1, 56, 2100))}
    assert pose["keypoints"][:4] == (5, 6, 8, 9) and pose["visibility"][:2] == (7, 10) and len(pose["visibility"]) == 17
    seg = Head("yolov8-seg", nc=2, nm=32)
    assert [g.name for g in seg.groups(0, (1, 38, 2100))] == ["boxes", "scores", "masks"]
    assert [g.name for g in seg.groups(1, (1, 32, 40, 40))] == ["prototypes"]
    assert Head("raw").groups(0, (1, 5, 2100)) == [] and Head("raw").channel_axis(0, (1, 5, 2100)) == 1


def test_end_to_end_rows_are_kept_as_the_model_ranked_them():
    rows = np.zeros((1, 300, 6), np.float32)
    rows[0, 0] = [10, 20, 50, 80, 0.9, 3]
    rows[0, 1] = [5, 5, 9, 9, 0.1, 1]
    (det,) = Head("yolov10", nc=80).decode([rows])
    assert len(det) == 1 and det.classes.tolist() == [3] and det.boxes[0].tolist() == [10, 20, 50, 80]


def test_the_cli_offers_exactly_the_heads():
    from edgeport.cli import HEAD_CHOICES

    assert HEAD_CHOICES == ("auto", *HEADS)


def test_oriented_boxes_are_a_head_of_their_own():
    """Ultralytics' OBB export (1, 4+nc+1, A): boxes, class scores, then the angle. Its shape is also a
    yolov8 of one more class, so auto takes it only where the model's head says so (``ne``)."""
    out = np.zeros((1, 4 + 2 + 1, 40), np.float32)
    out[0, :4] = 5.0
    out[0, :4, 3] = [100, 100, 40, 20]
    out[0, 5, 3] = 0.9
    out[0, 6, 3] = np.pi / 2  # a quarter turn: 40 wide becomes 40 tall
    head = resolve_head("yolov8-obb", [out.shape])
    assert head == Head("yolov8-obb", nc=2)
    assert [g.name for g in head.groups(0, out.shape)] == ["boxes", "scores", "angle"]
    assert head.groups(0, out.shape)[2].channels == (6,)
    (dets,) = head.decode([out])
    assert dets.classes.tolist() == [1]
    np.testing.assert_allclose(dets.boxes[0], [90, 80, 110, 120], atol=1e-3)
    assert resolve_head("auto", [out.shape]).name == "yolov8"  # without the model's word: a yolov8 of 3 classes
    assert resolve_head("auto", [out.shape], hints=Hints(nc=2, oriented=True)).name == "yolov8-obb"

    class OBB(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.nc, self.ne, self.conv = 2, 1, torch.nn.Conv2d(1, 1, 1)

    assert head_hints(torch.nn.Sequential(OBB())) == Hints(nc=2, oriented=True)
