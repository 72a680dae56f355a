"""Exact ONNX rewrites for a converter's sake: the rewritten graph computes the same outputs."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgeport.convert.converters.onnx_rewrites import rewrite_file, slices_to_split

# onnx writes its newest IR version by default; an ONNX Runtime loads up to its own. A torch
# export carries an older one, as these graphs do.
IR_VERSION = 10


def _model(graph, opset: int) -> onnx.ModelProto:
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)


def _graph(cuts, *, axis=1, channels=8, opset=17):
    """x (1, C, 4, 4) -> one Slice per (start, end) along ``axis`` -> Relu each -> Concat."""
    inits, nodes, outs = [], [], []
    for i, (start, end) in enumerate(cuts):
        for name, value in (("s", start), ("e", end), ("a", axis)):
            inits.append(numpy_helper.from_array(np.array([value], np.int64), f"{name}{i}"))
        nodes.append(helper.make_node("Slice", ["x", f"s{i}", f"e{i}", f"a{i}"], [f"p{i}"], name=f"slice{i}"))
        nodes.append(helper.make_node("Relu", [f"p{i}"], [f"r{i}"]))
        outs.append(f"r{i}")
    nodes.append(helper.make_node("Concat", outs, ["y"], axis=axis))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, 4, 4])], inits)
    return _model(graph, opset)


def _run(model, x):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("cuts, opset", [([(0, 4), (4, 8)], 17), ([(4, 2**62), (0, 4)], 17), ([(0, 3), (3, 5), (5, 8)], 11),
                                         ([(0, -4), (-4, 8)], 17)])
def test_slices_that_cut_a_tensor_into_pieces_become_one_split(cuts, opset):
    model = _graph(cuts, opset=opset)
    x = np.random.default_rng(0).standard_normal((1, 8, 4, 4)).astype(np.float32)
    want = _run(model, x)
    assert slices_to_split(model) == 1
    onnx.checker.check_model(model)
    assert [n.op_type for n in model.graph.node].count("Slice") == 0
    (split,) = [n for n in model.graph.node if n.op_type == "Split"]
    assert helper.get_attribute_value(split.attribute[0]) == 1
    np.testing.assert_array_equal(_run(model, x), want)


@pytest.mark.parametrize("cuts, axis", [([(0, 4), (5, 8)], 1),  # a gap
                                        ([(0, 4), (2, 8)], 1),  # overlapping
                                        ([(0, 4)], 1),  # one piece: nothing to gain
                                        ([(0, 2), (2, 4)], 1)])  # does not reach the end of the axis
def test_slices_that_are_not_an_exact_partition_stay(cuts, axis):
    model = _graph(cuts, axis=axis)
    before = model.SerializeToString()
    assert slices_to_split(model) == 0
    assert model.SerializeToString() == before


def test_rewrite_file_writes_a_checked_copy(tmp_path):
    src, dst = tmp_path / "model.onnx", tmp_path / "w" / "model.onnx"
    dst.parent.mkdir()
    onnx.save(_graph([(0, 4), (4, 8)]), str(src))
    before = src.read_bytes()
    assert rewrite_file(src, dst) == {"slices_to_split": 1, "hardsigmoid_as_relu6": 0, "pad_before_maxpool": 0}
    assert src.read_bytes() == before, "the shipped model.onnx is the exporter's"
    assert [n.op_type for n in onnx.load(str(dst)).graph.node].count("Split") == 1


def _single(nodes, inits, opset=17, shape=(1, 4, 6, 6), out_shape=None):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape or shape))], inits)
    return _model(graph, opset)


def test_hardsigmoid_becomes_relu6_and_computes_the_same():
    from edgeport.convert.converters.onnx_rewrites import hardsigmoid_as_relu6

    model = _single([helper.make_node("HardSigmoid", ["x"], ["y"], alpha=1 / 6, beta=0.5)], [])
    x = (np.random.default_rng(1).standard_normal((1, 4, 6, 6)) * 6).astype(np.float32)
    want = _run(model, x)
    assert hardsigmoid_as_relu6(model) == 1
    onnx.checker.check_model(model)
    assert [n.op_type for n in model.graph.node] == ["Mul", "Add", "Clip", "Mul"]
    np.testing.assert_allclose(_run(model, x), want, atol=1e-6)
    assert want.min() == 0.0 and want.max() == 1.0, "the input reaches both clamps"


@pytest.mark.parametrize("producer, rewritten", [("Relu", True), ("Sigmoid", True), ("Neg", False)])
def test_a_padded_maxpool_of_a_never_negative_input_pads_with_zeros_first(producer, rewritten):
    from edgeport.convert.converters.onnx_rewrites import pad_before_maxpool

    nodes = [helper.make_node(producer, ["x"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])]
    model = _single(nodes, [], out_shape=(1, 4, 3, 3))
    x = np.random.default_rng(2).standard_normal((1, 4, 6, 6)).astype(np.float32)
    want = _run(model, x)
    assert pad_before_maxpool(model) == int(rewritten)
    onnx.checker.check_model(model)
    assert ("Pad" in [n.op_type for n in model.graph.node]) == rewritten
    np.testing.assert_array_equal(_run(model, x), want)


def test_a_file_onnx_cannot_read_is_left_to_the_converter(tmp_path):
    src = tmp_path / "model.onnx"
    src.write_bytes(b"\x08\x07 this is not a protobuf graph")
    assert rewrite_file(src, tmp_path / "copy.onnx") is None and not (tmp_path / "copy.onnx").exists()


@pytest.mark.parametrize("a_shape, b_shape", [((1, 2, 5, 3), (1, 2, 3, 4)), ((5, 3), (3, 4)), ((2, 5, 3), (1, 3, 4))])
def test_a_matmul_of_two_activations_becomes_mul_and_reducesum(a_shape, b_shape):
    from edgeport.convert.converters.onnx_rewrites import matmul_as_mul_reducesum

    out = tuple(np.broadcast_shapes(a_shape[:-2], b_shape[:-2])) + (a_shape[-2], b_shape[-1])
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"], name="attn/MatMul")], "g",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a_shape)),
                               helper.make_tensor_value_info("b", TensorProto.FLOAT, list(b_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out))])
    model = _model(graph, 17)
    rng = np.random.default_rng(3)
    feeds = {"a": rng.standard_normal(a_shape).astype(np.float32), "b": rng.standard_normal(b_shape).astype(np.float32)}
    run = lambda m: ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]  # noqa: E731
    want = run(model)
    assert matmul_as_mul_reducesum(model) == 1
    onnx.checker.check_model(model)
    assert [n.op_type for n in model.graph.node] == ["Unsqueeze", "Unsqueeze", "Mul", "ReduceSum"]
    np.testing.assert_allclose(run(model), want, rtol=1e-5, atol=1e-5)


def test_a_matmul_by_a_weight_stays():
    from edgeport.convert.converters.onnx_rewrites import matmul_as_mul_reducesum

    w = numpy_helper.from_array(np.ones((3, 4), np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w])
    assert matmul_as_mul_reducesum(_model(graph, 17)) == 0


def test_a_graph_no_rewrite_changes_is_not_copied(tmp_path):
    src, dst = tmp_path / "model.onnx", tmp_path / "copy.onnx"
    onnx.save(_graph([(0, 8)]), str(src))  # one piece: nothing to rewrite
    assert rewrite_file(src, dst) == {"slices_to_split": 0, "hardsigmoid_as_relu6": 0, "pad_before_maxpool": 0}
    assert not dst.exists()
