"""Calibration ranges, repaired (convert/ranges.py): a grid far wider than the float32 file's values
at that tensor is set again, with every tensor tied to it, and the biases that read it re-stated."""

from __future__ import annotations

import numpy as np
import pytest

from edgeport.convert.ranges import float_ranges, rerange
from edgeport.ops.tflite_graph import Graph, Quant

from ..ops.test_lowering import finish, run

SHAPE = (1, 4, 4, 3)
X = Quant(1 / 32, 0)
WIDE = Quant(0.5, -128)  # +-64 for ReLU values of 0 to 4: 8 of 256 steps used
W = np.arange(2 * 3).reshape(2, 1, 1, 3).astype(np.float32) / 6 - 0.4  # a 1x1 convolution, 3 -> 2 channels
BIAS = np.array([0.25, -0.5], np.float32)


def _model(dtype: str, a: Quant | None = None, y: Quant | None = None, op: str = "CONV_2D") -> bytes:
    """x -> RELU -> a -> RESHAPE -> a2 -> CONV_2D (1x1, with a bias) -> y; or TRANSPOSE_CONV, the same sum
    (1x1, stride 1), whose data input comes third."""
    g = Graph.empty()
    x = g.add_tensor("x", SHAPE, dtype, X if dtype == "int8" else None)
    ta = g.add_tensor("a", SHAPE, dtype, a)
    ta2 = g.add_tensor("a2", SHAPE, dtype, a)
    ty = g.add_tensor("y", (1, 4, 4, 2), dtype, y)
    if dtype == "int8":
        ws = float(np.abs(W).max() / 127)
        w = g.constant("w", np.rint(W / ws).astype(np.int8), "int8", Quant(ws, 0))
        b = g.constant("b", np.rint(BIAS / (a.scale * ws)).astype(np.int32), "int32", Quant(a.scale * ws, 0))
    else:
        w, b = g.constant("w", W), g.constant("b", BIAS)
    g.add(g.new_op("RELU", [x], [ta]))
    g.add(g.new_op("RESHAPE", [ta, g.constant("shape", np.array(SHAPE, np.int32), "int32")], [ta2], "ReshapeOptions",
                   newShape=list(SHAPE)))
    if op == "TRANSPOSE_CONV":
        shape = g.constant("out_shape", np.array((1, 4, 4, 2), np.int32), "int32")
        g.add(g.new_op(op, [shape, w, ta2, b], [ty], "TransposeConvOptions", padding=g.schema.Padding.VALID, strideW=1, strideH=1))
    else:
        g.add(g.new_op("CONV_2D", [ta2, w, b], [ty], "Conv2DOptions", padding=g.schema.Padding.VALID, strideW=1, strideH=1,
                       dilationWFactor=1, dilationHFactor=1))
    return finish(g, [x], [ty])


@pytest.mark.parametrize("op", ["CONV_2D", "TRANSPOSE_CONV"])
def test_a_wide_grid_is_set_again_with_what_is_tied_to_it_and_its_readers_bias_restated(tmp_path, op):
    (tmp_path / "f.tflite").write_bytes(_model("float32", op=op))
    y = Quant(0.05, 0)
    quantised = _model("int8", WIDE, y, op)
    images = np.random.default_rng(0).uniform(-4, 4, (4, 3, 4, 4)).astype(np.float32)
    ranges = float_ranges(tmp_path / "f.tflite", images, tmp_path)
    assert ranges["a"][0] == 0 and 3.5 < ranges["a"][1] <= 4 and ranges["a"][2] == SHAPE
    fixed = rerange(quantised, ranges)
    assert fixed.tensors == ("a", "a2")  # tied by the RESHAPE: one grid; the output's stays
    g = Graph(fixed.model)
    names = {g.tensor_name(t): t for t in range(len(g.sg.tensors))}
    qa, qa2 = g.quant(names["a"]), g.quant(names["a2"])
    assert qa == qa2 and qa.zero_point == -128 and abs(qa.scale - ranges["a"][1] / 255) < 1e-9
    assert abs(g.quant(names["y"]).scale - y.scale) < 1e-8
    # the bias adds what it added: its integers on the new input scale
    b, was = names["b"], Graph(quantised)
    old = was.const(b) * was.quant(b).scale
    assert np.abs(old - BIAS).max() > 1e-4 and np.abs(g.const(b) * g.quant(b).scale - old).max() <= g.quant(b).scale / 2
    x = np.random.default_rng(1).integers(-128, 128, SHAPE).astype(np.int8)
    want = np.einsum("nhwc,oc->nhwo", np.maximum(X.scale * x, 0), W[:, 0, 0, :]) + BIAS
    (before,) = run(quantised, [x], tmp_path, "before")
    (after,) = run(fixed.model, [x], tmp_path, "after")
    err = [np.abs(y.scale * (o.astype(np.float32) - y.zero_point) - want).max() for o in (before, after)]
    assert err[1] < 0.05 < err[0]


