"""Detector heads: which published output format a model's outputs follow, what each channel
means, and the decoder that turns them into boxes.

- ``pdet``: edgeport's detectors (``models/decode.py``): per level ``(N, 4+1+C, H, W)``,
  log-distances, objectness and class logits; needs the levels' strides.
- ``yolov8``: Ultralytics' export format for v8, 11 and the anchor-free v5u: one output
  ``(N, 4+nc, A)``, box centre x, y, width, height in input pixels, then class scores.
- ``yolov8-pose``: ``(N, 4+nc+K*D, A)``: the detection channels, then per keypoint x, y in
  input pixels (and a visibility score when D is 3); COCO's K=17, D=3 unless the model says.
- ``yolov8-seg``: ``(N, 4+nc+nm, A)`` -- the detection channels, then nm mask coefficients --
  and the prototypes ``(N, nm, H/4, W/4)`` as a second output.
- ``yolov8-obb``: oriented boxes, ``(N, 4+nc+1, A)``: box centre x, y, width, height in input
  pixels, class scores, then the box's angle in radians. Boxes are compared by the axis-aligned
  extent of the rotated box (the same decoder for PyTorch and every runtime; an approximation of
  Ultralytics' rotated NMS, which only the decoded boxes see). Auto-detected only where the model
  says it is oriented (its head's ``ne``): its shape is also a ``yolov8`` of one more class.
- ``yolov10``: the end-to-end (NMS-free) format: ``(N, K, 6)``, top-K rows of box x1, y1, x2,
  y2 in input pixels, score, class index.
- ``yolov5``: the anchor-based YOLOv5 export: ``(N, A, 5+nc)``, x, y, w, h in input pixels,
  objectness, class scores; score = objectness x class.
- ``classify``: ``(N, C)`` logits.
- ``raw``: no decoder; tensor parity, per output and per channel.

Each head names its channel groups (``Group``): values on different scales (box pixels against
scores) are compared, and given int8 scales, group by group. ``resolve_head`` picks the head.
Written from the formats as Ultralytics documents them; no Ultralytics code is used.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from edgeport.cliargs import whole_number
from edgeport.errors import BadInputError
from edgeport.models.decode import DETECT, DecodeProtocol, Detections, decode, select

HEADS = ("pdet", "yolov8", "yolov8-pose", "yolov8-seg", "yolov8-obb", "yolov10", "yolov5", "classify", "raw")
# the keypoints a pose head carries unless the model says otherwise (COCO's 17, with visibility)
COCO_KEYPOINTS = (17, 3)
MAX_TOPK = 1000  # an end-to-end head keeps at most this many rows (YOLOv10's max_det: 300)

# what a group's values are, for the int8 scale it gets (convert/converters/int8_groups.py)
PIXELS = "pixels"  # input pixels: divided by the input size
UNIT = "unit"  # a score in 0..1
FREE = "free"  # anything else: logits, distances, coefficients, class indices


@dataclass(frozen=True)
class Group:
    """Channels of one output that mean one thing, on one scale."""

    name: str
    axis: int
    channels: tuple[int, ...]
    kind: str = FREE
    index: bool = False  # values are indices (a class id), not measures: a change within a tolerance means nothing there

    def take(self, x: np.ndarray) -> np.ndarray:
        return np.take(x, list(self.channels), axis=self.axis)


@dataclass(frozen=True)
class Hints:
    """What a model says of its own head (duck-typed, any framework). Shapes still decide; hints
    only choose between heads the shapes admit."""

    nc: int | None = None
    kpt_shape: tuple[int, int] | None = None
    nm: int | None = None
    end2end: bool = False
    anchor_based: bool = False
    oriented: bool = False  # the head adds an angle per box (Ultralytics' OBB: ``ne`` extra channels)


def head_hints(module) -> Hints:
    """The hints of the last module that names its class count (``nc``): a detection head's."""
    def whole(v) -> bool:
        return whole_number(v, 1)

    for m in reversed(list(module.modules())):
        nc = getattr(m, "nc", None)
        if not whole(nc):
            continue
        kpt = getattr(m, "kpt_shape", None)
        kpt = tuple(int(v) for v in kpt) if isinstance(kpt, (tuple, list)) and len(kpt) == 2 and all(whole(v) for v in kpt) else None
        nm = getattr(m, "nm", None)
        return Hints(nc=nc, kpt_shape=kpt, nm=nm if whole(nm) else None, end2end=getattr(m, "end2end", False) is True,
                     anchor_based=hasattr(m, "anchors") and whole(getattr(m, "na", None)),
                     oriented=getattr(m, "ne", None) == 1 and not isinstance(getattr(m, "ne", None), bool))
    return Hints()


