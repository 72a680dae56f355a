"""Every lowering rule (ops/lowering): a one-op model, lowered as for TFLite 1.13, computes what the
op computes -- on today's reference kernels here, and on the real TFLite 1.13.1 (slow, where
`make setup-boards` installed it) -- and the mechanism around the rules."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from edgeport.ops.lowering.registry import RULES, lower_for_board
from edgeport.ops.tflite_graph import ACTIVATIONS, Graph, Quant
from edgeport.ops.tflite_model import read_tflite
from edgeport.ops.tflite_run import load_interpreter
from edgeport.ops.tflite_versions import needed_version
from edgeport.validate.board.profiles import check_model, load_board

OLD = load_board("tflite-1.13")
QIN, QOUT = Quant(0.05, 120), Quant(0.04, 110)


def finish(g: Graph, inputs: list[int], outputs: list[int]) -> bytes:
    g.set_io(inputs, outputs)
    for op in g.ops:  # each op at the version it needs, as a converter writes it
        g.set_version(op, needed_version(g, op) or 1)
    return g.to_bytes()


def run(model: bytes, xs: list[np.ndarray], tmp_path, name: str = "m") -> list[np.ndarray]:
    path = tmp_path / f"{name}.tflite"
    path.write_bytes(model)
    interp = load_interpreter(path, kernels="reference")
    for d, x in zip(interp.get_input_details(), xs):
        interp.set_tensor(d["index"], x)
    interp.invoke()
    return [interp.get_tensor(d["index"]).copy() for d in interp.get_output_details()]


def lowered(model: bytes, tmp_path, *, rule: str) -> bytes:
    result = lower_for_board(model, OLD.lacks)
    assert result.rules == {rule: 1} and not result.left, result.describe()
    (tmp_path / "lowered.tflite").write_bytes(result.model)
    assert check_model(read_tflite(tmp_path / "lowered.tflite"), OLD) == []
    return result.model


def rng(seed=0):
    return np.random.default_rng(seed)


# -- one-op models ------------------------------------------------------------------------------------


def unary(name: str, shape, dtype="float32", qin=None, qout=None, options=None, **fields) -> bytes:
    g = Graph.empty()
    x = g.add_tensor("x", shape, dtype, qin)
    y = g.add_tensor("y", shape, dtype, qout)
    g.add(g.new_op(name, [x], [y], options, **fields))
    return finish(g, [x], [y])


def _prelu(shape, slopes: np.ndarray, qin: Quant, qout: Quant) -> bytes:
    g = Graph.empty()
    x, y = g.add_tensor("x", shape, "uint8", qin), g.add_tensor("y", shape, "uint8", qout)
    lo, hi = min(float(slopes.min()), 0.0), max(float(slopes.max()), 0.0)
    qa = Quant((hi - lo) / 255, int(round(-lo / ((hi - lo) / 255))))
    alpha = g.constant("alpha", (np.round(slopes / qa.scale) + qa.zero_point).astype(np.uint8), "uint8", qa)
    g.add(g.new_op("PRELU", [x, alpha], [y]))
    return finish(g, [x], [y])


LEAKY_IN, LEAKY_OUT = Quant(8 / 255, 160), Quant(5.5 / 255, 40)
# slopes as MTCNN's trained P-Net learned them: below 0 and above 1 (max(x, a x) is not prelu there)
SIGNED_SLOPES = np.array([[[-1.25, -0.3, 0.4, 1.01]]], np.float32)


def resize(name: str, shape, k: int, dtype="float32", q=None, half_pixel=True) -> bytes:
    n, h, w, c = shape
    g = Graph.empty()
    x = g.add_tensor("x", shape, dtype, q)
    y = g.add_tensor("y", (n, k * h, k * w, c), dtype, q)
    size = g.constant("size", np.array([k * h, k * w], np.int32), "int32")
    options = "ResizeBilinearOptions" if name == "RESIZE_BILINEAR" else "ResizeNearestNeighborOptions"
    g.add(g.new_op(name, [x, size], [y], options, alignCorners=False, halfPixelCenters=half_pixel))
    return finish(g, [x], [y])


def grouped_conv(shape, groups: int, cout: int, dtype="float32", act="RELU6") -> tuple[bytes, np.ndarray, np.ndarray]:
    n, h, w, cin = shape
    weights = rng(1).normal(size=(cout, 3, 3, cin // groups)).astype(np.float32)
    bias = rng(2).normal(size=cout).astype(np.float32)
    g = Graph.empty()
    if dtype == "float32":
        x = g.add_tensor("x", shape, "float32")
        y = g.add_tensor("y", (n, h, w, cout), "float32")
        wt, bt = g.constant("w", weights), g.constant("b", bias)
    else:
        qw = Quant(float(np.abs(weights).max()) / 127, 128)
        x = g.add_tensor("x", shape, "uint8", QIN)
        y = g.add_tensor("y", (n, h, w, cout), "uint8", Quant(0.05, 10))
        wt = g.constant("w", np.clip(np.round(weights / qw.scale) + 128, 0, 255).astype(np.uint8), "uint8", qw)
        bt = g.constant("b", np.round(bias / (QIN.scale * qw.scale)).astype(np.int32), "int32", Quant(QIN.scale * qw.scale, 0))
    g.add(g.new_op("CONV_2D", [x, wt, bt], [y], "Conv2DOptions", padding=g.schema.Padding.SAME, strideW=1, strideH=1,
                   dilationWFactor=1, dilationHFactor=1, fusedActivationFunction=ACTIVATIONS[act]))
    return finish(g, [x], [y]), weights, bias


def torch_grouped(x_nhwc: np.ndarray, weights, bias, groups, act="RELU6") -> np.ndarray:
    x = torch.from_numpy(x_nhwc).permute(0, 3, 1, 2)
    w = torch.from_numpy(weights).permute(0, 3, 1, 2)
    y = F.conv2d(x, w, torch.from_numpy(bias), padding=1, groups=groups)
    y = y.clamp(0, 6) if act == "RELU6" else y
    return y.permute(0, 2, 3, 1).numpy()


def quantise(x: np.ndarray, q: Quant, dtype=np.uint8) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.clip(np.round(x / q.scale) + q.zero_point, info.min, info.max).astype(dtype)


def dequantise(q: np.ndarray, quant: Quant) -> np.ndarray:
    return (q.astype(np.float64) - quant.zero_point) * quant.scale


# -- float32: the same values ----------------------------------------------------------------------


def test_hard_swish_is_pytorchs_hardswish_bit_for_bit(tmp_path):
    values = np.frombuffer(np.arange(2**16, dtype=np.uint16).tobytes(), np.float16).astype(np.float32)
    values = values[np.isfinite(values)]
    x = np.resize(values, (1, 1, len(values) // 4 + 1, 4)).astype(np.float32)
    model = lowered(unary("HARD_SWISH", x.shape), tmp_path, rule="hard_swish")
    (got,) = run(model, [x], tmp_path)
    np.testing.assert_array_equal(got, F.hardswish(torch.from_numpy(x)).numpy())


def test_relu_0_to_1_is_a_clamp_to_0_1(tmp_path):
    x = rng().normal(scale=2, size=(1, 5, 5, 3)).astype(np.float32)
    model = lowered(unary("RELU_0_TO_1", x.shape), tmp_path, rule="relu_0_to_1")
    (got,) = run(model, [x], tmp_path)
    np.testing.assert_array_equal(got, np.clip(x, 0, 1))


@pytest.mark.parametrize("k", [2, 3, 4, 5, 8])
@pytest.mark.parametrize("hw", [(1, 1), (3, 5), (6, 4)])
def test_half_pixel_bilinear_by_any_integer_factor_is_pytorchs(tmp_path, k, hw):
    x = rng(k).normal(size=(1, *hw, 3)).astype(np.float32)
    model = lowered(resize("RESIZE_BILINEAR", x.shape, k), tmp_path, rule="resize_bilinear_half_pixel")
    (got,) = run(model, [x], tmp_path)
    want = F.interpolate(torch.from_numpy(x).permute(0, 3, 1, 2), scale_factor=k, mode="bilinear", align_corners=False)
    np.testing.assert_allclose(got, want.permute(0, 2, 3, 1).numpy(), rtol=0, atol=1e-6 * np.abs(x).max())


@pytest.mark.parametrize("k", [2, 3, 4])
def test_half_pixel_nearest_by_an_integer_factor_is_version_1(tmp_path, k):
    x = rng(k).normal(size=(1, 3, 5, 2)).astype(np.float32)
    model = lowered(resize("RESIZE_NEAREST_NEIGHBOR", x.shape, k), tmp_path, rule="resize_nearest_half_pixel")
    (got,) = run(model, [x], tmp_path)
    want = F.interpolate(torch.from_numpy(x).permute(0, 3, 1, 2), scale_factor=k, mode="nearest")
    np.testing.assert_array_equal(got, want.permute(0, 2, 3, 1).numpy())


@pytest.mark.parametrize("groups, cin, cout", [(2, 4, 6), (4, 8, 8), (3, 6, 3)])
def test_a_grouped_convolution_is_one_convolution_per_group(tmp_path, groups, cin, cout):
    x = rng().normal(size=(1, 5, 6, cin)).astype(np.float32)
    model, weights, bias = grouped_conv(x.shape, groups, cout)
    (got,) = run(lowered(model, tmp_path, rule="grouped_conv"), [x], tmp_path)
    np.testing.assert_allclose(got, torch_grouped(x, weights, bias, groups), rtol=0, atol=1e-5)


def test_a_grouped_convolution_declared_v1_is_lowered_too(tmp_path):
    # onnx2tf 2.x writes grouped convolutions as CONV_2D v1: the gate reads what it computes
    model, weights, bias = grouped_conv((1, 4, 4, 4), 2, 4)
    g = Graph(model)
    g.set_version(g.ops[0], 1)
    (got,) = run(lowered(g.to_bytes(), tmp_path, rule="grouped_conv"), [np.ones((1, 4, 4, 4), np.float32)], tmp_path)
    np.testing.assert_allclose(got, torch_grouped(np.ones((1, 4, 4, 4), np.float32), weights, bias, 2), atol=1e-5)


def fully_connected(x_shape, n: int, *, keep: bool, bias: bool, dtype="float32") -> bytes:
    g = Graph.empty()
    k = x_shape[-1]
    weights = rng(4).normal(size=(n, k)).astype(np.float32)
    out_shape = (*x_shape[:-1], n) if keep else (int(np.prod(x_shape[:-1])), n)
    if dtype == "float32":
        x, y = g.add_tensor("x", x_shape, "float32"), g.add_tensor("y", out_shape, "float32")
        inputs = [x, g.constant("w", weights)] + ([g.constant("b", np.arange(n, dtype=np.float32))] if bias else [])
    else:
        qw = Quant(float(np.abs(weights).max()) / 127, 128)
        x, y = g.add_tensor("x", x_shape, "uint8", QIN), g.add_tensor("y", out_shape, "uint8", Quant(0.3, 128))
        inputs = [x, g.constant("w", quantise(weights, qw), "uint8", qw)]
        if bias:
            inputs.append(g.constant("b", np.arange(n, dtype=np.int32) * 50, "int32", Quant(QIN.scale * qw.scale, 0)))
    g.add(g.new_op("FULLY_CONNECTED", inputs, [y], "FullyConnectedOptions", keepNumDims=keep))
    return finish(g, [x], [y])


@pytest.mark.parametrize("keep, bias", [(True, True), (True, False), (False, False)])
def test_fully_connected_keep_num_dims_and_no_bias_as_version_1(tmp_path, keep, bias):
    x = rng().normal(size=(1, 3, 4, 5)).astype(np.float32)
    model = fully_connected(x.shape, 6, keep=keep, bias=bias)
    (want,) = run(model, [x], tmp_path, "original")
    (got,) = run(lowered(model, tmp_path, rule="fully_connected_v1"), [x], tmp_path)
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=0, atol=1e-6 * np.abs(want).max())
    assert got.shape == want.shape


def transpose_conv(dtype="float32", bias=True) -> bytes:
    g = Graph.empty()
    weights = rng(5).normal(size=(3, 2, 2, 4)).astype(np.float32)
    if dtype == "float32":
        x, y = g.add_tensor("x", (1, 3, 5, 4), "float32"), g.add_tensor("y", (1, 6, 10, 3), "float32")
        w = g.constant("w", weights)
        b = g.constant("b", np.array([0.5, -1.0, 2.0], np.float32))
    else:
        qw = Quant(float(np.abs(weights).max()) / 127, 128)
        x, y = g.add_tensor("x", (1, 3, 5, 4), "uint8", QIN), g.add_tensor("y", (1, 6, 10, 3), "uint8", Quant(0.1, 128))
        w = g.constant("w", quantise(weights, qw), "uint8", qw)
        b = g.constant("b", np.array([30, -60, 90], np.int32), "int32", Quant(QIN.scale * qw.scale, 0))
    shape = g.constant("shape", np.array([1, 6, 10, 3], np.int32), "int32")
    g.add(g.new_op("TRANSPOSE_CONV", [shape, w, x] + ([b] if bias else []), [y], "TransposeConvOptions",
                   padding=g.schema.Padding.VALID, strideW=2, strideH=2))
    return finish(g, [x], [y])


def test_transpose_conv_with_a_bias_as_version_1_and_add(tmp_path):
    x = rng().normal(size=(1, 3, 5, 4)).astype(np.float32)
    model = transpose_conv()
    (want,) = run(model, [x], tmp_path, "original")
    (got,) = run(lowered(model, tmp_path, rule="transpose_conv_bias"), [x], tmp_path)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * np.abs(want).max())


QPRODUCT = Quant(0.5, 128)


def batch_matmul(a_shape, b_shape, adj_x=False, adj_y=False, dtype="float32", q=(QIN, QIN, QPRODUCT)) -> bytes:
    g = Graph.empty()
    m = a_shape[-1] if adj_x else a_shape[-2]
    n = b_shape[-2] if adj_y else b_shape[-1]
    quant = q if dtype == "uint8" else (None, None, None)
    a, b = g.add_tensor("a", a_shape, dtype, quant[0]), g.add_tensor("b", b_shape, dtype, quant[1])
    y = g.add_tensor("y", (*a_shape[:-2], m, n), dtype, quant[2])
    g.add(g.new_op("BATCH_MATMUL", [a, b], [y], "BatchMatMulOptions", adjX=adj_x, adjY=adj_y))
    return finish(g, [a, b], [y])


@pytest.mark.parametrize("a_shape, b_shape, adj_x, adj_y", [
    ((1, 2, 5, 3), (1, 2, 3, 4), False, False),  # P V
    ((1, 2, 5, 3), (1, 2, 4, 3), False, True),  # Q K^T
    ((2, 3, 4), (2, 3, 5), True, False),
    ((4, 6), (6, 2), False, False),
])
def test_batch_matmul_as_one_fully_connected_per_batch_entry(tmp_path, a_shape, b_shape, adj_x, adj_y):
    a = rng(1).normal(size=a_shape).astype(np.float32)
    b = rng(2).normal(size=b_shape).astype(np.float32)
    model = batch_matmul(a_shape, b_shape, adj_x, adj_y)
    (want,) = run(model, [a, b], tmp_path, "original")
    (got,) = run(lowered(model, tmp_path, rule="batch_matmul_as_fully_connected"), [a, b], tmp_path)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())
    np.testing.assert_allclose(got, np.swapaxes(a, -1, -2) @ b if adj_x else a @ (np.swapaxes(b, -1, -2) if adj_y else b),
                               atol=1e-5 * np.abs(want).max())


# -- uint8: within a step of today's kernels on the same op ------------------------------------------


def steps(a: np.ndarray, b: np.ndarray) -> int:
    return int(np.abs(a.astype(np.int32) - b.astype(np.int32)).max())


@pytest.mark.parametrize("k", [2, 3, 4])
def test_uint8_half_pixel_bilinear_is_within_a_step_of_the_v3_kernel(tmp_path, k):
    x = rng(k).integers(0, 256, size=(1, 4, 5, 3), dtype=np.uint8)
    model = resize("RESIZE_BILINEAR", x.shape, k, "uint8", QIN)
    (want,) = run(model, [x], tmp_path, "original")
    (got,) = run(lowered(model, tmp_path, rule="resize_bilinear_half_pixel"), [x], tmp_path)
    assert steps(got, want) <= 1


def test_uint8_grouped_convolution_is_within_a_step_of_the_exact_one(tmp_path):
    x = rng().integers(0, 256, size=(1, 4, 4, 4), dtype=np.uint8)
    model, _, _ = grouped_conv(x.shape, 2, 4, dtype="uint8")
    (got,) = run(lowered(model, tmp_path, rule="grouped_conv"), [x], tmp_path)
    g = Graph(model)
    (conv,) = g.ops
    w, b = conv.inputs[1], conv.inputs[2]
    weights = dequantise(g.const(w), g.quant(w)).astype(np.float32)
    bias = (g.const(b) * g.quant(b).scale).astype(np.float32)
    exact = torch_grouped(dequantise(x, QIN).astype(np.float32), weights, bias, 2)  # in real numbers, then quantised once
    assert steps(got, quantise(exact, Quant(0.05, 10))) <= 1


def test_uint8_fully_connected_without_a_bias_gets_a_zero_one(tmp_path):
    x = rng().integers(0, 256, size=(1, 3, 4, 5), dtype=np.uint8)
    model = fully_connected(x.shape, 6, keep=True, bias=False, dtype="uint8")
    (want,) = run(model, [x], tmp_path, "original")
    (got,) = run(lowered(model, tmp_path, rule="fully_connected_v1"), [x], tmp_path)
    assert got.shape == want.shape and steps(got, want) == 0


def test_uint8_transpose_conv_as_a_1x1_convolution_and_a_shuffle(tmp_path):
    x = rng().integers(0, 256, size=(1, 3, 5, 4), dtype=np.uint8)
    model = transpose_conv("uint8")
    (want,) = run(model, [x], tmp_path, "original")
    (got,) = run(lowered(model, tmp_path, rule="transpose_conv_as_conv"), [x], tmp_path)
    assert steps(got, want) <= 1


def test_uint8_batch_matmul_is_within_a_step_of_the_product(tmp_path):
    a = rng(1).integers(0, 256, size=(1, 2, 5, 3), dtype=np.uint8)
    b = rng(2).integers(0, 256, size=(1, 2, 4, 3), dtype=np.uint8)
    model = batch_matmul(a.shape, b.shape, adj_y=True, dtype="uint8")
    (got,) = run(lowered(model, tmp_path, rule="batch_matmul_as_fully_connected"), [a, b], tmp_path)
    product = dequantise(a, QIN) @ np.swapaxes(dequantise(b, QIN), -1, -2)
    assert steps(got, quantise(product, Quant(0.5, 128))) <= 1


def test_uint8_requantize_as_a_one_input_concatenation(tmp_path):
    x = np.arange(256, dtype=np.uint8).reshape(1, 4, 8, 8)
    model = unary("QUANTIZE", x.shape, "uint8", QIN, QOUT)
    (want,) = run(model, [x], tmp_path, "original")
    (got,) = run(lowered(model, tmp_path, rule="requantize_as_concatenation"), [x], tmp_path)
    assert steps(got, want) <= 1


# a pose head's visibility logits, as onnx2tf quantised them: a grid finer than 2^-12
FINE = Quant(2.1127e-4, 136)
SIGMOID_OUT, TANH_OUT = Quant(1 / 256, 0), Quant(1 / 128, 128)


@pytest.mark.parametrize("op, qout", [("LOGISTIC", SIGMOID_OUT), ("TANH", TANH_OUT)])
def test_uint8_logistic_and_tanh_on_a_fine_input_grid_requantise_it_first(tmp_path, op, qout):
    x = np.arange(256, dtype=np.uint8).reshape(1, 4, 8, 8)
    model = unary(op, x.shape, "uint8", FINE, qout)
    (tmp_path / "original.tflite").write_bytes(model)
    (reason,) = check_model(read_tflite(tmp_path / "original.tflite"), OLD)
    assert f"{op} v1 (fine_input) on uint8: tflite-1.13's kernel computes it wrongly for an input scale under 2^-12" in reason
    (want,) = run(model, [x], tmp_path, "original")
    (got,) = run(lowered(model, tmp_path, rule=f"{op.lower()}_fine_input"), [x], tmp_path)
    assert steps(got, want) <= 1
    # on a grid of 2^-12 the board's own kernel is right: nothing to lower
    assert not lower_for_board(unary(op, x.shape, "uint8", Quant(2.0**-12, 128), qout), OLD.lacks).changed


def mean(shape, keep=True, axes=(1, 2), qout=Quant(0.01, 100)) -> bytes:  # noqa: B008 - a frozen value
    g = Graph.empty()
    x = g.add_tensor("x", shape, "uint8", QIN)
    c = shape[3] if tuple(axes) == (1, 2) else shape[1]
    kept = (1, 1, 1, c) if tuple(axes) == (1, 2) else (1, c, 1, 1)
    y = g.add_tensor("y", kept if keep else (1, c), "uint8", qout)
    g.add(g.new_op("MEAN", [x, g.constant("axes", np.array(axes, np.int32), "int32")], [y], "ReducerOptions", keepDims=keep))
    return finish(g, [x], [y])


@pytest.mark.parametrize("keep, hw", [(True, (5, 7)), (False, (5, 7)), (True, (32, 32))])
def test_uint8_global_mean_as_a_depthwise_sum_clamps(tmp_path, keep, hw):
    x = rng().integers(0, 256, size=(1, *hw, 4), dtype=np.uint8)
    x[..., 0], x[..., 1] = 0, 255  # means outside the output's range: clamped, never wrapped
    model = mean(x.shape, keep)
    (want,) = run(model, [x], tmp_path, "original")
    (got,) = run(lowered(model, tmp_path, rule="mean_as_depthwise"), [x], tmp_path)
    assert got.shape == want.shape and steps(got, want) <= 1
    assert got.ravel()[0] == 0 and got.ravel()[1] == 255


def summed(shape, axis: int, qout) -> bytes:
    g = Graph.empty()
    x = g.add_tensor("x", shape, "uint8", QIN)
    y = g.add_tensor("y", tuple(v for i, v in enumerate(shape) if i != axis), "uint8", qout)
    g.add(g.new_op("SUM", [x, g.constant("axes", np.array([axis], np.int32), "int32")], [y], "ReducerOptions", keepDims=False))
    return finish(g, [x], [y])


@pytest.mark.parametrize("shape, axis", [((1, 2, 4, 6, 3), 3), ((1, 5, 7), 2), ((1, 4, 4, 3), 1)])
def test_uint8_sum_over_an_axis_as_a_depthwise_sum_clamps(tmp_path, shape, axis):
    x = rng().integers(0, 256, size=shape, dtype=np.uint8)
    model = summed(shape, axis, Quant(0.2, 60))
    (want,) = run(model, [x], tmp_path, "original")
    (got,) = run(lowered(model, tmp_path, rule="sum_as_depthwise"), [x], tmp_path)
    assert got.shape == want.shape and steps(got, want) <= 1


def test_uint8_channels_first_mean_and_a_fine_output_grid(tmp_path):
    x = rng().integers(0, 256, size=(1, 6, 3, 2), dtype=np.uint8)  # NCHW: a mean over H and W (axes 2, 3)
    model = mean(x.shape, axes=(2, 3), qout=Quant(0.004, 120))  # 0.05 / (6 * 0.004) > 1: a filter tap of 3
    (want,) = run(model, [x], tmp_path, "original")
    (got,) = run(lowered(model, tmp_path, rule="mean_as_depthwise"), [x], tmp_path)
    assert got.shape == want.shape and steps(got, want) <= 1


# -- the mechanism ------------------------------------------------------------------------------------


def test_a_file_the_board_runs_is_returned_byte_for_byte():
    model = unary("RELU", (1, 2, 2, 1))
    result = lower_for_board(model, OLD.lacks)
    assert result.model is model and not result.changed


def test_declared_versions_become_the_versions_the_ops_need():
    # TensorFlow's converter declares CONV_2D v6 for every convolution once one is grouped
    model, _, _ = grouped_conv((1, 4, 4, 4), 1, 4)
    g = Graph(model)
    g.set_version(g.ops[0], 6)
    result = lower_for_board(g.to_bytes(), OLD.lacks)
    assert result.rules == {} and result.reversioned == 1
    assert [(o.name, o.version) for o in read_tflite_bytes(result.model).ops] == [("CONV_2D", 1)]


def test_what_no_rule_covers_is_left_for_the_gate_named():
    model = unary("GELU", (1, 2, 2, 3), options="GeluOptions")
    result = lower_for_board(model, OLD.lacks)
    assert result.model is model and result.left == ("GELU v1",) and "left for the gate: GELU v1" in result.describe()


def test_a_rule_whose_ops_the_board_lacks_is_not_used():
    def lacks_depthwise(name, version, needs, dtype, notes):
        return name in ("DEPTHWISE_CONV_2D", "RESIZE_BILINEAR") and (name == "DEPTHWISE_CONV_2D" or bool(needs and needs > 1))

    result = lower_for_board(resize("RESIZE_BILINEAR", (1, 3, 3, 2), 2), lacks_depthwise)
    assert result.left == ("RESIZE_BILINEAR v3",) and not result.rules


def test_every_rule_names_its_proof_and_the_types_it_handles():
    assert len({r.name for r in RULES}) == len(RULES)
    for rule in RULES:
        assert rule.proof and set(rule.dtypes) <= {"float32", "uint8", "int8"}, rule.name


def read_tflite_bytes(model: bytes):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.tflite"
        path.write_bytes(model)
        return read_tflite(path)


# -- on the real TFLite 1.13.1 ----------------------------------------------------------------------


def _one_input_cases():
    """(id, model, input, float?) for every rule, each model with one input (the board worker's)."""
    f = rng().normal(size=(1, 4, 5, 4)).astype(np.float32)
    u = rng().integers(0, 256, size=(1, 4, 5, 4), dtype=np.uint8)
    return [
        ("hard_swish", unary("HARD_SWISH", f.shape), f),
        ("relu_0_to_1", unary("RELU_0_TO_1", f.shape), f),
        *[(f"bilinear_x{k}", resize("RESIZE_BILINEAR", f.shape, k), f) for k in (2, 3, 4)],
        *[(f"bilinear_x{k}_uint8", resize("RESIZE_BILINEAR", u.shape, k, "uint8", QIN), u) for k in (2, 3)],
        ("nearest_x2", resize("RESIZE_NEAREST_NEIGHBOR", f.shape, 2), f),
        ("grouped_conv", grouped_conv(f.shape, 2, 6)[0], f),
        ("grouped_conv_uint8", grouped_conv(u.shape, 2, 6, dtype="uint8")[0], u),
        ("fully_connected", fully_connected(f.shape, 6, keep=True, bias=False), f),
        ("fully_connected_uint8", fully_connected(u.shape, 6, keep=True, bias=False, dtype="uint8"), u),
        ("transpose_conv", transpose_conv(), rng().normal(size=(1, 3, 5, 4)).astype(np.float32)),
        ("transpose_conv_uint8", transpose_conv("uint8"), rng().integers(0, 256, size=(1, 3, 5, 4), dtype=np.uint8)),
        ("attention", _self_attention(f.shape, "float32"), f),
        ("attention_uint8", _self_attention(u.shape, "uint8"), u),
        ("requantize_uint8", unary("QUANTIZE", u.shape, "uint8", QIN, QOUT), u),
        ("logistic_fine_input_uint8", unary("LOGISTIC", u.shape, "uint8", FINE, SIGMOID_OUT), u),
        ("tanh_fine_input_uint8", unary("TANH", u.shape, "uint8", FINE, TANH_OUT), u),
        ("hard_swish_uint8", unary("HARD_SWISH", u.shape, "uint8", Quant(8 / 255, 128), Quant(6.5 / 255, 10)), u),
        ("relu_uint8", unary("RELU", u.shape, "uint8", QIN, Quant(0.03, 0)), u),
        ("leaky_relu_uint8", unary("LEAKY_RELU", u.shape, "uint8", LEAKY_IN, LEAKY_OUT, "LeakyReluOptions", alpha=0.1), u),
        ("prelu_uint8", _prelu(u.shape, np.array([[[0.05, 0.25, 0.5, 0.9]]], np.float32), LEAKY_IN, LEAKY_OUT), u),
        ("prelu_uint8_signed", _prelu(u.shape, SIGNED_SLOPES, LEAKY_IN, LEAKY_OUT), u),
        ("hard_sigmoid_clamp_uint8", unary("RELU_0_TO_1", u.shape, "uint8", QIN, Quant(1 / 255, 0)), u),
        ("mean_uint8", mean(u.shape), np.concatenate([np.zeros_like(u[..., :1]), np.full_like(u[..., :1], 255), u[..., 2:]], -1)),
        # a window of 32 x 32: TFLite 1.13.1's uint8 AVERAGE_POOL_2D returns zeros there
        ("mean_uint8_32x32", mean((1, 32, 32, 4)), rng(3).integers(0, 256, size=(1, 32, 32, 4), dtype=np.uint8)),
        ("mean_uint8_channels_first", mean((1, 6, 3, 2), axes=(2, 3), qout=Quant(0.004, 120)),
         rng(4).integers(0, 256, size=(1, 6, 3, 2), dtype=np.uint8)),
        ("sum_uint8_5d", summed((1, 2, 4, 6, 3), 3, Quant(0.2, 60)), rng(5).integers(0, 256, size=(1, 2, 4, 6, 3), dtype=np.uint8)),
    ]


def _self_attention(shape, dtype) -> bytes:
    """x x^T per row of the image: BATCH_MATMUL of one activation with itself (adj_y)."""
    g = Graph.empty()
    q = QIN if dtype == "uint8" else None
    x = g.add_tensor("x", shape, dtype, q)
    y = g.add_tensor("y", (*shape[:-1], shape[-2]), dtype, Quant(0.5, 128) if q else None)
    g.add(g.new_op("BATCH_MATMUL", [x, x], [y], "BatchMatMulOptions", adjX=False, adjY=True))
    return finish(g, [x], [y])


@pytest.mark.slow
@pytest.mark.parametrize("case", [c[0] for c in _one_input_cases()])
def test_every_lowered_op_runs_on_the_real_tflite_113_as_on_todays_kernels(tmp_path, case):
    from edgeport.validate.board.runtime import LocalPython, installed_python

    python = installed_python(OLD)
    if python is None:
        pytest.skip("the real TFLite 1.13.1 is not installed: `make setup-boards` (needs a python3.7)")
    _, model, x = next(c for c in _one_input_cases() if c[0] == case)
    low = lower_for_board(model, OLD.lacks)
    assert low.changed and not low.left, low.describe()
    (want,) = run(low.model, [x], tmp_path)
    folder = tmp_path / "board"
    (folder / "inputs").mkdir(parents=True)
    (folder / "model.tflite").write_bytes(low.model)
    np.save(folder / "inputs" / "0000.npy", x)
    result = LocalPython(python, what="TFLite 1.13.1").execute(folder, "run")
    assert result["ok"], result
    got = np.load(folder / "outputs" / "0000_0.npy")
    assert result["repeat_max_abs"] == 0.0  # a second invoke answers the same
    if x.dtype == np.uint8:
        assert steps(got, want) <= 1
    else:
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * max(float(np.abs(want).max()), 1.0))


