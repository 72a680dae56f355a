"""The training dataset: letterbox like ``models.preprocess``, augment, build targets.

Augmentation (horizontal flip, scale jitter, colour) draws from a generator seeded by
(seed, epoch, index), never from global state: the same epoch gives the same images on
any rank and after ``--resume``. ``augment=False`` gives exactly the deployment letterbox.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from edgeport.models.preprocess import PAD_VALUE, letterbox, load_image, to_input
from edgeport.train.targets import build_targets, collate_targets
from edgeport.validate.datasets import Sample

MIN_BOX_PX = 2.0


@dataclass(frozen=True)
class AugmentConfig:
    flip: float = 0.5
    scale: tuple[float, float] = (0.7, 1.3)
    brightness: float = 0.3
    contrast: float = 0.3
    saturation: float = 0.4


def _place(image: np.ndarray, boxes: np.ndarray, imgsz: int, rng: np.random.Generator, aug: AugmentConfig):
    from PIL import Image

    h, w = image.shape[:2]
    scale = min(imgsz / h, imgsz / w) * rng.uniform(*aug.scale)
    nh, nw = max(1, round(h * scale)), max(1, round(w * scale))
    resized = np.asarray(Image.fromarray(image).resize((nw, nh), Image.BILINEAR))
    ox = int(rng.integers(min(0, imgsz - nw), max(0, imgsz - nw) + 1))
    oy = int(rng.integers(min(0, imgsz - nh), max(0, imgsz - nh) + 1))
    canvas = np.full((imgsz, imgsz, 3), PAD_VALUE, np.uint8)
    sx0, sy0 = max(0, -ox), max(0, -oy)
    dx0, dy0 = max(0, ox), max(0, oy)
    cw, ch = min(nw - sx0, imgsz - dx0), min(nh - sy0, imgsz - dy0)
    canvas[dy0 : dy0 + ch, dx0 : dx0 + cw] = resized[sy0 : sy0 + ch, sx0 : sx0 + cw]
    b = boxes * scale + np.array([ox, oy, ox, oy], np.float32)
    return canvas, b


def _colour(image: np.ndarray, rng: np.random.Generator, aug: AugmentConfig) -> np.ndarray:
    x = image.astype(np.float32)
    x = x * rng.uniform(1 - aug.brightness, 1 + aug.brightness)
    mean = x.mean()
    x = (x - mean) * rng.uniform(1 - aug.contrast, 1 + aug.contrast) + mean
    grey = x.mean(axis=2, keepdims=True)
    x = (x - grey) * rng.uniform(1 - aug.saturation, 1 + aug.saturation) + grey
    return np.clip(x, 0, 255).astype(np.uint8)


def clip_boxes(boxes: np.ndarray, classes: np.ndarray, imgsz: int) -> tuple[np.ndarray, np.ndarray]:
    if len(boxes) == 0:
        return boxes, classes
    clipped = np.clip(boxes, 0, imgsz)
    keep = ((clipped[:, 2] - clipped[:, 0]) >= MIN_BOX_PX) & ((clipped[:, 3] - clipped[:, 1]) >= MIN_BOX_PX)
    return clipped[keep], classes[keep]


class DetectionDataset(torch.utils.data.Dataset):
    def __init__(self, samples: list[Sample], imgsz: int, strides: tuple[int, ...], *, augment: bool, seed: int = 0):
        self.samples = samples
        self.imgsz = imgsz
        self.strides = tuple(strides)
        self.augment = augment
        self.seed = seed
        self.aug = AugmentConfig()
        self.epoch = 0
        self._cache: dict[int, np.ndarray] = {}

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.samples)

    def _image(self, i: int) -> np.ndarray:
        # the synthetic sets are small: decode each PNG once
        if i not in self._cache:
            self._cache[i] = load_image(self.samples[i].image)
        return self._cache[i]

    def __getitem__(self, i: int):
        sample = self.samples[i]
        image = self._image(i)
        if self.augment:
            rng = np.random.default_rng([self.seed, self.epoch, i])
            canvas, boxes = _place(image, sample.boxes, self.imgsz, rng, self.aug)
            if rng.random() < self.aug.flip:
                canvas = canvas[:, ::-1]
                boxes = boxes[:, [2, 1, 0, 3]] * np.array([-1, 1, -1, 1], np.float32) + np.array([self.imgsz, 0, self.imgsz, 0], np.float32)
            canvas = _colour(canvas, rng, self.aug)
        else:
            canvas, lb = letterbox(image, self.imgsz)
            boxes = sample.boxes * lb.scale + np.array([lb.pad_x, lb.pad_y, lb.pad_x, lb.pad_y], np.float32)
        boxes, classes = clip_boxes(boxes.astype(np.float32), sample.classes, self.imgsz)
        targets = build_targets(boxes, classes, self.imgsz, self.strides)
        return torch.from_numpy(to_input(np.ascontiguousarray(canvas))), targets, i


def collate(batch):
    images = torch.stack([b[0] for b in batch])
    targets = collate_targets([b[1] for b in batch])
    return images, targets, [b[2] for b in batch]
