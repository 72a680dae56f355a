"""``validate.metrics.coco_map`` (pycocotools) against Ultralytics' own evaluation (``yolo val``'s
matching and ``ap_per_class``), fed the same detections and labels: the two mAPs agree within half a
point, overall and per class. Tests may import Ultralytics; edgeport's code never does."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

from edgeport.models.decode import Detections
from edgeport.validate.datasets import Sample
from edgeport.validate.metrics import coco_map

if importlib.util.find_spec("ultralytics") is None:
    pytest.skip("Ultralytics is not installed", allow_module_level=True)


def _scene(rng: np.random.Generator, images: int, classes: int):
    """Labelled images and detections near their boxes: moved, resized, missed, doubled and invented,
    scored the higher the closer they are -- a detector of middling mAP."""
    samples, detections = [], []
    for i in range(images):
        w, h = 640, 480
        n = int(rng.integers(1, 9))
        xy = rng.uniform([0, 0], [w - 120, h - 120], (n, 2))
        wh = rng.uniform(12, 120, (n, 2))
        boxes = np.concatenate([xy, xy + wh], 1).astype(np.float32)
        cls = rng.integers(0, classes, n)
        samples.append(Sample(f"img{i}.jpg", boxes, cls.astype(np.int64), w, h))
        found = rng.random(n) > 0.15
        moved = boxes[found] + rng.normal(0, 1, (found.sum(), 4)) * np.repeat(wh[found], 2, 1) * rng.uniform(0.02, 0.25, (found.sum(), 1))
        moved[:, 2:] = np.maximum(moved[:, 2:], moved[:, :2] + 1)  # a box, never inverted
        own = cls[found].copy()
        own[rng.random(own.size) < 0.1] = rng.integers(0, classes)  # some named wrongly
        invented_xy = rng.uniform([0, 0], [w - 60, h - 60], (3, 2))
        invented = np.concatenate([invented_xy, invented_xy + rng.uniform(10, 60, (3, 2))], 1)
        all_boxes = np.concatenate([moved, invented]).astype(np.float32)
        scores = np.concatenate([rng.uniform(0.3, 1.0, len(moved)), rng.uniform(0.001, 0.6, 3)]).astype(np.float32)
        order = np.argsort(-scores)
        detections.append(Detections(all_boxes[order], scores[order], np.concatenate([own, rng.integers(0, classes, 3)])[order]))
    return samples, detections


ULTRALYTICS = """
import json, os, sys
os.environ["YOLO_OFFLINE"] = "1"  # Ultralytics: never reach for the network
import numpy as np, torch
from ultralytics.engine.validator import BaseValidator
from ultralytics.utils.metrics import ap_per_class, box_iou

data = np.load(sys.argv[1])
validator = BaseValidator.__new__(BaseValidator)
validator.iouv = torch.linspace(0.5, 0.95, 10)
tp, conf, pred_cls, target_cls = [], [], [], []
for i in range(int(data["images"])):
    gt_boxes, gt_cls = data[f"gt_boxes{i}"], data[f"gt_cls{i}"]
    boxes, scores, cls = data[f"boxes{i}"], data[f"scores{i}"], data[f"cls{i}"]
    iou = box_iou(torch.as_tensor(gt_boxes), torch.as_tensor(boxes))
    tp.append(validator.match_predictions(torch.as_tensor(cls), torch.as_tensor(gt_cls), iou).numpy())
    conf.append(scores), pred_cls.append(cls), target_cls.append(gt_cls)
_, _, _, _, _, ap, unique, *_ = ap_per_class(*(np.concatenate(a) for a in (tp, conf, pred_cls, target_cls)))
print(json.dumps({"map50": float(ap[:, 0].mean()), "map50_95": float(ap.mean()),
                  "classes": {int(c): {"ap50": float(a[0]), "ap50_95": float(a.mean())} for c, a in zip(unique, ap)}}))
"""


def _ultralytics_map(samples, detections, tmp_path) -> dict:
    """``yolo val``'s matching and AP, in a process of its own: importing Ultralytics changes Pillow's
    openers for the process, which the other tests' refusals of damaged images would meet."""
    arrays = {"images": len(samples)}
    for i, (s, d) in enumerate(zip(samples, detections)):
        arrays |= {f"gt_boxes{i}": s.boxes, f"gt_cls{i}": s.classes, f"boxes{i}": d.boxes, f"scores{i}": d.scores,
                   f"cls{i}": d.classes}
    np.savez(tmp_path / "scene.npz", **arrays)
    proc = subprocess.run([sys.executable, "-c", ULTRALYTICS, str(tmp_path / "scene.npz")], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return dict(out, classes={int(c): ap for c, ap in out["classes"].items()})


@pytest.mark.parametrize("seed", [0, 1])
def test_coco_map_agrees_with_ultralytics_evaluation_within_half_a_point(seed, tmp_path):
    samples, detections = _scene(np.random.default_rng(seed), images=80, classes=3)
    ours, theirs = coco_map(samples, detections, per_class=True), _ultralytics_map(samples, detections, tmp_path)
    assert 0.3 <= ours["map50"] <= 0.95, ours  # a detector worth measuring: neither perfect nor blind
    for metric in ("map50", "map50_95"):
        assert abs(ours[metric] - theirs[metric]) <= 0.005, (metric, ours[metric], theirs[metric])
    assert set(ours["classes"]) == set(theirs["classes"]) == {0, 1, 2}
    for c, ap in ours["classes"].items():
        for metric in ("ap50", "ap50_95"):
            assert abs(ap[metric] - theirs["classes"][c][metric]) <= 0.005, (c, metric, ap[metric], theirs["classes"][c][metric])
    assert sum(ap["instances"] for ap in ours["classes"].values()) == sum(len(s.classes) for s in samples)