def test_uint8_hard_swish_is_within_a_step_of_todays_kernel(tmp_path):
    x = np.arange(256, dtype=np.uint8).reshape(1, 4, 8, 8)
    model = unary("HARD_SWISH", x.shape, "uint8", Quant(8 / 255, 128), Quant(6.5 / 255, 10))
    (want,) = run(model, [x], tmp_path, "original")
    (got,) = run(lowered(model, tmp_path, rule="hard_swish_uint8"), [x], tmp_path)
    exact = F.hardswish(torch.from_numpy(dequantise(x, Quant(8 / 255, 128)))).numpy()
    assert steps(got, want) <= 1 and steps(got, quantise(exact, Quant(6.5 / 255, 10))) <= 1


@pytest.mark.parametrize("op, qout", [("RELU", Quant(0.03, 0)), ("RELU_0_TO_1", Quant(1 / 255, 0)),
                                      ("RELU_N1_TO_1", Quant(1 / 128, 128))])
def test_uint8_clamps_inside_their_output_grid_are_requantisations(tmp_path, op, qout):
    x = np.arange(256, dtype=np.uint8).reshape(1, 4, 8, 8)
    model = unary(op, x.shape, "uint8", QIN, qout)
    (want,) = run(model, [x], tmp_path, "original")
    (got,) = run(lowered(model, tmp_path, rule=f"{op.lower()}_as_requantize"), [x], tmp_path)
    assert steps(got, want) <= 1


