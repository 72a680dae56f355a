"""TensorFlow's calibrator, its ranges each tensor's own, computed on the optimised kernels (onnx2tf 1.28's int8 run).

onnx2tf 1.28 quantises through TensorFlow's converter, whose calibrator runs the float model image
by image on one core, on kernels that log every tensor. TFLite's optimised kernels (XNNPACK, the
default board's) run the same images faster, every tensor kept, on two threads, as on 2.x
(``onnx2tf_lean.collect_on_optimised_kernels``).

What TensorFlow records is not each tensor's range. Its calibrator
(``tensorflow/lite/tools/optimize/calibration/calibrator.cc``) logs each op's inputs again after the
op has run, and where TFLite's memory planner lets an op write its output over an input (in place:
MUL, ADD, LOGISTIC, RESHAPE ...), that input is recorded with the output's values too
(tensorflow/tensorflow#127842, open). The int8 file then gives such an input its reader's grid: on
YOLOv8 the boxes in grid cells, multiplied in place by the strides, get the pixels' grid, a step of
a few cells, and the file's boxes land tens of pixels off where ai-edge-quantizer's land within a
few. Here every tensor gets its own range over every image instead.

``calibrate_measured`` (installed over ``Calibrator.calibrate``): TensorFlow's calibrator runs the
first image alone -- which tensors it records, in what form, and what it records on that image --
then the optimised kernels run every image (``measured_ranges``). Each record on the first image is
checked to be the tensor's: its own range there, or that joined with the output of its one reader,
the same size as it (an op that may write over it); then the tensor gets its own range over every
image. Every other byte of the calibrated model is TensorFlow's (``ops.tflite_file.set_ranges``).

TensorFlow's own calibration over every image, as onnx2tf runs it (said on stderr), where: a record
is explained by neither; a recorded tensor is no op's output, or empty; the model has more than one
subgraph or input, or carries statistics per channel; a sample is not one array of the input's shape
and type; the optimised kernels refuse the model; or an image gives a value that is not finite.
"""

from __future__ import annotations

import sys

import numpy as np

from edgeport.ops.tflite_file import DamagedModel, graph_outputs, recorded_ranges, set_ranges
from edgeport.process import in_halves

Range = tuple[float, float]
# how far a bound computed here may lie from TensorFlow's record of it: of the range's width, plus of
# the bound's magnitude (the two sets of kernels round their own way: 6e-8 of a bound on YOLOv8n)
ROUNDING, MAGNITUDE = 1e-5, 1e-6
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
    """``calibrate(calibrator, dataset_gen)``, TensorFlow's, on its first image only, each tensor's
    own range then computed over every image (module docstring)."""
    samples = list(dataset_gen())
    model = getattr(calibrator, "_model_content", None)
    if len(samples) < 2 or model is None:
        return calibrate(calibrator, lambda: iter(samples))
    first = bytes(calibrate(calibrator, lambda: iter(samples[:1])))
    try:
        inputs = [one_input(s) for s in samples]
        if any(x is None for x in inputs):
            raise Unmeasured("a sample is not one input")
        try:
            recorded = recorded_ranges(first)
        except (ValueError, DamagedModel) as exc:  # TensorFlow's own file, never the user's
            raise Unmeasured(str(exc)) from exc
        ranges = measured_ranges(bytes(model), [np.asarray(x) for x in inputs], recorded)
    except Unmeasured as exc:
        print(f"edgeport: TensorFlow's own calibration ({exc})", file=sys.stderr)
        return calibrate(calibrator, lambda: iter(samples[1:]))  # it goes on counting: every image, as onnx2tf runs it
    return set_ranges(first, ranges)


