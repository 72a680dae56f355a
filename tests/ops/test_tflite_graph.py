"""The editable .tflite graph, the version each op needs, and what the board gate reads of a file."""

from __future__ import annotations

import numpy as np
import pytest

from edgeport.ops.tflite_graph import Graph, Quant
from edgeport.ops.tflite_model import read_tflite
from edgeport.ops.tflite_versions import data_type, needed_version


def conv(g: Graph, cin: int, per_group: int, dtype="float32", quant=None):
    x = g.add_tensor("x", (1, 4, 4, cin), dtype, quant)
    y = g.add_tensor("y", (1, 4, 4, 4), dtype, quant)
    w = g.constant("w", np.zeros((4, 1, 1, per_group), np.float32 if dtype == "float32" else np.int8),
                   "float32" if dtype == "float32" else "int8", None if dtype == "float32" else Quant(0.1, 0))
    op = g.new_op("CONV_2D", [x, w, -1], [y], "Conv2DOptions", padding=0, strideW=1, strideH=1, dilationWFactor=1,
                  dilationHFactor=1)
    g.add(op)
    g.set_io([x], [y])
    return op


@pytest.mark.parametrize("cin, per_group, dtype, needs", [(4, 4, "float32", 1), (4, 2, "float32", 6), (4, 4, "int8", 3),
                                                           (4, 1, "int8", 6)])
def test_conv_versions_follow_what_it_computes(cin, per_group, dtype, needs):
    g = Graph.empty()
    op = conv(g, cin, per_group, dtype, Quant(0.1, 0) if dtype == "int8" else None)
    assert needed_version(g, op) == needs


def test_the_gate_reads_a_grouped_convolution_declared_v1_as_needing_v6(tmp_path):
    g = Graph.empty()
    conv(g, 4, 2)  # declared v1, as onnx2tf 2.x writes it
    (tmp_path / "m.tflite").write_bytes(g.to_bytes())
    (use,) = read_tflite(tmp_path / "m.tflite").ops
    assert (use.name, use.version, use.notes, use.needs, use.dtype) == ("CONV_2D", 1, ("grouped",), 6, "float32")


@pytest.mark.parametrize("half_pixel, align, dtype, needs", [(True, False, "float32", 3), (False, False, "int8", 2),
                                                              (False, False, "uint8", 1), (False, True, "float32", 1)])
def test_resize_versions(half_pixel, align, dtype, needs):
    g = Graph.empty()
    q = Quant(0.1, 0) if dtype != "float32" else None
    x, y = g.add_tensor("x", (1, 2, 2, 1), dtype, q), g.add_tensor("y", (1, 4, 4, 1), dtype, q)
    op = g.new_op("RESIZE_BILINEAR", [x, g.constant("s", np.array([4, 4], np.int32), "int32")], [y], "ResizeBilinearOptions",
                  alignCorners=align, halfPixelCenters=half_pixel)
    assert needed_version(g, op) == needs


def test_a_uint8_mul_with_a_rescale_of_1_or_more_needs_v3():
    g = Graph.empty()
    a, b = g.add_tensor("a", (1, 4), "uint8", Quant(1.0, 0)), g.add_tensor("b", (1, 4), "uint8", Quant(2.0, 0))
    small, big = g.add_tensor("s", (1, 4), "uint8", Quant(4.0, 0)), g.add_tensor("t", (1, 4), "uint8", Quant(1.0, 0))
    assert needed_version(g, g.new_op("MUL", [a, b], [small], "MulOptions")) == 1
    assert needed_version(g, g.new_op("MUL", [a, b], [big], "MulOptions")) == 3


def test_the_data_input_of_a_transpose_conv_is_its_third():
    g = Graph.empty()
    shape = g.constant("shape", np.array([1, 4, 4, 1], np.int32), "int32")
    w = g.constant("w", np.zeros((1, 2, 2, 1), np.uint8), "uint8", Quant(0.1, 128))
    x, y = g.add_tensor("x", (1, 2, 2, 1), "uint8", Quant(0.1, 0)), g.add_tensor("y", (1, 4, 4, 1), "uint8", Quant(0.1, 0))
    op = g.new_op("TRANSPOSE_CONV", [shape, w, x], [y], "TransposeConvOptions", padding=1, strideW=2, strideH=2)
    assert data_type(g, op) == "uint8" and needed_version(g, op) == 1