def test_a_uint8_clamp_whose_grid_reaches_past_it_is_not_a_requantisation():
    model = unary("RELU_0_TO_1", (1, 2, 2, 1), "uint8", QIN, Quant(2 / 255, 0))  # [0, 2]: the clamp at 1 matters
    assert lower_for_board(model, OLD.lacks).left == ("RELU_0_TO_1 v1",)


def test_a_version_is_never_moved_down_past_what_the_table_models():
    # GATHER v5 (batch_dims) declared: this table knows GATHER up to v2, so v5 stays, and the gate
    # names it, rather than a v1 that TFLite 1.13.1 would run ignoring batch_dims
    g = Graph.empty()
    x, i = g.add_tensor("x", (2, 3, 4), "float32"), g.constant("i", np.zeros((2, 2), np.int32), "int32")
    y = g.add_tensor("y", (2, 2, 4), "float32")
    g.add(g.new_op("GATHER", [x, i], [y], "GatherOptions", axis=1, batchDims=1))
    g.set_io([x], [y])
    g.set_version(g.ops[0], 5)
    result = lower_for_board(g.to_bytes(), OLD.lacks)
    assert not result.changed and result.left == ("GATHER v5",), result.describe()


def test_a_batch_of_images_is_not_lowered_by_the_one_image_resize():
    result = lower_for_board(resize("RESIZE_BILINEAR", (2, 3, 3, 2), 2), OLD.lacks)
    assert "resize_bilinear_half_pixel" not in result.rules and result.left == ("RESIZE_BILINEAR v3",)


