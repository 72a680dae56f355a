"""Calibration / validation images: a user's folder, or seeded synthetic person scenes.

Images are preprocessed by ``models.preprocess`` -- the same letterbox the model was
trained with -- so int8 calibration sees the input distribution of deployment.
Nothing is ever downloaded.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeport.errors import CalibrationError
from edgeport.models.preprocess import IMAGE_SUFFIXES, list_images, load_image, preprocess


def load_calibration(folder: Path | None, imgsz: int, *, limit: int, seed: int) -> tuple[np.ndarray, str]:
    """Return ``(N, 3, imgsz, imgsz)`` float32 inputs and a description of their source."""
    if folder is None:
        from edgeport.models.synth import sample_images

        images = sample_images(limit, imgsz, seed=seed)
        return np.stack([preprocess(im, imgsz) for im in images]), f"{limit} synthetic scenes (seed {seed})"
    if not folder.exists():
        raise CalibrationError(f"--calib {str(folder)!r} does not exist; pass a folder of images")
    if not folder.is_dir():
        raise CalibrationError(f"--calib {str(folder)!r} is not a folder; pass a folder of images")
    files = list_images(folder)
    if not files:
        raise CalibrationError(
            f"--calib {str(folder)!r} holds no images ({', '.join(IMAGE_SUFFIXES)}); "
            f"add some, or omit --calib to use synthetic scenes"
        )
    files = files[:limit]
    batch = []
    for path in files:
        try:
            batch.append(preprocess(load_image(path), imgsz))
        except (OSError, ValueError) as exc:
            raise CalibrationError(
                f"calibration image {str(path)!r} is unreadable ({exc}); remove or replace it"
            ) from exc
    return np.stack(batch), f"{len(files)} images from {folder}"
