"""The one decoder + NMS that every runtime's raw outputs go through (NumPy only).

Raw output per level: ``(N, 4 + 1 + C, H, W)``. Channels 0-3 are log-distances from the
cell centre to the left, top, right and bottom box edges in units of the stride; 4 is the
objectness logit; 5.. are class logits. Score = sigmoid(obj) * sigmoid(cls).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Box distances are exp(raw) * stride; clipping keeps a wild int8 value from overflowing.
LOG_DIST_CLIP = 8.0


@dataclass(frozen=True)
class DecodeProtocol:
    """Thresholds that turn raw outputs into boxes."""

    name: str
    conf_thres: float
    iou_thres: float
    max_det: int


# What a deployed detector keeps: the boxes compared between PyTorch and each runtime.
DETECT = DecodeProtocol("detect", conf_thres=0.25, iou_thres=0.5, max_det=100)
# Every candidate, as COCO scores it: mAP@0.5 and mAP@0.5:0.95, in training and validation alike.
COCO_EVAL = DecodeProtocol("coco-eval", conf_thres=0.001, iou_thres=0.6, max_det=100)


@dataclass(frozen=True)
class Detections:
    """Detections for one image, in input pixels (xyxy)."""

    boxes: np.ndarray  # (K, 4) float32
    scores: np.ndarray  # (K,) float32
    classes: np.ndarray  # (K,) int64

    def __len__(self) -> int:
        return int(self.scores.shape[0])


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # overflow-free logistic


def decode_level(raw: np.ndarray, stride: int) -> tuple[np.ndarray, np.ndarray]:
    """One level, one image: ``(4+1+C, H, W)`` -> boxes ``(H*W, 4)``, class scores ``(H*W, C)``."""
    _, h, w = raw.shape
    ys, xs = np.meshgrid(np.arange(h, dtype=np.float32), np.arange(w, dtype=np.float32), indexing="ij")
    cx, cy = (xs + 0.5) * stride, (ys + 0.5) * stride
    dist = np.exp(np.clip(raw[:4].astype(np.float32), -LOG_DIST_CLIP, LOG_DIST_CLIP)) * stride
    boxes = np.stack([cx - dist[0], cy - dist[1], cx + dist[2], cy + dist[3]], axis=-1).reshape(-1, 4)
    obj = _sigmoid(raw[4].astype(np.float32)).reshape(-1, 1)
    cls = _sigmoid(raw[5:].astype(np.float32)).reshape(raw.shape[0] - 5, -1).T
    return boxes, obj * cls


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU matrix between ``(A, 4)`` and ``(B, 4)`` xyxy boxes."""
    tl = np.maximum(a[:, None, :2], b[None, :, :2])
    br = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(br - tl, 0, None), axis=-1)
    area_a = np.prod(np.clip(a[:, 2:] - a[:, :2], 0, None), axis=-1)
    area_b = np.prod(np.clip(b[:, 2:] - b[:, :2], 0, None), axis=-1)
    return inter / np.maximum(area_a[:, None] + area_b[None, :] - inter, 1e-9)


def nms(boxes: np.ndarray, scores: np.ndarray, iou_thres: float, max_det: int | None = None) -> np.ndarray:
    """Greedy non-maximum suppression; returns kept indices, highest score first: the first
    ``max_det`` of them where given (the same as keeping them all and cutting, since each box
    kept depends only on those kept before it).

    Each kept box's IoU with the boxes left is ``box_iou``'s arithmetic, operation for operation,
    on the coordinates taken apart once (four columns and the areas): the same values, without
    a reduction over a pair per box (parity's noise floor runs this on 2,000 candidates a few
    hundred times; docs/measured.md)."""
    order = np.argsort(-scores, kind="stable")
    if iou_thres >= 1.0:
        # no IoU exceeds 1, so nothing is suppressed (the noise floor's case): skip the loop's all-pairs comparison
        return order[:max_det].astype(np.int64)
    x1, y1, x2, y2 = (np.ascontiguousarray(c) for c in boxes[order].T)
    area = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    left = np.arange(len(order))  # positions in ``order`` not yet kept or suppressed
    keep: list[int] = []
    # a trained head has thousands of candidates over the threshold: stop at the cut (docs/measured.md)
    while left.size and (max_det is None or len(keep) < max_det):
        i, left = left[0], left[1:]
        keep.append(i)
        w = np.clip(np.minimum(x2[i], x2[left]) - np.maximum(x1[i], x1[left]), 0, None)
        h = np.clip(np.minimum(y2[i], y2[left]) - np.maximum(y1[i], y1[left]), 0, None)
        inter = w * h
        left = left[inter / np.maximum(area[i] + area[left] - inter, 1e-9) <= iou_thres]
    return order[np.asarray(keep, dtype=np.int64)].astype(np.int64)


def select(boxes: np.ndarray, scores: np.ndarray, protocol: DecodeProtocol) -> Detections:
    """Candidates of one image -- boxes ``(A, 4)`` xyxy and class scores ``(A, C)`` -- to the
    detections ``protocol`` keeps: every (box, class) over the threshold, class-aware NMS."""
    idx, cls = np.nonzero(scores > protocol.conf_thres)
    b, s = boxes[idx], scores[idx, cls]
    # Class-aware NMS by offsetting each class into its own coordinate range.
    offset = cls[:, None].astype(np.float32) * (np.abs(boxes).max(initial=1.0) + 1.0) * 2
    keep = nms(b + offset, s, protocol.iou_thres, protocol.max_det)
    return Detections(b[keep].astype(np.float32), s[keep].astype(np.float32), cls[keep].astype(np.int64))


def decode(
    outputs: list[np.ndarray],
    strides: tuple[int, ...] | list[int],
    protocol: DecodeProtocol = DETECT,
) -> list[Detections]:
    """Raw per-level outputs (NCHW float) -> per-image class-aware NMS'd detections."""
    if len(outputs) != len(strides):
        raise ValueError(f"{len(outputs)} outputs but {len(strides)} strides")
    results = []
    for n in range(outputs[0].shape[0]):
        level_boxes, level_scores = zip(*(decode_level(o[n], s) for o, s in zip(outputs, strides)))
        results.append(select(np.concatenate(level_boxes), np.concatenate(level_scores), protocol))
    return results