def test_a_rule_the_board_cannot_take_leaves_nothing_behind():
    def lacks_depthwise(name, version, needs, dtype, notes):
        return name in ("DEPTHWISE_CONV_2D", "RESIZE_BILINEAR") and (name == "DEPTHWISE_CONV_2D" or bool(needs and needs > 1))

    g = Graph.empty()
    x = g.add_tensor("x", (1, 3, 3, 2), "float32")
    mid, y = g.add_tensor("mid", (1, 6, 6, 2), "float32"), g.add_tensor("y", (1, 6, 6, 2), "float32")
    size = g.constant("size", np.array([6, 6], np.int32), "int32")
    g.add(g.new_op("RESIZE_BILINEAR", [x, size], [mid], "ResizeBilinearOptions", alignCorners=False, halfPixelCenters=True))
    g.add(g.new_op("HARD_SWISH", [mid], [y]))
    model = finish(g, [x], [y])
    result = lower_for_board(model, lambda *a: lacks_depthwise(*a) or a[0] == "HARD_SWISH")
    assert result.rules == {"hard_swish": 1} and result.left == ("RESIZE_BILINEAR v3",)
    back = Graph(result.model)
    names = [back.tensor_name(i) for i in range(len(back.sg.tensors))]
    assert not [n for n in names if n.startswith("mid/")], names  # none of the resize rule's tensors
    assert len(back.model.buffers) < len(Graph(model).model.buffers) + 6, "the rejected rule's constants stayed"