def measured_ranges(model: bytes, inputs: list[np.ndarray], first: dict[int, Range]) -> dict[int, Range]:
    """Each tensor of ``first`` (TensorFlow's records on the first image) with its own range over
    ``inputs`` (one array an image, the model's one input), once its record is checked to be the
    tensor's (module docstring); a record explained by neither: ``Unmeasured``."""
    from edgeport.ops.tflite_graph import Graph
    from edgeport.validate.parity.divergence import every_tensor_as_output

    try:
        made, _ = every_tensor_as_output(model)
        graph = Graph(made)  # the model's ops and tensors, every op's output a graph output
        outputs = set(graph_outputs(model))  # the model's own
    except (ValueError, DamagedModel) as exc:  # TensorFlow's own file, never the user's
        raise Unmeasured(str(exc)) from exc
    if len(graph.model.subgraphs) != 1 or len(graph.sg.inputs) != 1:
        raise Unmeasured("not one subgraph of one input")
    given = int(graph.sg.inputs[0])
    produced = {t for op in graph.ops for t in op.outputs if t >= 0}
    unread = [graph.tensor_name(t) for t in first if t != given and t not in produced]
    if unread:
        raise Unmeasured(f"{len(unread)} recorded tensors are no op's output, {unread[0]} first")

    def size(t: int) -> int:
        return int(np.prod(graph.shape(t))) if graph.dtype(t) == "float32" else -1

    readers: dict[int, list] = {t: [] for t in first}
    for op in graph.ops:
        for t in {int(i) for i in op.inputs if int(i) in readers}:
            readers[t].append(op)
    # TFLite writes an op's output over an input only where the op is that input's one reader (and
    # the input no graph output) and the two are the same size
    could_write_over = {t: sorted({y for y in ops[0].outputs if y >= 0 and y != t and size(y) == size(t) >= 0})
                        if len(ops) == 1 and t not in outputs else [] for t, ops in readers.items()}
    measured = sorted(({t for t in first if t != given} | {y for ys in could_write_over.values() for y in ys}))
    own_first, own = ({t: _as_logged(r) for t, r in ranges.items()} for ranges in _measure(made, given, inputs, measured))
    for t, recorded in first.items():
        if t not in own_first:
            raise Unmeasured(f"{graph.tensor_name(t)} is empty")
        if not _close(recorded, own_first[t]) and not any(
                y in own_first and _close(recorded, _join(own_first[t], own_first[y])) for y in could_write_over[t]):
            raise Unmeasured(f"TensorFlow's record of {graph.tensor_name(t)} is explained by no op that reads it")
    return {t: own[t] for t in first}


def _as_logged(r: Range) -> Range:
    """A range as TensorFlow's logger keeps it: its maximum starts at the smallest positive float
    (``numeric_limits<float>::min()``), so a tensor below zero everywhere is recorded up to 1.2e-38;
    its minimum at the largest."""
    return min(r[0], FLOAT32_MAX), max(r[1], FLOAT32_TINY)


def _close(a: Range, b: Range) -> bool:
    """Within what two sets of kernels' rounding puts between them (``ROUNDING``, ``MAGNITUDE``)."""
    tol = ROUNDING * (b[1] - b[0]) + MAGNITUDE * max(abs(b[0]), abs(b[1]))
    return abs(a[0] - b[0]) <= tol and abs(a[1] - b[1]) <= tol


def _join(a: Range, b: Range) -> Range:
    return min(a[0], b[0]), max(a[1], b[1])


def _measure(made: bytes, given: int, inputs: list[np.ndarray], tensors: list[int]) -> tuple[dict[int, Range], dict[int, Range]]:
    """Each of ``tensors`` (op outputs of ``made``, the model with every op's output a graph output)
    and the input ``given``: its range on the first image, and over every image, on the optimised
    kernels; the images after the first in two halves, each on its own thread and interpreter."""
    first = _ranges_on(made, given, inputs[:1], tensors)
    found = in_halves(lambda part: _ranges_on(made, given, part, tensors), inputs[1:])
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
        if values.size == 0:  # not recorded (TensorFlow's logger skips it too)
            return
        low, high = float(np.min(values)), float(np.max(values))
        if not (np.isfinite(low) and np.isfinite(high)):  # TensorFlow's calibrator says what it makes of that
            raise Unmeasured(f"an image gives tensor {t} a value that is not finite")
        ranges[t] = _join(ranges.get(t, (low, high)), (low, high))

    for x in inputs:
        if tuple(x.shape) != tuple(int(v) for v in detail["shape"]) or x.dtype != detail["dtype"]:
            raise Unmeasured(f"a sample of shape {tuple(x.shape)} and type {x.dtype}, not the input's")
        see(given, x)
        try:
            interpreter.set_tensor(given, x)
            interpreter.invoke()
            for t in tensors:
                view = interpreter.tensor(t)()  # in place, before the next invoke
                see(t, view)
                del view  # the runtime refuses to invoke while a view of its tensors is held
        except (RuntimeError, ValueError) as exc:  # the runtime's own refusal
            raise Unmeasured(f"the optimised kernels fail on the model ({str(exc).strip().splitlines()[-1][:200]})") from exc
    return ranges
