"""Training targets for the anchor-free head, and the detection loss.

Assignment (FCOS-style, deterministic): a box goes to the level whose stride ``s`` has
``max_side < 8 * s`` (the last level takes the rest); on that level, the cells whose centre
lies inside the box and within 2.5 strides of its centre are positives (a box too small
to hold a cell centre takes its centre cell). A cell claimed by two boxes keeps the
smaller one.

The loss is computed per image and normalised by that image's own positives, so the loss
of a batch is a sum of per-image terms: that is what makes gradient accumulation and DDP
give exactly the update of one step on the joint batch.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

CENTER_RADIUS = 2.5
BOX_WEIGHT = 2.0
LOG_CLIP = 8.0  # same clip as models.decode


def assign_level(max_side: float, strides: tuple[int, ...]) -> int:
    for i, s in enumerate(strides[:-1]):
        if max_side < 8 * s:
            return i
    return len(strides) - 1


def build_targets(boxes: np.ndarray, classes: np.ndarray, imgsz: int, strides: tuple[int, ...]) -> list[dict]:
    """Per level: ``pos`` (H, W) bool, ``ltrb`` (4, H, W) distances in strides, ``cls`` (H, W) int64 (-1 = none)."""
    levels = []
    for s in strides:
        h = w = imgsz // s
        levels.append(
            {
                "pos": np.zeros((h, w), bool),
                "ltrb": np.zeros((4, h, w), np.float32),
                "cls": np.full((h, w), -1, np.int64),
                "area": np.full((h, w), np.inf, np.float32),
            }
        )
    for box, cls in zip(boxes, classes):
        x1, y1, x2, y2 = (float(v) for v in box)
        bw, bh = x2 - x1, y2 - y1
        if bw <= 0 or bh <= 0:
            continue
        li = assign_level(max(bw, bh), strides)
        s, lv = strides[li], levels[li]
        h, w = lv["pos"].shape
        ys, xs = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
        cx, cy = (xs + 0.5) * s, (ys + 0.5) * s
        bcx, bcy = (x1 + x2) / 2, (y1 + y2) / 2
        inside = (cx > x1) & (cx < x2) & (cy > y1) & (cy < y2)
        near = (np.abs(cx - bcx) <= CENTER_RADIUS * s) & (np.abs(cy - bcy) <= CENTER_RADIUS * s)
        mask = inside & near
        if not mask.any():
            gy, gx = min(int(bcy // s), h - 1), min(int(bcx // s), w - 1)
            mask = np.zeros_like(mask)
            mask[gy, gx] = True
        area = bw * bh
        mask &= area < lv["area"]
        lv["area"][mask] = area
        lv["pos"][mask] = True
        lv["cls"][mask] = int(cls)
        # distances from the cell centre, at least a tenth of a stride (a centre cell may sit outside a tiny box)
        for k, d in enumerate((cx - x1, cy - y1, x2 - cx, y2 - cy)):
            lv["ltrb"][k][mask] = np.maximum(d[mask] / s, 0.1)
    for lv in levels:
        del lv["area"]
    return levels


def collate_targets(per_image: list[list[dict]]) -> list[dict[str, torch.Tensor]]:
    out = []
    for level in range(len(per_image[0])):
        out.append({k: torch.from_numpy(np.stack([img[level][k] for img in per_image])) for k in ("pos", "ltrb", "cls")})
    return out


def _giou(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """GIoU of boxes given as (l, t, r, b) distances from the same point: ``(P, 4)`` each."""
    pl, pt, pr, pb = pred.unbind(-1)
    tl, tt, tr, tb = target.unbind(-1)
    area_p = (pl + pr) * (pt + pb)
    area_t = (tl + tr) * (tt + tb)
    inter = (torch.minimum(pl, tl) + torch.minimum(pr, tr)) * (torch.minimum(pt, tt) + torch.minimum(pb, tb))
    union = area_p + area_t - inter
    enclose = (torch.maximum(pl, tl) + torch.maximum(pr, tr)) * (torch.maximum(pt, tt) + torch.maximum(pb, tb))
    iou = inter / union.clamp_min(1e-9)
    return iou - (enclose - union) / enclose.clamp_min(1e-9)


def detection_loss(outputs: list[torch.Tensor], targets: list[dict[str, torch.Tensor]]) -> tuple[torch.Tensor, dict]:
    """Per-image losses ``(N,)`` and their parts summed over the batch (for logging).

    Dense over every cell, masked by the positives, then reduced per image: no ``index_add``/scatter
    (atomic on CUDA), so the loss is deterministic there. Float32 under AMP, float64 with ``--float64``.
    """
    device = outputs[0].device
    dtype = torch.promote_types(outputs[0].dtype, torch.float32)
    num_pos = sum(t["pos"].flatten(1).sum(1) for t in targets).clamp_min(1).to(device=device, dtype=dtype)
    obj_l = cls_l = box_l = torch.zeros(outputs[0].shape[0], dtype=dtype, device=device)
    for out, t in zip(outputs, targets):
        out = out.to(dtype)
        pos = t["pos"].to(device)
        posf = pos.to(out.dtype)
        obj_l = obj_l + F.binary_cross_entropy_with_logits(out[:, 4], posf, reduction="none").flatten(1).sum(1)
        # classes: one-hot of the assigned class (cells with none hold -1 and are masked out)
        cls_target = F.one_hot(t["cls"].to(device).clamp_min(0), out.shape[1] - 5).permute(0, 3, 1, 2).to(out.dtype)
        cls_map = F.binary_cross_entropy_with_logits(out[:, 5:], cls_target, reduction="none").sum(1)
        cls_l = cls_l + torch.where(pos, cls_map, torch.zeros_like(cls_map)).flatten(1).sum(1)
        dist = torch.exp(out[:, :4].clamp(-LOG_CLIP, LOG_CLIP)).permute(0, 2, 3, 1)  # (N, H, W, 4)
        ltrb = t["ltrb"].to(device=device, dtype=out.dtype).permute(0, 2, 3, 1)
        giou_loss = 1.0 - _giou(dist, ltrb)  # finite everywhere: predicted boxes have positive area
        box_l = box_l + torch.where(pos, giou_loss, torch.zeros_like(giou_loss)).flatten(1).sum(1)
    per_image = (obj_l + cls_l + BOX_WEIGHT * box_l) / num_pos
    with torch.no_grad():
        parts = {"obj": (obj_l / num_pos).sum(), "cls": (cls_l / num_pos).sum(), "box": (box_l / num_pos).sum()}
    return per_image, parts
