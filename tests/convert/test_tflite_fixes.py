"""Corrections to a converter's int8 output (convert/tflite_fixes.py), on one-op models built
with ``Graph``: each is what onnx2tf 2.x writes (a quantisation a kernel refuses), the kernels'
refusal, the fix, and what the fixed file computes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgeport.convert.tflite_fixes import requantize_int8_constraints, share_resize_quantization
from edgeport.ops.tflite_graph import Graph, Quant
from edgeport.ops.tflite_run import load_interpreter, run_tflite

QX = Quant(0.05, 3)
X = np.random.default_rng(0).integers(-128, 128, size=(1, 4, 4, 3), dtype=np.int8)


def _resize(out_quant: Quant) -> bytes:
    g = Graph.empty()
    x = g.add_tensor("x", X.shape, "int8", QX)
    y = g.add_tensor("y", (1, 8, 8, 3), "int8", out_quant)
    g.add(g.new_op("RESIZE_BILINEAR", [x, g.constant("size", np.array([8, 8], np.int32), "int32")], [y],
                   "ResizeBilinearOptions", alignCorners=False, halfPixelCenters=False))
    g.set_io([x], [y])
    return g.to_bytes()


def _write(tmp_path: Path, name: str, model: bytes) -> Path:
    (tmp_path / name).write_bytes(model)
    return tmp_path / name


def _io_quant(model: bytes) -> list[Quant]:
    g = Graph(model)
    return [g.quant(t) for t in (*g.sg.inputs, *g.sg.outputs)]


def test_a_resize_output_quantised_apart_from_its_input_takes_its_inputs_quantisation(tmp_path):
    shared, skewed = _resize(QX), _resize(Quant(QX.scale * 0.99, QX.zero_point))
    with pytest.raises(RuntimeError, match="RESIZE_BILINEAR"):
        load_interpreter(_write(tmp_path, "skewed.tflite", skewed))  # XNNPACK refuses, as it does onnx2tf 2.x's file
    fixed, n = share_resize_quantization(skewed)
    assert n == 1 and _io_quant(fixed) == _io_quant(shared)
    load_interpreter(_write(tmp_path, "fixed.tflite", fixed))  # XNNPACK prepares it
    got = run_tflite(tmp_path / "fixed.tflite", X)
    want = run_tflite(_write(tmp_path, "shared.tflite", shared), X)
    assert all(np.array_equal(a, b) for a, b in zip(got, want)), "the same bytes mean what the kernel computed"
    assert share_resize_quantization(shared) == (shared, 0), "a consistent model is returned byte for byte"


def _check_fix(model: bytes, tmp_path: Path, refusal: str | None) -> Path:
    """The reference kernels refuse ``model`` with ``refusal`` (None: they run it, mis-scaled);
    one QUANTIZE op fixes it, and both kernel sets prepare the fixed file."""
    if refusal is not None:
        with pytest.raises(RuntimeError, match=refusal):
            load_interpreter(_write(tmp_path, "skewed.tflite", model), kernels="reference")
    fixed, n = requantize_int8_constraints(model)
    assert n == 1 and sum(Graph(fixed).name(op) == "QUANTIZE" for op in Graph(fixed).ops) == 1
    path = _write(tmp_path, "fixed.tflite", fixed)
    load_interpreter(path, kernels="reference")
    load_interpreter(path)
    return path


def test_a_concat_input_quantised_apart_from_its_output_gets_a_requantise_op(tmp_path):
    """A tensor feeding a CONCATENATION calibrated apart from the concat's output: the kernels
    refuse it; a QUANTIZE op requantises it, as TensorFlow's converter would have, and the file
    computes the concatenation on the output's grid."""
    qout = Quant(0.1, 0)
    c = np.random.default_rng(1).integers(-128, 128, size=X.shape, dtype=np.int8)

    def concat(q_first: Quant) -> bytes:
        g = Graph.empty()
        x = g.add_tensor("x", X.shape, "int8", q_first)
        y = g.add_tensor("y", (1, 4, 4, 6), "int8", qout)
        g.add(g.new_op("CONCATENATION", [x, g.constant("c", c, "int8", qout)], [y], "ConcatenationOptions", axis=3))
        g.set_io([x], [y])
        return g.to_bytes()

    assert requantize_int8_constraints(concat(qout)) == (concat(qout), 0), "a consistent model is returned byte for byte"
    fixed = _check_fix(concat(QX), tmp_path, "CONCATENATION")
    (got,) = run_tflite(fixed, X)
    real = np.concatenate([QX.scale * (X.astype(np.float32) - QX.zero_point), qout.scale * c.astype(np.float32)], axis=3)
    want = np.clip(np.round(real / qout.scale) + qout.zero_point, -128, 127)
    assert np.abs(got.astype(np.int32) - want).max() <= 1  # one requantisation's rounding, at most


def test_a_logistic_quantised_apart_from_its_fixed_scale_gets_a_requantise_op(tmp_path):
    """What onnx2tf 2.x writes for YOLOv8's scores: a LOGISTIC whose int8 output has the scale of
    what it feeds, not TFLite's fixed 1/256. The reference kernels refuse it; the op then writes at
    1/256 and a QUANTIZE takes it to the output's quantisation."""
    qout = Quant(1 / 200, -128)
    g = Graph.empty()
    x = g.add_tensor("x", X.shape, "int8", QX)
    y = g.add_tensor("y", X.shape, "int8", qout)
    g.add(g.new_op("LOGISTIC", [x], [y]))
    g.set_io([x], [y])
    fixed = _check_fix(g.to_bytes(), tmp_path, r"1\. / 256")
    (got,) = run_tflite(fixed, X)
    want = 1 / (1 + np.exp(-QX.scale * (X.astype(np.float32) - QX.zero_point)))
    assert np.abs(qout.scale * (got.astype(np.float32) - qout.zero_point) - want).max() <= 2 / 200  # a step or two


def test_a_split_output_quantised_apart_from_its_input_is_written_at_the_inputs_grid(tmp_path):
    """A SPLIT's int8 outputs must share its input's quantisation: the kernels copy the bytes, so
    an output quantised apart silently means other values. The split then writes at the input's
    grid and a QUANTIZE takes the mismatched output to its own."""
    qout = Quant(0.1, 0)
    g = Graph.empty()
    x = g.add_tensor("x", X.shape, "int8", QX)
    a, b = g.add_tensor("a", (1, 4, 4, 1), "int8", QX), g.add_tensor("b", (1, 4, 4, 2), "int8", qout)
    g.add(g.new_op("SPLIT_V", [x, g.constant("sizes", np.array([1, 2], np.int32), "int32"),
                               g.constant("axis", np.array(3, np.int32), "int32")], [a, b], "SplitVOptions", numSplits=2))
    g.set_io([x], [a, b])
    real = QX.scale * (X[..., 1:].astype(np.float32) - QX.zero_point)
    want = np.clip(np.round(real / qout.scale), -128, 127)
    _, copied = run_tflite(_write(tmp_path, "skewed.tflite", g.to_bytes()), X)
    assert np.abs(copied.astype(np.int32) - want).max() > 1, "mis-scaled: the input's bytes read on another grid"
    first, second = run_tflite(_check_fix(g.to_bytes(), tmp_path, None), X)
    assert np.array_equal(first, X[..., :1])
    assert np.abs(second.astype(np.int32) - want).max() <= 1
