"""The trainer's evaluation: predictions on any device, scored by ``validate.metrics.coco_map``.

Predictions come from the shared decoder (``models.decode``, the ``COCO_EVAL`` protocol, as
``edgeport validate`` scores mAP) and are mapped back through the letterbox, so the numbers
are those a deployed model would score.
"""

from __future__ import annotations

import numpy as np
import torch

from edgeport.models.decode import COCO_EVAL, Detections, decode
from edgeport.models.preprocess import letterbox, load_image, to_input
from edgeport.validate.datasets import Sample
from edgeport.validate.metrics import coco_map


def model_outputs(model: torch.nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """Forward ``x`` on the model's own device and dtype; the outputs come back float32 on the CPU."""
    p = next(model.parameters())
    with torch.no_grad():
        return [o.detach().float().cpu() for o in model(x.to(p.device, p.dtype))]


def predict(model: torch.nn.Module, samples: list[Sample], imgsz: int, strides, *, batch: int = 16) -> list[Detections]:
    """Run ``model`` (on any device) on the samples' images, letterboxed; original-coordinate detections."""
    model.eval()
    results: list[Detections] = []
    for start in range(0, len(samples), batch):
        chunk = samples[start : start + batch]
        boxed = [letterbox(load_image(s.image), imgsz) for s in chunk]
        x = torch.from_numpy(np.stack([to_input(b) for b, _ in boxed]))
        outs = [o.numpy() for o in model_outputs(model, x)]
        for dets, (_, lb) in zip(decode(outs, strides, COCO_EVAL), boxed):
            results.append(Detections(lb.to_original(dets.boxes), dets.scores, dets.classes))
    return results


def evaluate_sharded(model: torch.nn.Module, samples: list[Sample], imgsz: int, strides, *, rank: int,
                     world: int) -> dict[str, float] | None:
    """Every rank predicts every ``world``-th image, so none waits idle while another evaluates alone
    (a long validation would trip the process group's timeout); rank 0 scores the whole set, the
    others return None."""
    import torch.distributed as dist

    mine = predict(model, samples[rank::world], imgsz, strides)
    if world == 1:
        return coco_map(samples, mine)
    gathered: list | None = [None] * world if rank == 0 else None
    dist.gather_object(mine, gathered, dst=0)
    if rank != 0:
        return None
    ordered = [gathered[i % world][i // world] for i in range(len(samples))]
    return coco_map(samples, ordered)
