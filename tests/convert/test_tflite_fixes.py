"""Corrections to a converter's int8 output (convert/tflite_fixes.py), on one-op models built
with ``Graph``: each is what onnx2tf 2.x writes (a quantisation a kernel refuses), the kernels'
refusal, the fix, and what the fixed file computes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgeport.convert.tflite_fixes import exact_constants, requantize_int8_constraints, share_resize_quantization
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


# -- exact constants: an elementwise op's constant on a grid that holds its values --------------------

ANCHORS = np.repeat((np.arange(40, dtype=np.float32) + 0.5), 16).reshape(1, 40, 1, 16)  # YOLOv8's anchor centres, 0.5 to 39.5
QA = Quant(39.5 / 255, -128)  # the grid a converter gives them: 255 steps over their range
C = 2  # the constant's tensor in ``_add_constant``'s model


def _add_constant(values: np.ndarray, q: Quant | None) -> bytes:
    """x + c: ``c`` quantised on ``q`` (int8), or float (``q`` None: the float32 file of the same conversion)."""
    g = Graph.empty()
    dtype = "int8" if q is not None else "float32"
    qx, qy = (Quant(0.25, 0), Quant(0.3, -128)) if q is not None else (None, None)
    x = g.add_tensor("x", values.shape, dtype, qx)
    y = g.add_tensor("y", values.shape, dtype, qy)
    c = values if q is None else np.clip(np.round(values / q.scale) + q.zero_point, -128, 127).astype(np.int8)
    g.add(g.new_op("ADD", [x, g.constant("anchors", c, dtype, q)], [y], "AddOptions"))
    g.set_io([x], [y])
    return g.to_bytes()


def test_a_constant_a_grid_holds_exactly_is_put_on_it_and_the_sum_lands_on_the_exact_values(tmp_path):
    rounded, float_file = _add_constant(ANCHORS, QA), _add_constant(ANCHORS, None)
    g = Graph(rounded)
    off = (g.const(C).astype(np.float64) - QA.zero_point) * QA.scale - ANCHORS.ravel().reshape(g.const(C).shape)
    assert np.abs(off).max() > 0.03, "the converter's grid moves an anchor by a tenth of a cell"
    fixed, n = exact_constants(rounded, float_file)
    assert n == 1
    f = Graph(fixed)
    q = f.quant(C)
    assert q == Quant(0.5, -128) and np.array_equal((f.const(C).astype(np.float64) - q.zero_point) * q.scale, ANCHORS)
    x = np.random.default_rng(2).integers(0, 64, size=ANCHORS.shape).astype(np.int8)  # 0 to 16: the sum within the output's range
    want = (x.astype(np.float64) - 0) * 0.25 + ANCHORS  # x on its grid (0.25, 0), plus each anchor exactly

    def error(model: bytes, name: str) -> float:  # |the file's sum - the exact sum|, in output steps
        got = run_tflite(_write(tmp_path, name, model), x)[0].astype(np.float64)
        return float(np.abs((got + 128) * 0.3 - want).max()) / 0.3

    assert error(fixed, "fixed.tflite") <= 0.5 + 1e-9 < error(rounded, "rounded.tflite"), "the exact sum, rounded once"
    assert exact_constants(fixed, float_file) == (fixed, 0), "a constant on its exact grid already is left as it is"


def test_a_constant_divided_by_the_outputs_normalisation_is_found_and_one_without_an_exact_grid_stays():
    """onnx2tf 2.x fuses the output groups' division (by the input size) into the stride constant:
    the float32 file holds 8, 16, 32, the int8 file 8/320, 16/320, 32/320 -- found through the factor.
    A constant no grid holds exactly (a third), or one the float32 file does not say, stays."""
    strides = np.repeat(np.array([8.0, 16.0, 32.0], np.float32), [16, 4, 1]).reshape(1, 21, 1, 1)
    fused = strides / 320
    rounded = _add_constant(fused, Quant(float(fused.max()) / 255, -128))
    fixed, n = exact_constants(rounded, _add_constant(strides, None), factors=[320.0])
    assert n == 1 and Graph(fixed).quant(C) == Quant(float(np.float32(8 / 320)), -128)
    assert exact_constants(rounded, _add_constant(strides, None))[1] == 0, "without the factor, nothing says its values"
    third = np.full((1, 3, 1, 1), 1 / 3, np.float32) * np.array([1, 2, 7], np.float32).reshape(1, 3, 1, 1) ** 0.5
    assert exact_constants(_add_constant(third, Quant(float(third.max()) / 255, -128)), _add_constant(third, None))[1] == 0


def _mul_constant(values: np.ndarray, q: Quant | None, qx: Quant, qy: Quant) -> bytes:
    """x * c: ``c`` quantised on ``q`` (int8), or float (``q`` None)."""
    g = Graph.empty()
    dtype = "int8" if q is not None else "float32"
    x = g.add_tensor("x", values.shape, dtype, qx if q is not None else None)
    y = g.add_tensor("y", values.shape, dtype, qy if q is not None else None)
    c = values if q is None else np.clip(np.round(values / q.scale) + q.zero_point, -128, 127).astype(np.int8)
    g.add(g.new_op("MUL", [x, g.constant("strides", c, dtype, q)], [y], "MulOptions"))
    g.set_io([x], [y])
    return g.to_bytes()


def test_a_mul_constant_keeps_a_grid_its_product_rescales_below_one_on():
    """YOLOv8's strides (8, 16, 32) times a box distance: the coarsest exact grid (a step of 8) would
    rescale the product by 1 or more, which only MUL version 3 runs (not TFLite 1.13): the finest
    exact grid it needs is taken instead, or none."""
    strides = np.repeat(np.array([8.0, 16.0, 32.0], np.float32), [16, 4, 1]).reshape(1, 21, 1, 1)
    rounded_q = Quant(32 / 255, -128)
    qx, qy = Quant(0.05, -128), Quant(0.5, -128)  # the product's rescale: 0.05 x step / 0.5 < 1 for a step under 10
    fixed, n = exact_constants(_mul_constant(strides, rounded_q, qx, qy), _mul_constant(strides, None, qx, qy))
    assert n == 1 and Graph(fixed).quant(C).scale == 8.0
    qx = Quant(0.5, -128)  # now the step must stay under 1: 8/9 is the coarsest exact one
    fixed, n = exact_constants(_mul_constant(strides, rounded_q, qx, qy), _mul_constant(strides, None, qx, qy))
    q = Graph(fixed).quant(C)
    assert n == 1 and q.scale == pytest.approx(8 / 9) and q.scale * qx.scale / qy.scale < 1
    # MobileNetV3's hard-sigmoid: x * 1/6 onto a grid a sixth of x's: the exact grid of 1/6 would rescale by 1
    # to float32 rounding, which TFLite 1.13.1 aborts on; half of it is taken
    sixth = np.full((1, 4, 1, 1), 1 / 6, np.float32)
    qx = Quant(0.013008, 0)
    qy = Quant(float(np.nextafter(np.float32(0.013008 * float(np.float32(1 / 6))), np.float32(1))), 0)  # a rescale of 1 - 1e-7
    fixed, n = exact_constants(_mul_constant(sixth, Quant(float(np.float32(1 / 6)) / 255, -128), qx, qy),
                               _mul_constant(sixth, None, qx, qy))
    assert n == 1 and Graph(fixed).quant(C).scale == pytest.approx(1 / 12)
