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


# -- the noise floor: what NMS alone moves never fails a row; a row that loses boxes still does ------

def _busy_v8(seed=0):
    """A busy yolov8 output (1, 5, 230): 60 confident boxes, then 150 whose scores tie within 2e-7 (a
    class branch as training leaves it) so that the max-detections cut (100) keeps 40 of them by a
    hair, and 20 near the 0.25 confidence threshold. Every box stands apart, so NMS is not in play:
    only the thresholds are."""
    rng = np.random.default_rng(seed)
    n = 230
    out = np.zeros((1, 5, n), np.float32)
    ys, xs = np.divmod(np.arange(n), 16)
    out[0, 0], out[0, 1] = 15 + 30 * xs, 15 + 30 * ys
    out[0, 2:4] = 20
    out[0, 4, :60] = rng.uniform(0.8, 0.95, 60)
    out[0, 4, 60:210] = 0.4 + rng.uniform(-2e-7, 2e-7, 150)
    out[0, 4, 210:] = 0.25 + rng.uniform(-2e-7, 2e-7, 20)
    return out


def _floor(ref_out, bound):
    from edgeport.models.decode import DETECT
    from edgeport.models.heads import Head
    from edgeport.validate.parity.detections import PERTURBATIONS, perturb, possible_protocol, stability

    head = Head("yolov8", nc=1)
    ref = head.decode([ref_out])
    perturbed = [head.decode(perturb([ref_out], head.groups, bound, how)) for how in PERTURBATIONS]
    possible = head.decode(perturb([ref_out], head.groups, bound, "+"), possible_protocol(DETECT))
    return head, ref, stability(ref, perturbed, possible, bound)


def test_boxes_that_only_nms_moved_are_the_noise_floor():
    """A change at 1e-6 of the range (folding BN) swaps near-tied boxes: against all of PyTorch's boxes
    the row misses some and adds others; above the noise floor it misses and adds none."""
    from edgeport.validate.parity.compare import FLOAT_NOISE

    ref_out = _busy_v8()
    head, ref, floor = _floor(ref_out, FLOAT_NOISE)
    moved = ref_out * (1 + np.random.default_rng(9).uniform(-1e-6, 1e-6, ref_out.shape)).astype(np.float32)
    got = head.decode([moved])
    raw = compare_detections(ref, got)
    assert raw.missed > 0 and raw.extra > 0, "the fixture must have near-ties that a 1e-6 change moves"
    agg = compare_detections(ref, got, floor)
    assert (agg.missed_stable, agg.extra_beyond) == (0, 0), agg
    assert agg.stable_boxes == 60 and agg.noise_floor >= raw.missed
    assert agg.judged == (agg.stable_boxes, 0, 0)


def test_a_row_that_loses_boxes_still_fails_above_the_floor():
    """Scores a quarter of what they should be (a broken output scale) lose every stable box, far
    above the floor; boxes moved away are boxes no perturbation produces."""
    from edgeport.validate.parity.compare import DETECTION_TOLERANCES, QUANTISED_NOISE

    ref_out = _busy_v8(1)
    head, ref, floor = _floor(ref_out, QUANTISED_NOISE)
    broken = ref_out.copy()
    broken[0, 4] *= 0.25
    agg = compare_detections(ref, head.decode([broken]), floor)
    assert agg.stable_boxes == 60
    assert agg.missed_stable > DETECTION_TOLERANCES["int8"].allowed(agg.stable_boxes), agg
    shifted = ref_out.copy()
    shifted[0, :2, :60] += 12.0  # the confident boxes moved by more than half their size
    agg = compare_detections(ref, head.decode([shifted]), floor)
    assert agg.extra_beyond > DETECTION_TOLERANCES["int8"].allowed(agg.stable_boxes), agg


def test_class_indices_are_never_perturbed():
    """An end-to-end head's class column is an index: moved by a bound of 1/255 of a 0..199 range it
    rounds to another class, every box then looks unstable, and a file whose scores came out a quarter
    of PyTorch's passed. Held still, the 30 confident rows are stable and that file fails."""
    from edgeport.models.decode import DETECT
    from edgeport.models.heads import Head
    from edgeport.validate.parity.compare import QUANTISED_NOISE
    from edgeport.validate.parity.detections import PERTURBATIONS, perturb, possible_protocol, stability

    rows = np.zeros((1, 300, 6), np.float32)
    rows[0, :30, 0], rows[0, :30, 1] = np.arange(30) * 40, 10
    rows[0, :30, 2], rows[0, :30, 3] = rows[0, :30, 0] + 30, 40
    rows[0, :30, 4] = np.linspace(0.6, 0.9, 30)
    rows[0, :, 5] = np.arange(300) % 200
    head = Head("yolov10", nc=200)
    ref = head.decode([rows])
    perturbed = [head.decode(perturb([rows], head.groups, QUANTISED_NOISE, how)) for how in PERTURBATIONS]
    floor = stability(ref, perturbed, head.decode(perturb([rows], head.groups, QUANTISED_NOISE, "+"), possible_protocol(DETECT)),
                      QUANTISED_NOISE)
    assert len(floor.stable[0]) == 30
    quartered = rows.copy()
    quartered[0, :, 4] *= 0.25
    assert compare_detections(ref, head.decode([quartered]), floor).missed_stable == 30
    assert compare_detections(ref, head.decode([rows]), floor).judged == (30, 0, 0)


def test_box_errors_are_the_centres_distance_anchor_by_anchor_and_by_stride():
    """A YOLOv8 output at 32 px with strides 8 and 16 (16 + 4 anchors): a row whose centres lie 1 px
    off at stride 8 and 3 px off at stride 16, over the anchors PyTorch scores >= 0.25 only."""
    from edgeport.models.heads import Head
    from edgeport.validate.parity.detections import anchor_strides, box_errors

    assert list(anchor_strides(20, (8, 16), 32)) == [8] * 16 + [16] * 4 and anchor_strides(21, (8, 16), 32) is None
    assert anchor_strides(20, (0,), 32) is None  # a head output that is no level (YOLOv8's one tensor)
    assert list(anchor_strides(60, (8, 16), 32)) == [8] * 48 + [16] * 12  # three anchors a cell (YOLOv5)
    ref = np.zeros((1, 5, 20), np.float32)
    ref[0, :2], ref[0, 2:4], ref[0, 4] = 10.0, 6.0, 0.9
    ref[0, 4, :2] = 0.1  # two anchors PyTorch does not score: not judged, however far off
    got = ref.copy()
    got[0, 0, :16] += 1.0
    got[0, 1, 16:] += 3.0
    got[0, 0, :2] += 50.0
    found = box_errors(Head("yolov8", nc=1), [ref], [got], (8, 16), 32, 0.25)
    assert found["boxes_judged"] == 18 and found["box_centre_px_by_stride"] == {"8": 1.0, "16": 3.0}
    assert abs(found["box_centre_px"] - (14 * 1.0 + 4 * 3.0) / 18) < 1e-6
    assert box_errors(Head("raw"), [ref], [got], (8, 16), 32, 0.25) is None