def test_a_uint8_average_pool_over_more_than_256_values_is_named():
    g = Graph.empty()
    x, y = g.add_tensor("x", (1, 17, 17, 4), "uint8", QIN), g.add_tensor("y", (1, 1, 1, 4), "uint8", QIN)
    g.add(g.new_op("AVERAGE_POOL_2D", [x], [y], "Pool2DOptions", padding=1, strideW=1, strideH=1, filterWidth=17,
                   filterHeight=17))
    model = finish(g, [x], [y])
    assert lower_for_board(model, OLD.lacks).left == ("AVERAGE_POOL_2D v1",)
    summary = read_tflite_bytes(model)
    (reason,) = check_model(summary, OLD)
    assert "AVERAGE_POOL_2D v1 (large_window) on uint8: tflite-1.13's kernel computes it wrongly for a window of more than 256 values" in reason


@pytest.mark.parametrize("alpha", [0.1, 0.2, 1 / 3])
def test_uint8_leaky_relu_as_the_larger_of_x_and_alpha_x_is_within_a_step_of_todays_kernel(tmp_path, alpha):
    x = np.arange(256, dtype=np.uint8).reshape(1, 4, 8, 8)
    model = unary("LEAKY_RELU", x.shape, "uint8", LEAKY_IN, LEAKY_OUT, "LeakyReluOptions", alpha=alpha)
    (want,) = run(model, [x], tmp_path, "original")
    (got,) = run(lowered(model, tmp_path, rule="leaky_relu_uint8"), [x], tmp_path)
    exact = F.leaky_relu(torch.from_numpy(dequantise(x, LEAKY_IN)), alpha).numpy()
    assert steps(got, want) <= 1 and steps(got, quantise(exact, LEAKY_OUT)) <= 1


