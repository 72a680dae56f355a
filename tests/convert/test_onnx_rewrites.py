"""Exact ONNX rewrites for a converter's sake: the rewritten graph computes the same outputs."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgeport.convert.onnx_rewrites import rewrite_file, slices_to_split


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
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


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
    assert rewrite_file(src, dst) == {"slices_to_split": 1}
    assert src.read_bytes() == before, "the shipped model.onnx is the exporter's"
    assert [n.op_type for n in onnx.load(str(dst)).graph.node].count("Split") == 1
