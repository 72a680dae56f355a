"""Calibration / validation images: a user's folder, or seeded synthetic person scenes.

Images get ``models.preprocess``'s letterbox, the one the model was trained with, so int8
calibration sees deployment's input distribution. Nothing is ever downloaded.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeport.errors import CalibrationError
from edgeport.models.preprocess import IMAGE_SUFFIXES, list_images, load_image, preprocess

# a --calib folder of at least this many and no --val: every fourth image is judged, up to ConvertConfig.max_validate
MIN_TO_HOLD_OUT = 16
# --val's images judged: as many as the run's judging images cost at this size (each image's pixels),
# up to this many -- a small net's held-out crops or tiles are judged on the set the user gave
MAX_VAL_JUDGED, AT_SIZE = 32, 320


def val_judged(imgsz: int, judge: int) -> int:
    """How many of ``--val``'s images are judged at ``imgsz``: ``judge`` at ``AT_SIZE`` and above."""
    return int(min(MAX_VAL_JUDGED, max(judge, judge * (AT_SIZE / imgsz) ** 2)))


def calibration_and_judging(calib_dir: Path | None, val_dir: Path | None, imgsz: int, *, calib: int, judge: int,
                            seed: int) -> tuple[np.ndarray, str, np.ndarray, str, bool]:
    """The calibration images and the images the files are judged on, each with its source in words,
    and whether the two are apart. ``--val``: judged on those; else a ``--calib`` folder of at least
    ``MIN_TO_HOLD_OUT`` images gives up a quarter of them to judging; else synthetic scenes of another
    seed. A smaller folder and no ``--val``: judged on its own images, and said so."""
    if val_dir is not None:
        images, source = load_calibration(calib_dir, imgsz, limit=calib, seed=seed)
        val, val_source = load_calibration(val_dir, imgsz, limit=val_judged(imgsz, judge), seed=seed + 1, flag="--val")
        return images, source, val, val_source, True
    if calib_dir is None:
        images, source = load_calibration(None, imgsz, limit=calib, seed=seed)
        val, val_source = load_calibration(None, imgsz, limit=judge, seed=seed + 1)
        return images, source, val, val_source, True
    images, _ = load_calibration(calib_dir, imgsz, limit=calib + judge, seed=seed)
    n = len(images)
    if n < MIN_TO_HOLD_OUT:
        said = f"the {n} --calib images themselves: fewer than {MIN_TO_HOLD_OUT} and no --val, so none is held out"
        return images, f"{n} images from {calib_dir}", images, said, False
    held = np.zeros(n, bool)
    held[3::4] = True  # every fourth image, so a folder sorted by scene or date gives each part alike
    held[np.flatnonzero(held)[judge:]] = False
    return (images[~held], f"{int((~held).sum())} images from {calib_dir}", images[held],
            f"{int(held.sum())} --calib images held out of the calibration (every fourth)", True)


def load_calibration(folder: Path | None, imgsz: int, *, limit: int, seed: int, flag: str = "--calib") -> tuple[np.ndarray, str]:
    """Return ``(N, 3, imgsz, imgsz)`` float32 inputs and a description of their source."""
    if folder is None:
        from edgeport.models.synth import sample_images

        images = sample_images(limit, imgsz, seed=seed)
        return np.stack([preprocess(im, imgsz) for im in images]), f"{limit} synthetic scenes (seed {seed})"
    if not folder.exists():
        raise CalibrationError(f"{flag} {str(folder)!r} does not exist; pass a folder of images")
    if not folder.is_dir():
        raise CalibrationError(f"{flag} {str(folder)!r} is not a folder; pass a folder of images")
    files = list_images(folder)
    if not files:
        raise CalibrationError(
            f"{flag} {str(folder)!r} holds no images ({', '.join(IMAGE_SUFFIXES)}); "
            f"add some, or omit {flag} to use synthetic scenes"
        )
    files = files[:limit]
    batch = []
    for path in files:
        try:
            batch.append(preprocess(load_image(path), imgsz))
        except (OSError, ValueError) as exc:
            raise CalibrationError(f"{flag} image {str(path)!r} is unreadable ({exc}); remove or replace it") from exc
    return np.stack(batch), f"{len(files)} images from {folder}"
