from __future__ import annotations

import numpy as np
import pytest

from edgeport.models.decode import COCO_EVAL, DETECT, DecodeProtocol, box_iou, decode, decode_level, nms


def _empty(c=6, h=4, w=4):
    raw = np.zeros((1, c, h, w), np.float32)
    raw[:, 4:] = -20.0  # no objects anywhere
    return raw


def test_single_cell_decodes_to_its_box():
    raw = _empty()
    # cell (y=1, x=2) at stride 8: centre (20, 12); distances exp(0)*8 = 8 each side
    raw[0, 4:, 1, 2] = 10.0
    (dets,) = decode([raw], [8], DecodeProtocol("test", conf_thres=0.5, iou_thres=0.5, max_det=100))
    assert len(dets) == 1
    np.testing.assert_allclose(dets.boxes[0], [12, 4, 28, 20], atol=1e-4)
    assert dets.scores[0] == pytest.approx(1 / (1 + np.exp(-10.0)) ** 2, rel=1e-5)
    assert dets.classes[0] == 0


def test_distances_are_log_space_in_stride_units():
    raw = _empty(h=1, w=1)[0]
    raw[0:4, 0, 0] = np.log([1.0, 2.0, 3.0, 4.0])
    boxes, _ = decode_level(raw, 16)
    np.testing.assert_allclose(boxes[0], [8 - 16, 8 - 32, 8 + 48, 8 + 64], rtol=1e-5)


def test_nms_suppresses_overlaps_and_keeps_order():
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30]], np.float32)
    scores = np.array([0.8, 0.9, 0.7], np.float32)
    assert nms(boxes, scores, 0.5).tolist() == [1, 2]
    assert nms(boxes, scores, 0.99).tolist() == [1, 0, 2]


def test_nms_at_an_iou_threshold_of_1_keeps_every_box_as_the_greedy_loop_does():
    rng = np.random.default_rng(0)
    xy = rng.random((300, 2), dtype=np.float32) * 50
    boxes = np.concatenate([xy, xy + 1 + rng.random((300, 2), dtype=np.float32) * 20], axis=1)
    boxes[1] = boxes[0]  # identical boxes: IoU exactly 1, still kept
    scores = rng.random(300, dtype=np.float32)
    scores[7] = scores[8]  # a tie keeps its order
    got = nms(boxes, scores, 1.0)
    assert got.dtype == np.int64 and got.tolist() == np.argsort(-scores, kind="stable").tolist()
    # the loop itself, at a threshold only a hair under: the identical pair is all it suppresses
    assert set(got.tolist()) - set(nms(boxes, scores, 1.0 - 1e-7).tolist()) == {int(np.argsort(-scores[:2], kind="stable")[1])}


def test_nms_cut_at_max_det_keeps_what_keeping_all_then_cutting_keeps():
    rng = np.random.default_rng(1)
    xy = rng.random((2000, 2), dtype=np.float32) * 200
    boxes = np.concatenate([xy, xy + 5 + rng.random((2000, 2), dtype=np.float32) * 40], axis=1)
    scores = rng.random(2000, dtype=np.float32)
    for thres in (0.3, 0.5, 0.7, 1.0):
        every = nms(boxes, scores, thres)
        assert len(every) > 100, thres  # the cut matters: more survive than are kept
        for cut in (1, 17, 100, len(every), len(every) + 5):
            got = nms(boxes, scores, thres, cut)
            assert got.dtype == np.int64 and got.tolist() == every[:cut].tolist(), (thres, cut)


def test_nms_keeps_what_the_box_by_box_loop_through_box_iou_keeps():
    """The same IoU values, so the same boxes: ties, NaN coordinates (a NaN IoU suppresses), empty
    and degenerate boxes, every threshold and cut."""
    from edgeport.models.decode import box_iou

    def loop(boxes, scores, thres, cut):
        order, keep = np.argsort(-scores, kind="stable"), []
        while order.size and (cut is None or len(keep) < cut):
            keep.append(int(order[0]))
            order = order[1:][box_iou(boxes[order[:1]], boxes[order[1:]])[0] <= thres]
        return keep

    rng = np.random.default_rng(3)
    for trial in range(24):  # every mix of dense (trial % 2), degenerate (% 3) and NaN ((trial // 2) % 2) boxes, twice
        n = int(rng.integers(0, 300))
        xy = rng.random((n, 2), dtype=np.float32) * (20 if trial % 2 else 200)
        boxes = np.concatenate([xy, xy + rng.random((n, 2), dtype=np.float32) * 40 - (trial % 3 == 0) * 5], axis=1)
        if n > 3 and (trial // 2) % 2 == 0:
            boxes[2] = np.nan
        scores = rng.random(n, dtype=np.float32).round(2)  # many ties
        for thres in (0.0, 0.3, 0.5, 0.9):
            for cut in (None, 1, 100):
                got = nms(boxes, scores, thres, cut)
                assert got.dtype == np.int64 and got.tolist() == loop(boxes, scores, thres, cut), (trial, thres, cut)


def test_class_aware_nms_keeps_overlapping_boxes_of_other_classes():
    raw = _empty(c=7)
    raw[0, 4, 1, 1] = 10.0
    raw[0, 5, 1, 1] = 10.0  # class 0
    raw[0, 4, 1, 2] = 10.0
    raw[0, 6, 1, 2] = 9.0  # class 1, box overlapping the first one
    (dets,) = decode([raw], [8], DecodeProtocol("test", conf_thres=0.5, iou_thres=0.5, max_det=100))
    assert sorted(dets.classes.tolist()) == [0, 1]


def test_iou_matrix():
    a = np.array([[0, 0, 2, 2]], np.float32)
    b = np.array([[1, 1, 3, 3], [0, 0, 2, 2], [5, 5, 6, 6]], np.float32)
    np.testing.assert_allclose(box_iou(a, b), [[1 / 7, 1.0, 0.0]], rtol=1e-6)


def test_decode_batches_and_checks_strides():
    raw = np.concatenate([_empty(), _empty()])
    assert [len(d) for d in decode([raw], [8])] == [0, 0]
    assert decode([raw], [8])[0].boxes.shape == (0, 4)
    with pytest.raises(ValueError, match="2 outputs but 1 strides"):
        decode([raw, raw], [8])


def test_the_two_protocols_are_named_for_their_purpose():
    raw = _empty()
    raw[0, 4:, 1, 2] = -3.0  # a faint candidate: score sigmoid(-3)^2 = 0.002
    assert len(decode([raw], [8], DETECT)[0]) == 0  # not a detection a deployment keeps
    assert len(decode([raw], [8], COCO_EVAL)[0]) == 1  # but COCO mAP ranks it
    assert (DETECT.conf_thres, COCO_EVAL.conf_thres) == (0.25, 0.001)
