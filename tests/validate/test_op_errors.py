"""Which ops carry a quantised file's error (validate/parity/op_errors.py): each op alone, on the
float32 file's own values, so an op that rounds coarsely is named, and the ops after it are not
blamed for what they inherit."""

from __future__ import annotations

import numpy as np

from edgeport.ops.tflite_graph import Graph, Quant
from edgeport.validate.parity.op_errors import op_errors
from edgeport.validate.parity.result import ResultRow
from edgeport.validate.report.render import MARKDOWN, op_error_lines
from edgeport.validate.report.schema import Report

from ..ops.test_lowering import finish

SHAPE = (1, 4, 4, 3)


def _chain(dtype: str, quants: dict, extra: bool = False) -> bytes:
    """x -> RELU -> a -> RELU -> b -> RELU -> c (and, when ``extra``, an op the float file lacks)."""
    g = Graph.empty()
    t = {n: g.add_tensor(n, SHAPE, dtype, quants.get(n)) for n in ("x", "a", "b", "c")}
    for src, dst in (("x", "a"), ("a", "b"), ("b", "c")):
        g.add(g.new_op("RELU", [t[src]], [t[dst]]))
    out = t["c"]
    if extra:  # int8's own rescaling (convert/converters/int8_groups.py): other units from here on
        out = g.add_tensor("scaled", SHAPE, dtype, quants.get("c"))
        g.add(g.new_op("RELU", [t["c"]], [out]))
        last = g.add_tensor("after", SHAPE, dtype, quants.get("c"))
        g.add(g.new_op("RELU", [out], [last]))
        out = last
    return finish(g, [t["x"]], [out])


def test_the_op_that_rounds_coarsely_is_named_and_the_ops_after_it_inherit_without_blame(tmp_path):
    fine, coarse = Quant(1 / 64, 0), Quant(0.25, -128)
    (tmp_path / "f.tflite").write_bytes(_chain("float32", {}))
    (tmp_path / "q.tflite").write_bytes(_chain("int8", {"x": fine, "a": fine, "b": coarse, "c": fine}, extra=True))
    x = np.random.default_rng(0).uniform(-1.9, 1.9, (1, 3, 4, 4)).astype(np.float32)
    found = op_errors(tmp_path / "q.tflite", tmp_path / "f.tflite", x, tmp_path)
    by_tensor = {e.tensor: e for e in found}
    assert found[0].tensor == "b" and found[0].op == "RELU" and found[0].own > 0.05
    # c reads b's coarse values in the whole run (reached), not when it runs alone (own)
    assert by_tensor["c"].own < 0.01 < by_tensor["c"].reached and by_tensor["a"].own < 0.01
    assert "scaled" not in by_tensor and "after" not in by_tensor  # not in the float32 file: other units
    row = ResultRow("int8", "tflite", False, op_errors={"judged": len(found), "worst": [e.to_dict() for e in found],
                                                         "on": "the reference kernels"})
    line = op_error_lines(Report((row,)), MARKDOWN)
    assert len(line) == 1 and line[0].startswith("int8, 3 ops each run alone") and "RELU b" in line[0]


def test_a_lowered_op_is_judged_as_the_op_it_replaces(tmp_path):
    """uint8 LEAKY_RELU lowered for TFLite 1.13 (a requantisation, MUL, MAXIMUM: ops/lowering/leaky_relu.py)
    is judged as one op against the float32 file's LEAKY_RELU, within a step of its grid."""
    from edgeport.ops.lowering.registry import lower_for_board
    from edgeport.validate.board.profiles import load_board

    from ..ops.test_lowering import LEAKY_IN, LEAKY_OUT, unary

    (tmp_path / "f.tflite").write_bytes(unary("LEAKY_RELU", SHAPE, options="LeakyReluOptions", alpha=0.1))
    low = lower_for_board(unary("LEAKY_RELU", SHAPE, "uint8", LEAKY_IN, LEAKY_OUT, "LeakyReluOptions", alpha=0.1),
                          load_board("tflite-1.13").lacks)
    assert low.rules == {"leaky_relu_uint8": 1}
    (tmp_path / "q.tflite").write_bytes(low.model)
    x = np.random.default_rng(1).uniform(-3, 3, (1, 3, 4, 4)).astype(np.float32)
    (found,) = op_errors(tmp_path / "q.tflite", tmp_path / "f.tflite", x, tmp_path)
    assert found.op == "MAXIMUM (lowered: 2 ops)" and found.tensor == "y"
    assert 0 < found.own < 0.5 * LEAKY_OUT.scale / float(np.sqrt(np.mean(np.where(x > 0, x, 0.1 * x) ** 2)))


def test_each_output_of_a_split_is_judged_against_its_own_float_part(tmp_path):
    """A SPLIT (a C2f block's chunk) writes three parts: each is compared with the float32 file's same part."""
    def split(dtype: str, q: Quant | None) -> bytes:
        g = Graph.empty()
        x = g.add_tensor("x", SHAPE, dtype, q)
        parts = [g.add_tensor(n, (1, 4, 4, 1), dtype, q) for n in ("p0", "p1", "p2")]
        axis = g.constant("axis", np.array(3, np.int32), "int32")
        g.add(g.new_op("SPLIT", [axis, x], parts, "SplitOptions", numSplits=3))
        return finish(g, [x], parts)

    (tmp_path / "f.tflite").write_bytes(split("float32", None))
    (tmp_path / "q.tflite").write_bytes(split("int8", Quant(1 / 32, 0)))
    x = (np.random.default_rng(2).uniform(0, 0.5, (1, 3, 4, 4)) + np.array([0, 1, 2]).reshape(1, 3, 1, 1)).astype(np.float32)
    found = op_errors(tmp_path / "q.tflite", tmp_path / "f.tflite", x, tmp_path)
    assert sorted(e.tensor for e in found) == ["p0", "p1", "p2"] and all(e.own < 1e-6 for e in found)


def test_a_float_output_is_judged_with_the_op_before_its_dequantize(tmp_path):
    """A quantised file with a float output: its last op writes int8 and a DEQUANTIZE takes the
    float file's name for the output; the two are judged together, as the float file's last op."""
    g = Graph.empty()
    x = g.add_tensor("x", SHAPE, "int8", Quant(1 / 64, 0))
    a = g.add_tensor("a", SHAPE, "int8", Quant(1 / 64, 0))
    yq = g.add_tensor("y_int8", SHAPE, "int8", Quant(0.25, -128))
    y = g.add_tensor("y", SHAPE, "float32")
    g.add(g.new_op("RELU", [x], [a]))
    g.add(g.new_op("RELU", [a], [yq]))
    g.add(g.new_op("DEQUANTIZE", [yq], [y]))
    (tmp_path / "q.tflite").write_bytes(finish(g, [x], [y]))
    f = Graph.empty()
    fx, fa, fy = (f.add_tensor(n, SHAPE, "float32") for n in ("x", "a", "y"))
    f.add(f.new_op("RELU", [fx], [fa]))
    f.add(f.new_op("RELU", [fa], [fy]))
    (tmp_path / "f.tflite").write_bytes(finish(f, [fx], [fy]))
    x_nchw = np.random.default_rng(3).uniform(-1.9, 1.9, (1, 3, 4, 4)).astype(np.float32)
    found = op_errors(tmp_path / "q.tflite", tmp_path / "f.tflite", x_nchw, tmp_path)
    assert [(e.tensor, e.op) for e in found][0] == ("y", "RELU (and DEQUANTIZE)") and found[0].own > 0.05
    assert [e.tensor for e in found] == ["y", "a"]
