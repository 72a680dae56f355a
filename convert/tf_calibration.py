"""TensorFlow's calibrator, its ranges computed on the optimised kernels (onnx2tf 1.28's int8 run).

onnx2tf 1.28 quantises through TensorFlow's converter, whose calibrator runs the float model image
by image on one core, on kernels that log every tensor: 18 s of CPU for YOLOv8n's 32 images at
640 px, 109 s for MobileViT-xxs's (TensorFlow holds Python's lock meanwhile, so a thread beside it
gains nothing). TFLite's optimised kernels (XNNPACK, the default board's) run the same images in
4 s and 15 s, keeping every tensor when each op's output is made a graph output
(``every_tensor_as_output``), on two threads, each half of the images (an invoke runs without
Python's lock).

What TensorFlow records is not quite each tensor's range. Its calibrator
(``tensorflow/lite/tools/optimize/calibration/calibrator.cc``) logs each op's inputs again after the
op has run, and where TFLite's memory planner lets an op write its output over an input (in place:
MUL, ADD, LOGISTIC ...), that input is recorded with the output's values too
(tensorflow/tensorflow#127842, open): on YOLOv8n at 640 px, 72 of the 252 tensors it records, each
SiLU's sigmoid down to -0.278 (the SiLU's own minimum). The int8 file onnx2tf ships is quantised
with those ranges, and edgeport ships that file (parity judges it): so each recorded range here is
TensorFlow's, computed -- a tensor's own minimum and maximum over the images, joined with those of
the output written over it; and a maximum never below the smallest positive float, where the
logger starts it.

``calibrate_measured`` (installed over ``Calibrator.calibrate``): TensorFlow's calibrator runs the
first image alone -- which tensors it records, in what form, and what it records on that image --
then the optimised kernels run every image. A tensor whose record on the first image is its own
range there gets its own range over every image; one whose record is its range joined with that of
an output of an op that reads it (that op ran in place) gets the two joined over every image. The
ranges are TensorFlow's to float rounding (1e-5 of a range, the kernels round their own way), and
every other byte of the calibrated model is TensorFlow's (``ops.tflite_file.set_ranges``): the int8
file is plain onnx2tf's but for the last bits of some scales (``tests/convert/test_tf_calibration.py``,
``test_onnx2tf_lean.py``).

Where a record is explained by neither (or by two outputs that differ over the images), a recorded
tensor cannot be read, the model has more than one subgraph, a sample is not one array of the
input's shape and type, or an image gives a value that is not finite: TensorFlow's own calibration
over every image, as onnx2tf runs it (said on stderr).
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from edgeport.ops.tflite_file import recorded_ranges, set_ranges
from edgeport.process import usable_cores

Range = tuple[float, float]
# how far a range computed here may lie from TensorFlow's record of it, of the range's width: the
# two sets of kernels round their own way (1e-7 of a range on YOLOv8n)
ROUNDING = 1e-5
FLOAT32_TINY, FLOAT32_MAX = float(np.finfo(np.float32).tiny), float(np.finfo(np.float32).max)


class Unmeasured(Exception):
    """Why this model's ranges are left to TensorFlow's calibrator."""


def install() -> None:
    """Every TensorFlow calibrator of this process computes its ranges (``calibrate_measured``)."""
    from tensorflow.lite.python.optimize import calibrator

    own = calibrator.Calibrator.calibrate
    if getattr(own, "edgeport_measured", False):
        return

    def calibrate(self, dataset_gen):
        return calibrate_measured(own, self, dataset_gen)

    calibrate.edgeport_measured = True
    calibrator.Calibrator.calibrate = calibrate


def one_input(sample):
    """The sample's one input (an array or a tensor), as the calibrator is fed it (a one-entry dict
    or list), or None."""
    values = list(sample.values()) if isinstance(sample, dict) else sample if isinstance(sample, list) else None
    return values[0] if values is not None and len(values) == 1 else None


def calibrate_measured(calibrate, calibrator, dataset_gen) -> bytes:
    """``calibrate(calibrator, dataset_gen)``, TensorFlow's, on its first image only, its ranges
    then computed over every image (module docstring)."""
    samples = list(dataset_gen())
    model = getattr(calibrator, "_model_content", None)
    if len(samples) < 2 or model is None:
        return calibrate(calibrator, lambda: iter(samples))
    first = bytes(calibrate(calibrator, lambda: iter(samples[:1])))
    try:
        inputs = [one_input(s) for s in samples]
        if any(x is None for x in inputs):
            raise Unmeasured("a sample is not one input")
        ranges = tensorflows_ranges(bytes(model), [np.asarray(x) for x in inputs], recorded_ranges(first))
    except Unmeasured as exc:
        print(f"edgeport: TensorFlow's own calibration ({exc})", file=sys.stderr)
        return calibrate(calibrator, lambda: iter(samples[1:]))  # it goes on counting: every image, as onnx2tf runs it
    return set_ranges(first, ranges)


def tensorflows_ranges(model: bytes, inputs: list[np.ndarray], first: dict[int, Range]) -> dict[int, Range]:
    """What TensorFlow's calibrator would record over ``inputs`` (one array an image, the model's
    one input) for each tensor of ``first``, its record on the first image."""
    from edgeport.ops.tflite_graph import Graph

    graph = Graph(model)
    if len(graph.model.subgraphs) != 1 or len(graph.sg.inputs) != 1:
        raise Unmeasured("not one subgraph of one input")
    given = int(graph.sg.inputs[0])
    outputs = sorted({t for op in graph.ops for t in op.outputs if t >= 0})
    unread = [graph.tensor_name(t) for t in first if t != given and t not in set(outputs)]
    if unread:
        raise Unmeasured(f"{len(unread)} recorded tensors are no op's output, {unread[0]} first")
    own_first, own = ({t: _as_logged(r) for t, r in ranges.items()} for ranges in measure(model, given, inputs, outputs))
    ranges = {}
    for t, recorded in first.items():
        if _close(recorded, own_first[t]):
            ranges[t] = own[t]
            continue
        # an op that reads t and wrote its output over it: the output's range joined to t's
        joined = {_join(own[t], own[y]) for op in graph.ops if t in op.inputs for y in op.outputs
                  if y >= 0 and _close(recorded, _join(own_first[t], own_first[y]))}
        if len(joined) != 1:
            raise Unmeasured(f"TensorFlow's record of {graph.tensor_name(t)} is "
                             f"{'explained by no op that reads it' if not joined else 'explained by two outputs'}")
        ranges[t] = joined.pop()
    return ranges


def _as_logged(r: Range) -> Range:
    """A range as TensorFlow's logger keeps it: its maximum starts at the smallest positive float
    (``numeric_limits<float>::min()``), so a tensor below zero everywhere is recorded up to 1.2e-38;
    its minimum at the largest."""
    return min(r[0], FLOAT32_MAX), max(r[1], FLOAT32_TINY)


def _close(a: Range, b: Range) -> bool:
    width = max(b[1] - b[0], abs(b[0]), abs(b[1]), 1e-30)
    return abs(a[0] - b[0]) <= ROUNDING * width and abs(a[1] - b[1]) <= ROUNDING * width


def _join(a: Range, b: Range) -> Range:
    return min(a[0], b[0]), max(a[1], b[1])


def measure(model: bytes, given: int, inputs: list[np.ndarray], tensors: list[int]) -> tuple[dict[int, Range], dict[int, Range]]:
    """Each of ``tensors`` (op outputs) and the input ``given``: its range on the first image, and
    over every image, on the optimised kernels with every op's output kept; the images after the
    first in two halves, each on its own thread and interpreter."""
    from edgeport.validate.parity.divergence import every_tensor_as_output

    made, _ = every_tensor_as_output(model)
    first = _ranges_on(made, given, inputs[:1], tensors)
    rest = inputs[1:]
    cut = (len(rest) + 1) // 2 if usable_cores() > 1 else len(rest)
    parts = [part for part in (rest[:cut], rest[cut:]) if part]
    with ThreadPoolExecutor(max(1, len(parts)), thread_name_prefix="edgeport-calibration") as pool:
        found = [f.result() for f in [pool.submit(_ranges_on, made, given, part, tensors) for part in parts]]
    every = {t: (min(f[t][0] for f in (first, *found)), max(f[t][1] for f in (first, *found))) for t in first}
    return first, every


def _ranges_on(model: bytes, given: int, inputs: list[np.ndarray], tensors: list[int]) -> dict[int, Range]:
    """The ranges of ``tensors`` and of the input over ``inputs``, on one interpreter."""
    from ai_edge_litert.interpreter import Interpreter

    try:
        interpreter = Interpreter(model_content=model, num_threads=1)
        interpreter.allocate_tensors()
    except (RuntimeError, ValueError) as exc:  # the runtime's own refusal
        raise Unmeasured(f"the optimised kernels refuse the model ({str(exc).strip().splitlines()[-1][:200]})") from exc
    detail = next(d for d in interpreter.get_input_details() if int(d["index"]) == given)
    ranges: dict[int, Range] = {}

    def see(t: int, values: np.ndarray) -> None:
        if values.size == 0:
            raise Unmeasured(f"tensor {t} is empty")
        low, high = float(np.min(values)), float(np.max(values))
        if not (np.isfinite(low) and np.isfinite(high)):  # TensorFlow's calibrator says what it makes of that
            raise Unmeasured(f"an image gives tensor {t} a value that is not finite")
        have = ranges.get(t)
        ranges[t] = (low, high) if have is None else (min(have[0], low), max(have[1], high))

    for x in inputs:
        if tuple(x.shape) != tuple(int(v) for v in detail["shape"]) or x.dtype != detail["dtype"]:
            raise Unmeasured(f"a sample of shape {tuple(x.shape)} and type {x.dtype}, not the input's")
        interpreter.set_tensor(given, x)
        see(given, x)
        interpreter.invoke()
        for t in tensors:
            view = interpreter.tensor(t)()  # in place, before the next invoke
            see(t, view)
            del view  # the runtime refuses to invoke while a view of its tensors is held
    return ranges
