"""int8 -> uint8 (convert/uint8.py): the same arithmetic shifted by 128, op versions a uint8 runtime has."""

from __future__ import annotations

import numpy as np
import pytest

from edgeport.convert.uint8 import PerChannelError, int8_to_uint8
from edgeport.ops.tflite_graph import ACTIVATIONS, Graph, Quant
from edgeport.ops.tflite_run import load_interpreter
from edgeport.ops.tflite_versions import needed_version

QX, QW, QY = Quant(0.02, -5), Quant(0.01, 0), Quant(0.05, 3)


def int8_model(*, per_channel: bool = False, fc_bias: bool = True) -> bytes:
    """int8 CONV_2D -> RESHAPE -> FULLY_CONNECTED -> LOGISTIC, per tensor, as onnx2tf writes it."""
    rng = np.random.default_rng(0)
    g = Graph.empty()
    x = g.add_tensor("x", (1, 4, 4, 3), "int8", QX)
    w = g.constant("w", rng.integers(-127, 128, size=(5, 3, 3, 3), dtype=np.int8), "int8", QW)
    if per_channel:
        q = g.tensor(w).quantization
        q.scale, q.zeroPoint, q.quantizedDimension = [0.01] * 5, [0] * 5, 0
    b = g.constant("b", rng.integers(-300, 300, size=5).astype(np.int32), "int32", Quant(QX.scale * QW.scale, 0))
    c = g.add_tensor("c", (1, 4, 4, 5), "int8", QY)
    g.add(g.new_op("CONV_2D", [x, w, b], [c], "Conv2DOptions", padding=g.schema.Padding.SAME, strideW=1, strideH=1,
                   dilationWFactor=1, dilationHFactor=1, fusedActivationFunction=ACTIVATIONS["RELU"]))
    flat = g.add_tensor("flat", (1, 80), "int8", QY)
    g.add(g.new_op("RESHAPE", [c, g.constant("shape", np.array([1, 80], np.int32), "int32")], [flat], "ReshapeOptions",
                   newShape=[1, 80]))
    fw = g.constant("fw", rng.integers(-127, 128, size=(6, 80), dtype=np.int8), "int8", QW)
    fc = g.add_tensor("fc", (1, 6), "int8", Quant(0.2, 0))
    inputs = [flat, fw] + ([g.constant("fb", np.arange(6, dtype=np.int32), "int32", Quant(QY.scale * QW.scale, 0))]
                           if fc_bias else [])
    g.add(g.new_op("FULLY_CONNECTED", inputs, [fc], "FullyConnectedOptions"))
    y = g.add_tensor("y", (1, 6), "int8", Quant(1 / 256, -128))
    g.add(g.new_op("LOGISTIC", [fc], [y]))
    g.set_io([x], [y])
    for op in g.ops:
        g.set_version(op, needed_version(g, op))
    return g.to_bytes()


def run(model: bytes, x: np.ndarray, tmp_path, name: str) -> np.ndarray:
    path = tmp_path / f"{name}.tflite"
    path.write_bytes(model)
    interp = load_interpreter(path, kernels="reference")
    interp.set_tensor(interp.get_input_details()[0]["index"], x)
    interp.invoke()
    return interp.get_tensor(interp.get_output_details()[0]["index"])


@pytest.mark.parametrize("fc_bias", [True, False])
def test_uint8_is_the_int8_file_shifted_by_128_bit_for_bit(tmp_path, fc_bias):
    int8 = int8_model(fc_bias=fc_bias)
    uint8 = int8_to_uint8(int8)
    x = np.random.default_rng(1).integers(-128, 128, size=(1, 4, 4, 3), dtype=np.int8)
    want = run(int8, x, tmp_path, "int8")
    got = run(uint8, (x.astype(np.int16) + 128).astype(np.uint8), tmp_path, "uint8")
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got.astype(np.int16) - 128, want)


def test_every_int8_tensor_moves_by_128_and_int32_biases_stay():
    int8, uint8 = Graph(int8_model()), Graph(int8_to_uint8(int8_model()))
    for i in range(len(int8.sg.tensors)):
        if int8.dtype(i) == "int8":
            assert uint8.dtype(i) == "uint8" and uint8.quant(i).zero_point == int8.quant(i).zero_point + 128
            assert uint8.quant(i).scale == int8.quant(i).scale
            if int8.const(i) is not None:
                np.testing.assert_array_equal(uint8.const(i).astype(np.int16) - 128, int8.const(i))
        elif int8.const(i) is not None:
            np.testing.assert_array_equal(uint8.const(i), int8.const(i))


def test_a_tensor_without_zero_points_is_read_as_zero_point_0():
    g = Graph(int8_model())
    (x,) = g.sg.inputs
    g.tensor(x).quantization.zeroPoint = None  # the schema's default: 0
    g.tensor(x).quantization.scale = [QX.scale]
    uint8 = Graph(int8_to_uint8(g.to_bytes()))
    assert uint8.quant(x).zero_point == 128 and uint8.quant(x).scale == pytest.approx(QX.scale)


def test_ops_get_the_versions_a_uint8_runtime_has():
    before = Graph(int8_model())
    assert {before.name(op): before.version(op) for op in before.ops} == \
        {"CONV_2D": 3, "RESHAPE": 1, "FULLY_CONNECTED": 4, "LOGISTIC": 2}
    after = Graph(int8_to_uint8(int8_model()))
    assert {after.name(op): after.version(op) for op in after.ops} == {"CONV_2D": 1, "RESHAPE": 1, "FULLY_CONNECTED": 1,
                                                                       "LOGISTIC": 1}


def test_a_fully_connected_without_bias_gets_a_zero_one():
    g = Graph(int8_to_uint8(int8_model(fc_bias=False)))
    (fc,) = [op for op in g.ops if g.name(op) == "FULLY_CONNECTED"]
    assert len(fc.inputs) == 3 and not g.const(fc.inputs[2]).any() and g.dtype(fc.inputs[2]) == "int32"
    assert g.quant(fc.inputs[2]).scale == pytest.approx(g.quant(fc.inputs[0]).scale * g.quant(fc.inputs[1]).scale)


def test_a_per_channel_file_is_refused():
    with pytest.raises(PerChannelError, match="quantised per channel"):
        int8_to_uint8(int8_model(per_channel=True))


def test_a_bias_a_little_off_its_scale_is_put_back_on_it(tmp_path):
    """onnx2tf 2.x writes some biases at a scale a little apart from input x weight; TFLite 1.13
    refuses such a file ("input_product_scale - bias_scale"). The uint8 file's biases sit on it."""
    g = Graph(int8_model())
    (conv,) = [op for op in g.ops if g.name(op) == "CONV_2D"]
    g.tensor(conv.inputs[2]).quantization.scale = [QX.scale * QW.scale * 1.001]
    off = g.to_bytes()
    u = Graph(int8_to_uint8(off))
    (conv,) = [op for op in u.ops if u.name(op) == "CONV_2D"]
    want = np.float32(u.quant(conv.inputs[0]).scale) * np.float32(u.quant(conv.inputs[1]).scale)
    assert abs(u.quant(conv.inputs[2]).scale - want) <= 1e-6 * want
    x = np.random.default_rng(2).integers(-128, 128, size=(1, 4, 4, 3), dtype=np.int8)
    got = run(int8_to_uint8(off), (x.astype(np.int16) + 128).astype(np.uint8), tmp_path, "uint8")
    assert int(np.abs(got.astype(np.int16) - 128 - run(off, x, tmp_path, "int8")).max()) <= 1