def test_uint8_prelu_with_a_slope_per_channel_is_within_a_step_of_todays_kernel(tmp_path):
    x = np.arange(256, dtype=np.uint8).reshape(1, 8, 8, 4)
    slopes = np.array([[[0.05, 0.25, 0.5, 0.9]]], np.float32)
    model = _prelu(x.shape, slopes, LEAKY_IN, LEAKY_OUT)
    (want,) = run(model, [x], tmp_path, "original")
    (got,) = run(lowered(model, tmp_path, rule="prelu_uint8"), [x], tmp_path)
    assert steps(got, want) <= 1


def test_uint8_prelu_with_slopes_below_0_and_above_1_is_within_a_step_of_todays_kernel(tmp_path):
    """max(x, 0) + a min(x, 0): the max and min exact on x's grid, a min(x, 0) and the sum rounded once each."""
    x = np.arange(256, dtype=np.uint8).reshape(1, 8, 8, 4)
    model = _prelu(x.shape, SIGNED_SLOPES, LEAKY_IN, Quant(8 / 255, 110))
    assert lower_for_board(model, OLD.lacks).rules == {"prelu_uint8_signed": 1}
    (want,) = run(model, [x], tmp_path, "original")
    (got,) = run(lowered(model, tmp_path, rule="prelu_uint8_signed"), [x], tmp_path)
    assert steps(got, want) <= 1


def test_a_slope_past_1_is_not_max_of_x_and_slope_x():
    model = unary("LEAKY_RELU", (1, 2, 2, 1), "uint8", LEAKY_IN, LEAKY_OUT, "LeakyReluOptions", alpha=1.5)
    assert lower_for_board(model, OLD.lacks).left == ("LEAKY_RELU v1",)