def _xywh_to_xyxy(b: np.ndarray) -> np.ndarray:
    half = b[:, 2:4] / 2
    return np.concatenate([b[:, :2] - half, b[:, :2] + half], axis=1)


def _span(start: int, stop: int) -> tuple[int, ...]:
    return tuple(range(start, stop))


@dataclass(frozen=True)
class Head:
    """A head as resolved for one model: its format and its sizes."""

    name: str
    nc: int | None = None
    kpt_shape: tuple[int, int] | None = None
    nm: int | None = None
    strides: tuple[int, ...] = field(default=())

    def describe(self) -> str:
        parts = [f"{self.nc} class{'es' if self.nc != 1 else ''}"] if self.nc is not None else []
        if self.kpt_shape:
            parts.append(f"{self.kpt_shape[0]} keypoints x {self.kpt_shape[1]}")
        if self.nm:
            parts.append(f"{self.nm} mask coefficients")
        return self.name + (f" ({', '.join(parts)})" if parts else "")

    def groups(self, k: int, shape: tuple[int, ...]) -> list[Group]:
        """The channel groups of output ``k`` (of ``shape``)."""
        nc = self.nc or 0
        if self.name in ("yolov8", "yolov8-pose", "yolov8-seg") and k == 0:
            out = [Group("boxes", 1, _span(0, 4), PIXELS), Group("scores", 1, _span(4, 4 + nc), UNIT)]
            if self.name == "yolov8-pose":
                kpts, dims = self.kpt_shape
                base = 4 + nc
                out.append(Group("keypoints", 1, tuple(base + dims * i + j for i in range(kpts) for j in (0, 1)), PIXELS))
                if dims == 3:
                    out.append(Group("visibility", 1, tuple(base + dims * i + 2 for i in range(kpts)), UNIT))
            if self.name == "yolov8-seg":
                out.append(Group("masks", 1, _span(4 + nc, shape[1]), FREE))
            return out
        if self.name == "yolov8-obb" and k == 0:
            return [Group("boxes", 1, _span(0, 4), PIXELS), Group("scores", 1, _span(4, 4 + nc), UNIT),
                    Group("angle", 1, (4 + nc,), FREE)]
        if self.name == "yolov8-seg" and k == 1:
            return [Group("prototypes", 1, _span(0, shape[1]), FREE)]
        if self.name == "yolov10":
            return [Group("boxes", 2, _span(0, 4), PIXELS), Group("scores", 2, (4,), UNIT), Group("classes", 2, (5,), FREE, index=True)]
        if self.name == "yolov5":
            return [Group("boxes", 2, _span(0, 4), PIXELS), Group("objectness", 2, (4,), UNIT),
                    Group("scores", 2, _span(5, shape[2]), UNIT)]
        if self.name == "pdet":
            return [Group("distances", 1, _span(0, 4)), Group("objectness", 1, (4,)), Group("classes", 1, _span(5, shape[1]))]
        if self.name == "classify":
            return [Group("logits", 1, _span(0, shape[1]))]
        return []

    @property
    def unordered_rows(self) -> bool:
        """Whether the output's rows are a set (an end-to-end head's top-k), not a sequence."""
        return self.name == "yolov10"

    def channel_axis(self, k: int, shape: tuple[int, ...]) -> int | None:
        """The axis along which output ``k``'s channels lie (each compared on its own), or None."""
        groups = self.groups(k, shape)
        if groups:
            return groups[0].axis
        if len(shape) in (2, 4):
            return 1  # (N, C) and NCHW
        if len(shape) == 3:
            return 1 if shape[1] <= shape[2] else 2  # channels are the shorter axis: (N, C, A) or (N, A, C)
        return None

    def anchors(self, outputs: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]] | None:
        """Per image, every anchor's box (xyxy, input pixels) and its best score, before any NMS, in
        the outputs' anchor order: the heads that hold one box an anchor (pdet, yolov8 and its pose
        and seg forms, yolov5); None for the others."""
        if self.name == "pdet":
            from edgeport.models.decode import decode_level

            out = []
            for n in range(outputs[0].shape[0]):
                boxes, scores = zip(*(decode_level(o[n], s) for o, s in zip(outputs, self.strides)))
                out.append((np.concatenate(boxes), np.concatenate(scores).max(axis=1)))
            return out
        if self.name in ("yolov8", "yolov8-pose", "yolov8-seg"):
            return [(_xywh_to_xyxy(o[:4].T.astype(np.float32)), o[4:4 + self.nc].max(axis=0).astype(np.float32)) for o in outputs[0]]
        if self.name == "yolov5":
            return [(_xywh_to_xyxy(o[:, :4].astype(np.float32)), (o[:, 4:5] * o[:, 5:]).max(axis=1).astype(np.float32))
                    for o in outputs[0]]
        return None

    def decode(self, outputs: list[np.ndarray], protocol: DecodeProtocol = DETECT) -> list[Detections] | None:
        """Per-image detections; None for heads without boxes (classify, raw)."""
        if self.name == "pdet":
            return decode(outputs, self.strides, protocol)
        if self.name in ("yolov8", "yolov8-pose", "yolov8-seg"):
            out, nc = outputs[0], self.nc
            return [select(_xywh_to_xyxy(o[:4].T.astype(np.float32)), o[4:4 + nc].T.astype(np.float32), protocol) for o in out]
        if self.name == "yolov8-obb":
            out, nc = outputs[0], self.nc
            return [select(_rotated_extent(o[:4].T.astype(np.float32), o[4 + nc].astype(np.float32)),
                           o[4:4 + nc].T.astype(np.float32), protocol) for o in out]
        if self.name == "yolov5":
            (out,) = outputs
            return [select(_xywh_to_xyxy(o[:, :4].astype(np.float32)), (o[:, 4:5] * o[:, 5:]).astype(np.float32), protocol)
                    for o in out]
        if self.name == "yolov10":
            (out,) = outputs
            return [_topk_rows(o, protocol) for o in out]
        return None


