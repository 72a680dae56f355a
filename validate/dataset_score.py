"""``edgeport validate --data``: mAP@0.5:0.95, mAP@0.5 and each class's AP on every labelled image of
the dataset (or the first ``--images``), as ``yolo val`` measures a file.

The images are streamed a chunk at a time (loaded, letterboxed, run, decoded), keeping only the
detections (at most 100 an image), so memory stays flat as the set grows. Parity's rows are judged on
the first images alone (``convert/passes/given_file_pass.py``); this scores the cheap rows on all of
them, side by side, each on its own thread (the board's in its own process): the file on TFLite's
optimised kernels and, with every row asked for, PyTorch's (the mAP the file is measured against) and
the board's own runtime's. The slow reference kernels and board emulator keep to parity's first images.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from edgeport.models.decode import COCO_EVAL, Detections
from edgeport.validate.parity.runners import RuntimeRefused

CHUNK = 16  # images loaded at a time: about 80 MB at 640 px, three chunks in flight


@dataclass(frozen=True)
class DatasetScore:
    images: int
    maps: dict  # row label -> validate.metrics.coco_map(per_class=True)
    seconds: float
    refused: dict  # row label -> the images of the chunk its runtime refused, and its own message
    fingerprint: str  # ``fingerprint(samples)``


def load_chunk(samples, imgsz: int) -> tuple[np.ndarray, list]:
    """The samples' images letterboxed to ``imgsz``: (N, 3, S, S) float32 inputs and each one's letterbox."""
    from edgeport.models.preprocess import letterbox, load_image, to_input
    from edgeport.validate.datasets import read_image

    inputs, boxes = [], []
    for s in samples:
        img, lb = letterbox(read_image(load_image, s.image), imgsz)
        inputs.append(to_input(img))
        boxes.append(lb)
    return np.stack(inputs), boxes


def score_dataset(samples, imgsz: int, head, runners: dict, on_progress=None) -> DatasetScore | None:
    """Each runner's (``validate.parity.runners.Runner``, one invoke an image) detections on every sample,
    decoded by the ``COCO_EVAL`` protocol and scored against the samples' labels; None where the head
    has no boxes to decode. ``on_progress(images done, images in all)`` after each chunk. A runner that
    refuses an image is scored no further: its row has no mAP, and ``refused`` says why."""
    from edgeport.validate.metrics import coco_map

    t0 = time.perf_counter()
    found: dict[str, list[Detections]] = {name: [] for name in runners}
    refused: dict[str, str] = {}
    for runner in runners.values():
        runner.once = True  # the outputs only: no second, timed invoke
    chunks = [samples[i:i + CHUNK] for i in range(0, len(samples), CHUNK)]
    stop = threading.Event()  # set on the way out of an error or Ctrl-C: the runs stop at their next image
    # three stages overlapped: the next chunk loads, and the last one decodes, while this one runs
    with ThreadPoolExecutor(max_workers=len(runners) + 1) as pool:
        try:
            loading, pending = pool.submit(load_chunk, chunks[0], imgsz) if chunks else None, None
            for k in range(len(chunks) + 1):
                done = None
                if pending is not None:  # a runner takes one chunk at a time: the last one's outputs first
                    runs, boxes, start = pending
                    which = f"images {start + 1}-{start + len(boxes)}"
                    done, pending = ({name: _outputs(run, name, refused, which) for name, run in runs.items()}, boxes), None
                if k < len(chunks):
                    x, boxes = loading.result()
                    if k + 1 < len(chunks):
                        loading = pool.submit(load_chunk, chunks[k + 1], imgsz)
                    pending = ({name: pool.submit(runner.run, x, stop) for name, runner in runners.items() if name not in refused},
                               boxes, k * CHUNK)
                if done is not None:
                    outputs, boxes = done
                    for name, out in outputs.items():
                        if out is None:
                            continue
                        dets = head.decode(out, COCO_EVAL)
                        if dets is None:
                            return None
                        found[name] += [Detections(lb.to_original(d.boxes), d.scores, d.classes) for d, lb in zip(dets, boxes)]
                    if on_progress is not None:
                        on_progress(min(k * CHUNK, len(samples)), len(samples))
        finally:
            stop.set()  # the pool's exit waits for the runs (an error, Ctrl-C, a head without boxes): each ends at its next image
    maps = {name: coco_map(samples, dets, per_class=True) for name, dets in found.items() if name not in refused}
    return DatasetScore(len(samples), maps, time.perf_counter() - t0, refused, fingerprint(samples))


def fingerprint(samples) -> str:
    """Which set was scored: SHA-256 over each image's file name and size and its labels, in order. Two
    reports' mAP compare only on the same images and labels, wherever the folder was (``edgeport check``)."""
    import hashlib

    digest = hashlib.sha256()
    for s in samples:
        digest.update(f"{s.image.name}\0{s.image.stat().st_size}\0{len(s.boxes)}\0".encode())
        digest.update(np.ascontiguousarray(s.boxes, np.float64).tobytes() + np.ascontiguousarray(s.classes, np.int64).tobytes())
    return digest.hexdigest()


def _outputs(run, name: str, refused: dict, which: str):
    """A chunk's outputs, or None where its runner refused it (said in ``refused``: which images, and why)."""
    try:
        return run.result().outputs
    except RuntimeRefused as exc:
        refused[name] = f"{which}: {exc}"
        return None
