"""Image preprocessing shared by training, calibration and validation.

One definition, so the int8 calibration sees exactly what the model saw in training:
letterbox to a square of ``imgsz`` (aspect kept, grey 114 padding, centred), RGB, float32
in [0, 1], NCHW.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgeport.userfiles import open_plain

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")
PAD_VALUE = 114


@dataclass(frozen=True)
class Letterbox:
    """How an original image maps into the model input: ``x_in = x_orig * scale + pad_x``."""

    scale: float
    pad_x: int
    pad_y: int

    def to_original(self, boxes: np.ndarray) -> np.ndarray:
        """xyxy boxes in model-input pixels -> the original image's pixels."""
        return (boxes - np.array([self.pad_x, self.pad_y, self.pad_x, self.pad_y], np.float32)) / self.scale


def letterbox(image: np.ndarray, imgsz: int) -> tuple[np.ndarray, Letterbox]:
    """Resize an HWC uint8 RGB image into an ``imgsz`` square, keeping its aspect ratio."""
    from PIL import Image

    h, w = image.shape[:2]
    scale = min(imgsz / h, imgsz / w)
    nh, nw = max(1, round(h * scale)), max(1, round(w * scale))
    resized = np.asarray(Image.fromarray(image).resize((nw, nh), Image.BILINEAR))
    canvas = np.full((imgsz, imgsz, 3), PAD_VALUE, dtype=np.uint8)
    top, left = (imgsz - nh) // 2, (imgsz - nw) // 2
    canvas[top : top + nh, left : left + nw] = resized
    return canvas, Letterbox(scale, left, top)


def to_input(image_hwc_uint8: np.ndarray) -> np.ndarray:
    """HWC uint8 RGB -> (3, H, W) float32 in [0, 1]."""
    return np.ascontiguousarray(image_hwc_uint8.transpose(2, 0, 1), dtype=np.float32) / 255.0


@contextmanager
def _opened(path: Path):
    """``path`` open as a Pillow image, for as long as the block runs. Raises OSError/ValueError (the
    caller names the file): not a plain file (a link to one is one: DVC and git-annex datasets are
    links), not an image, over Pillow's decompression-bomb limit (which bounds what a file may cost)."""
    import warnings

    from PIL import Image

    with open_plain(path) as f:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            try:
                im = Image.open(f)
            except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
                raise ValueError(f"too large to load safely ({exc}); downscale it") from None
            except Image.UnidentifiedImageError:  # its own words name the file object, not the file
                raise ValueError("not an image format Pillow reads, or damaged") from None
        with im:
            yield im


def image_size(path: Path) -> tuple[int, int]:
    """(width, height) of an image file, from its header; raises as ``load_image``."""
    with _opened(path) as im:
        return im.size


def load_image(path: Path) -> np.ndarray:
    """Read an image file as HWC uint8 RGB, whatever its bit depth.

    Raises OSError/ValueError (the caller names the file) where ``_opened`` does, and on unreadable or
    truncated files and floating-point images. 16-bit images are scaled to 8 bits (Pillow's
    ``convert("RGB")`` would clip them: 99% of pixels become 255).
    """
    with _opened(path) as im:
        return _rgb(im)


def _rgb(im) -> np.ndarray:
    """An open Pillow image's pixels as HWC uint8 RGB (``load_image``)."""
    if im.mode.startswith("I;16"):
        grey = (np.asarray(im).astype(np.uint32) >> 8).astype(np.uint8)
        return np.repeat(grey[:, :, None], 3, axis=2)
    if im.mode == "I":  # 32-bit integer: 16-bit data in older Pillow releases
        arr = np.asarray(im)
        if arr.min(initial=0) < 0 or arr.max(initial=0) > 65535:
            raise ValueError(f"32-bit integer pixels outside 0..65535 ({arr.min()}..{arr.max()}); save it as 8- or 16-bit")
        grey = (arr.astype(np.uint32) >> 8).astype(np.uint8) if arr.max(initial=0) > 255 else arr.astype(np.uint8)
        return np.repeat(grey[:, :, None], 3, axis=2)
    if im.mode == "F":
        raise ValueError("floating-point pixels have no fixed scale; save it as an 8- or 16-bit image")
    return np.asarray(im.convert("RGB"))


def preprocess(image: np.ndarray, imgsz: int) -> np.ndarray:
    """HWC uint8 RGB of any size -> (3, imgsz, imgsz) float32 model input."""
    boxed, _ = letterbox(image, imgsz)
    return to_input(boxed)


def list_images(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
