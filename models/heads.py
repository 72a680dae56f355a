"""Detector heads: which published output format a model's outputs follow, and its decoder.

- ``pdet``: edgeport's detectors (``models/decode.py``): per level ``(N, 4+1+C, H, W)``,
  log-distances, objectness and class logits; needs the levels' strides.
- ``yolov8``: Ultralytics' export format for v8, 11 and the anchor-free v5u: one output
  ``(N, 4+nc, A)``, box centre x, y, width, height in input pixels, then the class scores
  (sigmoid applied).
- ``yolov5``: the anchor-based YOLOv5 export: ``(N, A, 5+nc)``, x, y, w, h in input
  pixels, objectness, class scores (sigmoids applied); score = objectness x class.
- ``raw``: no decoder; tensor parity only.

Written from the formats as Ultralytics documents them; no Ultralytics code is used.
``auto`` picks the head the output shapes admit unambiguously, else ``raw``.
"""

from __future__ import annotations

import numpy as np

from edgeport.errors import BadInputError
from edgeport.models.decode import DETECT, DecodeProtocol, Detections, decode, select

HEADS = ("pdet", "yolov8", "yolov5", "raw")


def _xywh_to_xyxy(b: np.ndarray) -> np.ndarray:
    half = b[:, 2:4] / 2
    return np.concatenate([b[:, :2] - half, b[:, :2] + half], axis=1)


def _fits(head: str, shapes: list[tuple[int, ...]], strides) -> bool:
    if head == "pdet":
        return bool(strides) and len(strides) == len(shapes) and all(len(s) == 4 and s[1] >= 6 for s in shapes)
    if head in ("yolov8", "yolov5"):
        if len(shapes) != 1 or len(shapes[0]) != 3:
            return False
        _, a, b = shapes[0]
        return 5 <= a < b if head == "yolov8" else 6 <= b < a
    return head == "raw"


def resolve_head(head: str | None, shapes: list[tuple[int, ...]], strides=()) -> str:
    """``auto``/None -> the one head the output shapes fit (``raw`` when none or several do);
    a named head must fit them, or the user hears which shapes it expects."""
    if head in (None, "auto"):
        fitting = [h for h in HEADS[:-1] if _fits(h, shapes, strides)]
        return fitting[0] if len(fitting) == 1 else "raw"
    if head not in HEADS:
        raise BadInputError(f"--head {head!r} is not one of auto, {', '.join(HEADS)}")
    if not _fits(head, shapes, strides):
        expected = {"pdet": "per-level (N, 4+1+C, H, W) outputs with the model's strides", "yolov8": "one (N, 4+nc, A) output",
                    "yolov5": "one (N, A, 5+nc) output"}[head]
        raise BadInputError(f"--head {head} expects {expected}; the model's outputs are {[tuple(s) for s in shapes]}: "
                            f"pass another --head, or raw for tensor parity only")
    return head


def decode_head(head: str, outputs: list[np.ndarray], strides=(), protocol: DecodeProtocol = DETECT) -> list[Detections] | None:
    """Per-image detections by ``head``'s format; None for ``raw``."""
    if head == "pdet":
        return decode(outputs, strides, protocol)
    if head == "yolov8":
        (out,) = outputs
        return [select(_xywh_to_xyxy(o[:4].T.astype(np.float32)), o[4:].T.astype(np.float32), protocol) for o in out]
    if head == "yolov5":
        (out,) = outputs
        return [select(_xywh_to_xyxy(o[:, :4].astype(np.float32)), (o[:, 4:5] * o[:, 5:]).astype(np.float32), protocol)
                for o in out]
    return None


def channel_groups(head: str, shape: tuple[int, ...]) -> list[tuple[str, slice, int]]:
    """Named channel groups of one output whose values live on different scales (box pixels
    against scores): (name, slice, axis). Metrics and int8 scales are per group."""
    if head == "yolov8" and len(shape) == 3:
        return [("boxes", slice(0, 4), 1), ("scores", slice(4, shape[1]), 1)]
    if head == "yolov5" and len(shape) == 3:
        return [("boxes", slice(0, 4), 2), ("scores", slice(4, shape[2]), 2)]
    return []