def _rotated_extent(b: np.ndarray, angle: np.ndarray) -> np.ndarray:
    """xyxy of the axis-aligned box around each rotated box (centre x, y, width, height; angle in radians)."""
    c, s = np.abs(np.cos(angle)), np.abs(np.sin(angle))
    hw = (b[:, 2] * c + b[:, 3] * s) / 2
    hh = (b[:, 2] * s + b[:, 3] * c) / 2
    return np.stack([b[:, 0] - hw, b[:, 1] - hh, b[:, 0] + hw, b[:, 1] + hh], axis=1).astype(np.float32)


def _topk_rows(rows: np.ndarray, protocol: DecodeProtocol) -> Detections:
    """End-to-end rows (x1, y1, x2, y2, score, class): the model has done the NMS; keep the confident ones."""
    keep = rows[:, 4] > protocol.conf_thres
    kept = rows[keep][: protocol.max_det]
    return Detections(kept[:, :4].astype(np.float32), kept[:, 4].astype(np.float32), np.rint(kept[:, 5]).astype(np.int64))


def _fits(name: str, shapes: list[tuple[int, ...]], strides, hints: Hints) -> list[Head]:
    """The heads called ``name`` that ``shapes`` admit (several sizes may fit one format)."""
    one3 = len(shapes) == 1 and len(shapes[0]) == 3
    if name == "pdet":
        ok = bool(strides) and len(strides) == len(shapes) and all(len(s) == 4 and s[1] >= 6 for s in shapes)
        return [Head("pdet", nc=shapes[0][1] - 5, strides=tuple(strides))] if ok else []
    if name == "yolov8" and one3:
        _, c, a = shapes[0]
        return [Head("yolov8", nc=c - 4)] if 5 <= c < a else []
    if name == "yolov8-pose" and one3:
        _, c, a = shapes[0]
        kpt = hints.kpt_shape or COCO_KEYPOINTS
        nc = c - 4 - kpt[0] * kpt[1]
        return [Head("yolov8-pose", nc=nc, kpt_shape=kpt)] if nc >= 1 and c < a and kpt[1] in (2, 3) else []
    if name == "yolov8-obb" and one3:
        _, c, a = shapes[0]
        return [Head("yolov8-obb", nc=c - 5)] if 6 <= c < a else []
    if name == "yolov8-seg" and len(shapes) == 2 and len(shapes[0]) == 3 and len(shapes[1]) == 4:
        (_, c, a), (_, nm, _, _) = shapes
        nc = c - 4 - nm
        return [Head("yolov8-seg", nc=nc, nm=nm)] if nc >= 1 and c < a else []
    if name == "yolov10" and one3:
        _, rows, d = shapes[0]
        return [Head("yolov10", nc=hints.nc)] if d == 6 and rows <= MAX_TOPK else []
    if name == "yolov5" and one3:
        _, a, c = shapes[0]
        return [Head("yolov5", nc=c - 5)] if 6 <= c < a else []
    if name == "classify":
        return [Head("classify", nc=shapes[0][1])] if len(shapes) == 1 and len(shapes[0]) == 2 and shapes[0][1] >= 2 else []
    if name == "raw":
        return [Head("raw")]
    return []