def test_a_graph_written_back_unchanged_reads_the_same(tmp_path):
    g = Graph.empty()
    conv(g, 4, 4)
    once = g.to_bytes()
    again = Graph(once).to_bytes()
    assert once == again


def test_replace_puts_new_ops_where_the_old_one_was_and_unused_op_codes_go():
    g = Graph.empty()
    x, y, z = (g.add_tensor(n, (1, 4), "float32") for n in "xyz")
    first, second = g.new_op("RELU", [x], [y]), g.new_op("RELU6", [y], [z])
    g.add(first)
    g.add(second)
    g.set_io([x], [z])
    mid = g.add_tensor("mid", (1, 4), "float32")
    g.replace(first, [g.new_op("RELU_N1_TO_1", [x], [mid]), g.new_op("RELU", [mid], [y])])
    assert [g.name(op) for op in g.ops] == ["RELU_N1_TO_1", "RELU", "RELU6"]
    back = Graph(g.to_bytes())
    assert sorted(back.name(op) for op in back.ops) == ["RELU", "RELU6", "RELU_N1_TO_1"]
    assert len(back.model.operatorCodes) == 3


def test_a_lowered_file_claims_the_runtime_its_operators_need(tmp_path):
    from edgeport.convert.passes.lower_for_board_pass import restamped
    from edgeport.validate.board.profiles import min_runtime_of

    g = Graph.empty()
    op = conv(g, 4, 4)
    g.set_version(op, 6)  # as TensorFlow's converter declares it for a model with a grouped convolution
    g.set_metadata_text("min_runtime_version", "2.3.0")
    stale = g.to_bytes()
    assert Graph(stale).metadata_text("min_runtime_version") == "2.3.0"
    g.set_version(op, 1)
    stamped = Graph(restamped(g.to_bytes()))
    assert stamped.metadata_text("min_runtime_version") == min_runtime_of({("CONV_2D", 1)}) == "1.5.0"
    assert read_tflite(_write(tmp_path, restamped(g.to_bytes()))).min_runtime_version == "1.5.0"
    # an operator TFLite's table does not know: no claim at all rather than a wrong one
    g.set_version(op, 99)
    assert Graph(restamped(g.to_bytes())).metadata_text("min_runtime_version") is None
    assert min_runtime_of({("CONV_2D", 99)}) is None


def _write(tmp_path, data: bytes):
    path = tmp_path / "m.tflite"
    path.write_bytes(data)
    return path


def test_the_bounded_reader_knows_every_union_of_the_installed_schema():
    """``ops/tflite_file.py`` walks the file with the schema's own accessor classes; a union's table
    type comes from its enum, which it looks up by (table, field): a schema that adds a union adds
    it there, or the walk would only check where the union's table lies."""
    import inspect

    from edgeport.ops.tflite_file import UNIONS, _fields, schema

    s = schema()
    unions = {(name, field) for name, cls in vars(s).items() if inspect.isclass(cls) and "Init" in vars(cls)
              for field in vars(cls) if f"{field}Type" in vars(cls) and callable(vars(cls)[field])}
    assert unions == set(UNIONS), unions ^ set(UNIONS)
    assert all(hasattr(s, enum) for enum in UNIONS.values())
    assert ("Subgraphs", True) in _fields(s.Model) and ("Quantization", False) in _fields(s.Tensor)


def test_the_bounded_reader_reads_what_it_wrote_unchanged():
    from edgeport.ops.tflite_file import check, unpack

    g = Graph.empty()
    x = g.add_tensor("x", (1, 2, 2, 1), "float32")
    y = g.add_tensor("y", (1, 4, 4, 1), "float32")
    g.add(g.new_op("RESIZE_BILINEAR", [x, g.constant("s", np.array([4, 4], np.int32), "int32")], [y], "ResizeBilinearOptions",
                   halfPixelCenters=True))
    g.set_io([x], [y])
    data = g.to_bytes()
    check(data)
    assert unpack(data).subgraphs[0].operators[0].builtinOptions.halfPixelCenters
