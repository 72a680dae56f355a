"""mAP@0.5 and mAP@0.5:0.95 through pycocotools' COCOeval, on original-image coordinates.

Predictions come from the shared decoder (``models.decode``) and are mapped back through
the letterbox, so the numbers are those a deployed model would score.
"""

from __future__ import annotations

import contextlib
import io

import numpy as np
import torch

from edgeport.models.decode import Detections, decode
from edgeport.models.preprocess import letterbox, to_input
from edgeport.train.data import Sample, load_rgb

EVAL_CONF = 0.001
EVAL_IOU = 0.6
EVAL_MAX_DET = 100


def coco_map(samples: list[Sample], detections: list[Detections]) -> dict[str, float]:
    """COCO mAP of ``detections`` (original-image xyxy) against the samples' boxes."""
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
    if not gt["annotations"]:
        return {"map50": float("nan"), "map50_95": float("nan")}
    if not dt:
        return {"map50": 0.0, "map50_95": 0.0}
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its tables
        coco_gt = COCO()
        coco_gt.dataset = gt
        coco_gt.createIndex()
        coco_dt = coco_gt.loadRes(dt)
        ev = COCOeval(coco_gt, coco_dt, "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return {"map50": float(ev.stats[1]), "map50_95": float(ev.stats[0])}


def model_outputs(model: torch.nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """Forward ``x`` on the model's own device; the outputs come back float32 on the CPU."""
    device = next(model.parameters()).device
    with torch.no_grad():
        return [o.detach().float().cpu() for o in model(x.to(device))]


def predict(model: torch.nn.Module, samples: list[Sample], imgsz: int, strides, *, batch: int = 16, images: list[np.ndarray] | None = None) -> list[Detections]:
    """Run ``model`` (on any device) on the samples' images, letterboxed; original-coordinate detections."""
    model.eval()
    results: list[Detections] = []
    for start in range(0, len(samples), batch):
        chunk = samples[start : start + batch]
        boxed = [letterbox(images[start + j] if images else load_rgb(s), imgsz) for j, s in enumerate(chunk)]
        x = torch.from_numpy(np.stack([to_input(b) for b, _ in boxed]))
        outs = [o.numpy() for o in model_outputs(model, x)]
        for dets, (_, lb) in zip(decode(outs, strides, conf_thres=EVAL_CONF, iou_thres=EVAL_IOU, max_det=EVAL_MAX_DET), boxed):
            results.append(Detections(lb.to_original(dets.boxes), dets.scores, dets.classes))
    return results


def evaluate(model: torch.nn.Module, samples: list[Sample], imgsz: int, strides, *, images: list[np.ndarray] | None = None) -> dict[str, float]:
    return coco_map(samples, predict(model, samples, imgsz, strides, images=images))


def evaluate_sharded(model: torch.nn.Module, samples: list[Sample], imgsz: int, strides, *, rank: int, world: int,
                     group=None) -> dict[str, float] | None:
    """Every rank predicts every ``world``-th image; rank 0 gathers them and scores the whole set.

    No rank waits idle while another evaluates alone (a long validation would otherwise trip
    the process group's timeout). Returns the scores on rank 0, None elsewhere.
    """
    import torch.distributed as dist

    mine = predict(model, samples[rank::world], imgsz, strides)
    if world == 1:
        return coco_map(samples, mine)
    gathered: list | None = [None] * world if rank == 0 else None
    dist.gather_object(mine, gathered, dst=0, group=group)
    if rank != 0:
        return None
    ordered = [gathered[i % world][i // world] for i in range(len(samples))]
    return coco_map(samples, ordered)