def _agrees(head: Head, hints: Hints) -> bool:
    """Whether a fitting head is the one the model says it has."""
    if hints.nc is not None and head.nc is not None and head.name != "classify" and head.nc != hints.nc:
        return False
    if hints.kpt_shape is not None:
        return head.name == "yolov8-pose"
    if hints.nm is not None:
        return head.name == "yolov8-seg"
    if hints.oriented:
        return head.name == "yolov8-obb"
    if head.name == "yolov8-obb":
        return False  # its shape is a yolov8's of one more class: only the model's word tells them apart
    if hints.end2end:
        return head.name == "yolov10"
    if hints.anchor_based:
        return head.name == "yolov5"
    return True


EXPECTED = {"pdet": "per-level (N, 4+1+C, H, W) outputs with the model's strides", "yolov8": "one (N, 4+nc, A) output",
            "yolov8-pose": "one (N, 4+nc+K*D, A) output (K keypoints of D values; 17 x 3 unless the model says)",
            "yolov8-seg": "a (N, 4+nc+nm, A) output and (N, nm, H, W) prototypes",
            "yolov8-obb": "one (N, 4+nc+1, A) output (boxes, class scores, angle)", "yolov10": "one (N, K, 6) output (K <= 1000)",
            "yolov5": "one (N, A, 5+nc) output", "classify": "one (N, C) output of logits"}


def resolve_head(head: str | None, shapes: list[tuple[int, ...]], strides=(), hints: Hints | None = None) -> Head:
    """``auto``/None -> the one head the output shapes (and the model's hints) admit: ``raw`` when
    none does; a one-line question naming the candidates when several do. A named head must fit."""
    hints = hints or Hints()
    shapes = [tuple(int(v) for v in s) for s in shapes]
    if head in (None, "auto"):
        fitting = [h for name in HEADS[:-1] for h in _fits(name, shapes, strides, hints)]
        agreeing = [h for h in fitting if _agrees(h, hints)]
        if len(agreeing) == 1:
            return agreeing[0]
        if len(agreeing) > 1:
            raise BadInputError(f"the model's outputs {shapes} fit several heads: {'; '.join(h.describe() for h in agreeing)}; "
                                f"pass --head with the one it has ({', '.join(HEADS)})")
        return Head("raw")
    if head not in HEADS:
        raise BadInputError(f"--head {head!r} is not one of auto, {', '.join(HEADS)}")
    fitting = _fits(head, shapes, strides, hints)
    if not fitting:
        raise BadInputError(f"--head {head} expects {EXPECTED[head]}; the model's outputs are {shapes}: "
                            f"pass another --head, or raw for tensor parity only")
    return fitting[0]

