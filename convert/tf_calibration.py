"""TensorFlow's calibrator on two processes (onnx2tf 1.28's int8 run): each image run once, the same bytes.

onnx2tf 1.28 quantises through TensorFlow's converter, whose calibrator runs the float model
image by image on one core and holds Python's lock while it does (two threads take as long as
one): 11.6 s of the int8 run's 27 s for YOLOv8n at 640 px, 107 s of MobileViT-xxs's, while the
other core waits (py-spy, and a per-process CPU trace of the convert).

``calibrate_shared`` (installed over ``Calibrator.calibrate``) shares the images with a helper
process on the other core, started after the second image where the rest would take longer than
``HELPER_PAYS_OFF_S``. This process takes the images from the first, the helper -- once it has
imported TensorFlow (about 3 s) -- from the last; each claims an image before running it (a
file created exclusively), until they meet. So each image is run once, by whichever process is
free, and a helper that comes late costs its start-up only.

TensorFlow's calibrator records each tensor's minimum and maximum over the images it runs, so
the helper's figures merge into this process's calibrated model in place (the minimum of
minima, the maximum of maxima, ``ops.tflite_file.widen_ranges``): the same bytes as one calibrator running every
image (up to the sign of a bound that is zero in images of both signs of zero: the helper runs its
images last to first) (``tests/convert/test_tf_calibration.py``; the shipped int8 file is plain onnx2tf's,
``tests/convert/test_onnx2tf_lean.py``). A calibrator fed more images after it returned goes on
counting them, so where the helper fails, or its model does not match, its images are run here,
after this process's own: slower, the same bytes. Not shared (one core, two images, or samples
other than one input array of one shape): TensorFlow's own calibration, unchanged but for the
samples read first (their arrays once more in memory; shared, twice more, with their file).

    python -m edgeport.convert.tf_calibration FOLDER PARENT_PID   # the helper
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from edgeport.ops.tflite_file import DamagedModel, widen_ranges
from edgeport.process import usable_cores

MODEL, IMAGES, HELPER_OUT = "model.tflite", "images.npy", "helper.tflite"
# A helper starts where the images left would take this process longer: it imports TensorFlow
# (about 3 s) before it takes one, so it gains half of what is left after that, and its start-up
# costs a core that may be busy. YOLOv8n at 320 px (32 images, 3 s of calibration): not started,
# and the convert measured 1 s slower with it; at 640 px (12 s): started.
HELPER_PAYS_OFF_S = 6.0
# how long the helper may take, once this process has run its share, to finish the image it runs
# (MobileViT-xxs at 640 px: 3.3 s an image); past that it is killed and its images run here
HELPER_GRACE_S = 120.0


def install() -> None:
    """Every TensorFlow calibrator of this process shares its images with a helper process (once)."""
    from tensorflow.lite.python.optimize import calibrator

    own = calibrator.Calibrator.calibrate
    if getattr(own, "edgeport_shared", False):
        return

    def calibrate(self, dataset_gen):
        return calibrate_shared(own, self, dataset_gen)

    calibrate.edgeport_shared = True
    calibrator.Calibrator.calibrate = calibrate


class Claims:
    """Which process runs which image: a file created exclusively in ``folder`` for each image taken."""

    def __init__(self, folder: Path, count: int):
        self.folder, self.count = folder, count

    def take(self, i: int) -> bool:
        try:
            os.close(os.open(self.folder / f"claim-{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True

    def from_first(self):
        for i in range(self.count):
            if not self.take(i):
                return
            yield i

    def from_last(self):
        for i in reversed(range(self.count)):
            if not self.take(i):
                return
            yield i


def one_input(sample):
    """The sample's one input (an array or a tensor), as the calibrator is fed it (a one-entry dict
    or list), or None."""
    values = list(sample.values()) if isinstance(sample, dict) else sample if isinstance(sample, list) else None
    return values[0] if values is not None and len(values) == 1 else None


def calibrate_shared(calibrate, calibrator, dataset_gen):
    """``calibrate(calibrator, dataset_gen)``, TensorFlow's, with the images shared with a helper
    process where the rest of them, at the second image's pace (the first includes allocating the
    interpreter), would take longer than ``HELPER_PAYS_OFF_S``."""
    samples = list(dataset_gen())
    inputs = [one_input(s) for s in samples]
    model = getattr(calibrator, "_model_content", None)
    if (len(samples) < 3 or usable_cores() < 2 or model is None or any(x is None for x in inputs)
            or len({(tuple(x.shape), str(x.dtype)) for x in inputs}) != 1):
        return calibrate(calibrator, lambda: iter(samples))
    import tempfile

    try:  # in the run's own folder (the driver works there), removed with it however this process ends
        claims_folder = tempfile.TemporaryDirectory(prefix="edgeport-calibration-", dir=os.getcwd())
    except OSError:  # no folder to share the images through: TensorFlow's own calibration
        return calibrate(calibrator, lambda: iter(samples))
    with claims_folder as tmp:
        folder = Path(tmp)
        claims = Claims(folder, len(samples))
        mine: list[int] = []
        proc: subprocess.Popen | None = None

        def my_images():
            nonlocal proc
            paced = 0.0
            for i in claims.from_first():
                if i == 2 and (len(samples) - 2) * (time.perf_counter() - paced) > HELPER_PAYS_OFF_S:
                    try:
                        proc = start_helper(folder, model, inputs)
                    except OSError as exc:  # no room for the images, no process: every image here
                        print(f"edgeport: no calibration helper ({exc}); every image is calibrated here", file=sys.stderr)
                paced = time.perf_counter()
                mine.append(i)
                yield samples[i]

        try:
            calibrated = calibrate(calibrator, my_images)
            theirs = sorted(set(range(len(samples))) - set(mine))
            if proc is not None and theirs:
                try:
                    proc.wait(timeout=HELPER_GRACE_S)  # at most the image it is running
                except subprocess.TimeoutExpired:
                    pass  # killed below: its images are calibrated here
        finally:
            if proc is not None and proc.poll() is None:
                proc.kill()  # none of the images is the helper's: it has nothing to say
                proc.wait()
        if not theirs:
            return calibrated
        out = folder / HELPER_OUT
        try:
            if proc is None or proc.returncode != 0 or not out.is_file():
                raise ValueError(f"it ended with exit {proc.returncode if proc else None}")
            merged = widen_ranges(calibrated, out.read_bytes())
        except (ValueError, DamagedModel) as exc:
            print(f"edgeport: the calibration helper's {len(theirs)} images are calibrated here ({exc})", file=sys.stderr)
            return calibrate(calibrator, lambda: (samples[i] for i in theirs))
        print(f"edgeport: calibrated {len(mine)} images here and {len(theirs)} in a helper process", file=sys.stderr)
        return merged


def start_helper(folder: Path, model: bytes, inputs: list) -> subprocess.Popen:
    """The helper, importing TensorFlow while this process writes the model and the images for it."""
    helper = subprocess.Popen([sys.executable, "-m", "edgeport.convert.tf_calibration", str(folder), str(os.getpid())],
                              stdin=subprocess.PIPE)
    try:
        (folder / MODEL).write_bytes(bytes(model))
        np.save(folder / IMAGES, np.stack([np.asarray(x) for x in inputs]))
        helper.stdin.write(b"go\n")
        helper.stdin.close()
    except BaseException:
        helper.kill()
        helper.wait()
        raise
    return helper


def helper(folder: Path, parent: int) -> None:
    """Import TensorFlow, wait for the parent's word, then calibrate the images from the last until
    the parent's claims are met; write the calibrated model (none where no image was left)."""
    from edgeport.process import die_with

    die_with(parent)
    from tensorflow.lite.python.optimize import calibrator

    if sys.stdin.readline().strip() != "go":
        return  # the parent gave up
    images = np.load(folder / IMAGES, mmap_mode="r")
    claims = Claims(folder, len(images))
    taken = claims.from_last()
    first = next(taken, None)
    if first is None:
        return
    model = (folder / MODEL).read_bytes()

    def my_images():
        yield [np.array(images[first])]
        for i in taken:
            yield [np.array(images[i])]

    calibrated = calibrator.Calibrator(model).calibrate(my_images)
    part = folder / (HELPER_OUT + ".part")
    part.write_bytes(bytes(calibrated))
    os.replace(part, folder / HELPER_OUT)


if __name__ == "__main__":
    helper(Path(sys.argv[1]), int(sys.argv[2]))