def test_a_grid_that_fits_its_values_and_one_tied_to_an_output_stay_as_they_are(tmp_path):
    (tmp_path / "f.tflite").write_bytes(_model("float32"))
    images = np.random.default_rng(0).uniform(-4, 4, (4, 3, 4, 4)).astype(np.float32)
    ranges = float_ranges(tmp_path / "f.tflite", images, tmp_path)
    fits = _model("int8", Quant(4 / 255, -128), Quant(0.02, 0))
    assert rerange(fits, ranges).tensors == () and rerange(fits, ranges).model == fits
    # the output's grid far too wide: it stays (a file's outputs keep the grid their readers expect)
    wide_out = _model("int8", Quant(4 / 255, -128), Quant(2.0, 0))
    assert rerange(wide_out, ranges).tensors == ()


def _concat(dtype: str, grid: Quant | None = None, *, rename: bool = False) -> bytes:
    """x -> RELU -> a, x -> RELU6 -> b, CONCATENATION(a, b) -> c -> RELU -> y: a, b and c tied by
    the CONCATENATION (an int8 CONCATENATION moves integers); ``rename``: b named as no float tensor is."""
    g = Graph.empty()
    x = g.add_tensor("x", SHAPE, dtype, X if dtype == "int8" else None)
    a = g.add_tensor("a", SHAPE, dtype, grid)
    b = g.add_tensor("b/lowered" if rename else "b", SHAPE, dtype, grid)
    c = g.add_tensor("c", (1, 4, 4, 6), dtype, grid)
    y = g.add_tensor("y", (1, 4, 4, 6), dtype, Quant(10 / 255, -128) if dtype == "int8" else None)
    g.add(g.new_op("RELU", [x], [a]))
    g.add(g.new_op("RELU6", [x], [b]))
    g.add(g.new_op("CONCATENATION", [a, b], [c], "ConcatenationOptions", axis=3))
    g.add(g.new_op("RELU", [c], [y]))
    return finish(g, [x], [y])


def test_tensors_tied_by_an_op_move_together_to_the_range_of_all_of_them(tmp_path):
    (tmp_path / "f.tflite").write_bytes(_concat("float32"))
    images = np.random.default_rng(0).uniform(-8, 8, (4, 3, 4, 4)).astype(np.float32)
    ranges = float_ranges(tmp_path / "f.tflite", images, tmp_path)
    assert ranges["a"][1] > 7 and ranges["b"][1] == 6  # a ReLU to about 8, a ReLU6 to 6
    fixed = rerange(_concat("int8", Quant(1.0, -128)), ranges)  # 0 to 255: 30 times the values' range
    assert fixed.tensors == ("a", "b", "c")
    g = Graph(fixed.model)
    grids = {g.tensor_name(t): g.quant(t) for t in range(len(g.sg.tensors))}
    assert grids["a"] == grids["b"] == grids["c"] and abs(grids["a"].scale - ranges["c"][1] / 255) < 1e-6
    # one member the float32 file lacks (a lowering's tensor): the group keeps its grid
    assert rerange(_concat("int8", Quant(1.0, -128), rename=True), ranges).tensors == ()
