"""Synthetic person scenes: stick-and-blob figures on textured backgrounds.

Everything here is procedural and seeded, so calibration, tests and training run offline.
A figure has a head, a torso and four limbs in a random pose, with its own skin, shirt and
trouser colours and scale; distractor shapes and occluders make the task non-trivial.
Boxes are the tight bounds of what was drawn, in pixels (xyxy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SKIN = [(255, 224, 189), (234, 192, 134), (198, 134, 66), (141, 85, 36), (92, 51, 23)]


@dataclass(frozen=True)
class Scene:
    image: np.ndarray  # (H, W, 3) uint8 RGB
    boxes: np.ndarray  # (K, 4) float32 xyxy in pixels
    classes: np.ndarray  # (K,) int64, 0 = person


def _background(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    from PIL import Image

    # smooth colour noise at a random scale, plus fine grain
    cells = int(rng.integers(2, 9))
    low = rng.integers(0, 256, size=(cells, cells, 3), dtype=np.uint8)
    base = np.asarray(Image.fromarray(low).resize((w, h), Image.BICUBIC), dtype=np.float32)
    grain = rng.normal(0, rng.uniform(2, 14), size=(h, w, 1))
    return np.clip(base * rng.uniform(0.5, 1.0) + grain, 0, 255).astype(np.uint8)


def _rand_colour(rng: np.random.Generator) -> tuple[int, int, int]:
    return tuple(int(c) for c in rng.integers(0, 256, size=3))


def _limb(draw, start, angle, length, width, colour) -> list[tuple[float, float]]:
    end = (start[0] + length * math.sin(angle), start[1] + length * math.cos(angle))
    draw.line([start, end], fill=colour, width=max(1, int(width)))
    r = width / 2
    return [(start[0] - r, start[1] - r), (start[0] + r, start[1] + r), (end[0] - r, end[1] - r), (end[0] + r, end[1] + r)]


def _person(draw, rng: np.random.Generator, cx: float, top: float, height: float) -> tuple[float, float, float, float]:
    """Draw one figure whose head starts at ``top``; return its tight box."""
    skin = SKIN[int(rng.integers(len(SKIN)))]
    shirt, trousers = _rand_colour(rng), _rand_colour(rng)
    head_r = height * 0.075
    torso_w, torso_h = height * rng.uniform(0.18, 0.26), height * 0.32
    limb_w = max(2.0, height * 0.06)
    pts: list[tuple[float, float]] = []
    # legs first so the torso covers the hip joints
    hip_y = top + 2 * head_r + height * 0.04 + torso_h
    leg_len = height - (hip_y - top) - limb_w / 2
    for side in (-1, 1):
        angle = side * rng.uniform(0.0, 0.45)
        pts += _limb(draw, (cx + side * torso_w * 0.25, hip_y - limb_w), angle, leg_len, limb_w * 1.2, trousers)
    neck_y = top + 2 * head_r + height * 0.04
    torso = [cx - torso_w / 2, neck_y, cx + torso_w / 2, neck_y + torso_h]
    draw.rounded_rectangle(torso, radius=torso_w * 0.2, fill=shirt)
    pts += [(torso[0], torso[1]), (torso[2], torso[3])]
    for side in (-1, 1):
        angle = side * rng.uniform(0.15, 2.6)
        pts += _limb(draw, (cx + side * torso_w * 0.45, neck_y + limb_w), angle, height * 0.33, limb_w, shirt if rng.random() < 0.5 else skin)
    head = [cx - head_r, top, cx + head_r, top + 2 * head_r]
    draw.ellipse(head, fill=skin)
    pts += [(head[0], head[1]), (head[2], head[3])]
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    return min(xs), min(ys), max(xs), max(ys)


def _distractor(draw, rng: np.random.Generator, h: int, w: int) -> None:
    x, y = rng.uniform(0, w), rng.uniform(0, h)
    s = rng.uniform(0.04, 0.25) * min(h, w)
    box = [x - s, y - s * rng.uniform(0.3, 1.5), x + s, y + s * rng.uniform(0.3, 1.5)]
    if rng.random() < 0.5:
        draw.rectangle(box, fill=_rand_colour(rng))
    else:
        draw.ellipse(box, fill=_rand_colour(rng))


def make_scene(rng: np.random.Generator, size: int = 320, max_people: int = 4) -> Scene:
    """One image with 0..max_people figures (at least one most of the time)."""
    from PIL import Image, ImageDraw

    img = Image.fromarray(_background(rng, size, size))
    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(0, 4))):
        _distractor(draw, rng, size, size)
    boxes = []
    n = int(rng.integers(1, max_people + 1)) if rng.random() < 0.92 else 0
    for _ in range(n):
        height = rng.uniform(0.18, 0.8) * size
        cx = rng.uniform(0.1, 0.9) * size
        top = rng.uniform(-0.05 * height, max(0.0, size - height))
        x1, y1, x2, y2 = _person(draw, rng, cx, top, height)
        box = np.clip([x1, y1, x2, y2], 0, size)
        if (box[2] - box[0]) > 4 and (box[3] - box[1]) > 8:
            boxes.append(box)
    # occluders: a small patch over part of a figure; the box stays the person's extent
    for _ in range(int(rng.integers(0, 2))):
        _distractor(draw, rng, size, size)
    arr = np.asarray(img, dtype=np.uint8).copy()
    b = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
    return Scene(arr, b, np.zeros(len(b), dtype=np.int64))


def sample_images(n: int, size: int, seed: int = 0) -> list[np.ndarray]:
    """``n`` seeded synthetic scenes, for calibration when the user gives no images."""
    rng = np.random.default_rng(seed)
    return [make_scene(rng, size).image for _ in range(n)]
