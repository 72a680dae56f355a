"""``tf_calibration``: TensorFlow's calibrator shares its images with a helper process and writes the
same bytes as one calibrator running every image; a helper that dies leaves its images to the parent.

TensorFlow runs in a child process only (it breaks torch.compile's later import of triton in the
test process: ``test_onnx2tf_lean.py``), on the 1.28 line's environments."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from edgeport.convert.tf_calibration import Claims, one_input

needs_tensorflow = pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None,
                                      reason="TensorFlow is on the onnx2tf 1.28 line only (Python 3.11)")

SCRIPT = r"""
import glob, json, os, sys, time
import numpy as np
import tensorflow as tf
from tensorflow.lite.python.optimize import calibrator as C
from edgeport.convert import tf_calibration as T

class Small(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([1, 16, 16, 3], tf.float32, name="x")])
    def __call__(self, x):
        w = tf.constant(np.random.default_rng(0).standard_normal((3, 3, 3, 4)).astype(np.float32))
        y = tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME"))
        return tf.concat([y, tf.sigmoid(y)], -1)

saved = os.path.join(os.getcwd(), "saved", "small")  # in the test's folder
tf.saved_model.save(Small(), saved)  # as onnx2tf converts: from a saved model, one signature
model = tf.lite.TFLiteConverter.from_saved_model(saved).convert()
model = C.add_intermediate_tensors(model)
rng = np.random.default_rng(1)
# as onnx2tf 1.28 feeds them: one dict a sample; each image widens some range
images = [{"x": tf.constant(rng.standard_normal((1, 16, 16, 3)).astype(np.float32) * (1 + k))} for k in range(8)]
own = C.Calibrator.calibrate
whole = bytes(own(C.Calibrator(model), lambda: iter(images)))
first, last = (bytes(own(C.Calibrator(model), lambda part=part: iter(part))) for part in (images[:5], images[5:]))

def helper_claimed_the_last():
    deadline = time.time() + 120
    while not glob.glob(os.path.join("edgeport-calibration-*", f"claim-{len(images) - 1}")):  # in the working folder
        assert time.time() < deadline, "the helper never took an image"
        time.sleep(0.05)

def parent_waits(self, gen):
    # the parent's fourth image (the helper starts at its third) waits until the helper has taken the last one
    def images_():
        for k, sample in enumerate(gen()):
            if k == 3:
                helper_claimed_the_last()
            yield sample
    return own(self, images_)

alone = T.calibrate_shared(own, C.Calibrator(model), lambda: iter(images))  # microseconds an image: no helper
print("shared:", file=sys.stderr, flush=True)
T.HELPER_PAYS_OFF_S = 0.0  # a helper for every calibration from here on
shared = T.calibrate_shared(parent_waits, C.Calibrator(model), lambda: iter(images))
print("killed:", file=sys.stderr, flush=True)
start_helper = T.start_helper

def start_and_kill(folder, model, inputs):
    # a helper that took the last four images, then died
    proc = start_helper(folder, model, inputs)
    for i in range(4, len(images)):
        os.close(os.open(folder / f"claim-{i}", os.O_CREAT | os.O_WRONLY))
    proc.kill()
    proc.wait()
    return proc

T.start_helper = start_and_kill
killed = T.calibrate_shared(own, C.Calibrator(model), lambda: iter(images))
T.start_helper = start_helper
print(json.dumps({"merged": T.widen_ranges(first, last) == whole, "halves_differ": first != whole,
                  "alone": alone == whole, "shared": shared == whole, "killed": killed == whole}))
"""


@needs_tensorflow
@pytest.mark.slow
def test_a_shared_calibration_is_one_calibrators_bytes(tmp_path):
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["halves_differ"], "each half's ranges are narrower than the whole's: the merge has work to do"
    assert result["merged"], "the two halves' statistics merged are one calibrator's over every image"
    assert result["shared"], "calibrated on two processes: the same bytes"
    assert result["killed"], "a helper killed after taking images: its images run here, the same bytes"
    alone_log, rest = proc.stderr.split("shared:")
    shared_log, killed_log = rest.split("killed:")
    assert result["alone"] and "edgeport:" not in alone_log, "images this fast: no helper, TensorFlow's own calibration"
    assert "in a helper process" in shared_log
    assert "are calibrated here (it ended with exit -9)" in killed_log
    assert not list(tmp_path.glob("edgeport-calibration-*")), "the claims' folder, in the working one, is removed"
    assert "Traceback" not in proc.stderr


def test_claims_from_both_ends_take_each_image_once(tmp_path):
    claims = Claims(tmp_path, 7)
    first, last = claims.from_first(), claims.from_last()
    taken = [next(first), next(last), next(last), next(first), next(first), next(last), next(first)]
    assert sorted(taken) == list(range(7))
    assert taken == [0, 6, 5, 1, 2, 4, 3]
    assert next(first, None) is None and next(last, None) is None, "both stop where they meet"


def test_only_a_sample_of_one_input_array_is_shared():
    import numpy as np

    a = np.zeros((1, 4, 4, 3), np.float32)
    assert one_input({"images": a}) is a and one_input([a]) is a
    assert one_input({"a": a, "b": a}) is None, "two inputs: TensorFlow's own order, not shared"
    assert one_input(("serving_default", {"images": a})) is None, "a signature's sample: not shared"
