"""A float tail (ops/float_tail.py): the quantised file up to where the tail is fed, a DEQUANTIZE
there, and the float32 file's ops from there to the outputs -- computing what the float32 file
computes on the quantised values it is fed."""

from __future__ import annotations

import numpy as np

from edgeport.ops.float_tail import downstream, float_tail, key, tail_ops
from edgeport.ops.tflite_graph import Graph, Quant

from .test_lowering import finish, run

SHAPE = (1, 4, 4, 3)
FINE, COARSE = Quant(1 / 64, 0), Quant(0.25, -128)


def _chain(dtype: str, quants: dict) -> bytes:
    """x -> RELU -> a -> RELU -> b -> RELU -> y."""
    g = Graph.empty()
    t = {n: g.add_tensor(n, SHAPE, dtype, quants.get(n)) for n in ("x", "a", "b", "y")}
    for src, dst in (("x", "a"), ("a", "b"), ("b", "y")):
        g.add(g.new_op("RELU", [t[src]], [t[dst]]))
    return finish(g, [t["x"]], [t["y"]])


def _fed_by(quantised: bytes):
    g = Graph(quantised)
    names = {key(g.tensor_name(t)): t for op in g.ops for t in op.outputs}
    return lambda name: names.get(name)


def test_a_tail_runs_the_float_ops_on_the_quantised_values_it_is_fed(tmp_path):
    q = _chain("int8", {"x": FINE, "a": FINE, "b": COARSE, "y": FINE})
    f = _chain("float32", {})
    tail = float_tail(q, f, {1}, _fed_by(q))  # from the float32 file's second RELU (b) to the output
    assert tail is not None and tail.float_ops == (1, 2) and tail.fed_at == ("a",)
    g = Graph(tail.model)
    assert [g.name(op) for op in g.ops] == ["RELU", "DEQUANTIZE", "RELU", "RELU"]
    assert [g.dtype(t) for t in g.sg.inputs] == ["int8"] and [g.dtype(t) for t in g.sg.outputs] == ["float32"]
    assert len(g.sg.tensors) == 5  # x, a, a as float, b, y: nothing the dropped ops held is kept
    x = np.random.default_rng(0).integers(-128, 128, SHAPE).astype(np.int8)
    (got,) = run(tail.model, [x], tmp_path)
    want = np.maximum(FINE.scale * (x.astype(np.float32) - FINE.zero_point), 0)  # a on its fine grid, then float
    np.testing.assert_allclose(got, want, atol=1e-6)
    (pure,) = run(q, [x], tmp_path, "q")
    assert np.abs(FINE.scale * (pure.astype(np.float32) - FINE.zero_point) - want).max() > 0.1  # b's coarse grid


def test_a_tail_is_closed_downstream_and_grows_upstream_where_it_cannot_be_fed():
    """x -> a -> b1 -> c, a -> b2 -> c (ADD): b1's tail holds c, and is fed at a and b2; where b2
    cannot be fed, b2's op joins it; where nothing can be fed, the tail is the whole file: None."""
    g = Graph.empty()
    t = {n: g.add_tensor(n, SHAPE, "float32") for n in ("x", "a", "b1", "b2", "c")}
    g.add(g.new_op("RELU", [t["x"]], [t["a"]]))
    g.add(g.new_op("RELU", [t["a"]], [t["b1"]]))
    g.add(g.new_op("RELU6", [t["a"]], [t["b2"]]))
    g.add(g.new_op("ADD", [t["b1"], t["b2"]], [t["c"]], "AddOptions"))
    f = Graph(finish(g, [t["x"]], [t["c"]]))
    assert downstream(f, {1}) == {1, 3}
    every = lambda u: True  # noqa: E731
    assert tail_ops(f, {1}, every) == ({1, 3}, (t["a"], t["b2"]))
    assert tail_ops(f, {1}, lambda u: u != t["b2"]) == ({1, 2, 3}, (t["a"],))
    assert tail_ops(f, {1}, lambda u: False) is None  # back to the input: the float32 file itself


def _residual(dtype: str, q: Quant | None) -> bytes:
    """x -> RELU -> a; ADD(a, x) -> b; ADD(b, c) -> y, c a constant (its float value, or on a grid)."""
    g = Graph.empty()
    x, a, b, y = (g.add_tensor(n, SHAPE, dtype, q) for n in ("x", "a", "b", "y"))
    value = np.linspace(-1, 1, 3, dtype=np.float32).reshape(1, 1, 1, 3)
    c = g.constant("c", value) if dtype == "float32" else \
        g.constant("c", np.rint(value / q.scale + q.zero_point).astype(np.uint8), "uint8", q)
    g.add(g.new_op("RELU", [x], [a]))
    g.add(g.new_op("ADD", [a, x], [b], "AddOptions"))
    g.add(g.new_op("ADD", [b, c], [y], "AddOptions"))
    return finish(g, [x], [y])


def test_a_uint8_tail_is_fed_at_the_graph_input_too_and_carries_the_float_weights(tmp_path):
    q = Quant(1 / 32, 128)
    quantised, f = _residual("uint8", q), _residual("float32", None)
    tail = float_tail(quantised, f, {1}, _fed_by(quantised))
    assert tail.float_ops == (1, 2) and set(tail.fed_at) == {"a", "x"}
    g = Graph(tail.model)
    dq = [op for op in g.ops if g.name(op) == "DEQUANTIZE"]
    assert len(dq) == 2 and {g.version(op) for op in dq} == {1}  # uint8 -> float32: version 1, as TFLite 1.13 runs it
    assert {g.tensor_name(op.outputs[0]) for op in dq} == {"a/dequantized", "x/dequantized"}
    (c,) = [t for t in range(len(g.sg.tensors)) if g.tensor_name(t) == "c"]
    np.testing.assert_array_equal(g.const(c), np.linspace(-1, 1, 3, dtype=np.float32).reshape(1, 1, 1, 3))
    x = np.random.default_rng(1).integers(0, 256, SHAPE).astype(np.uint8)
    real = q.scale * (x.astype(np.float32) - q.zero_point)
    (got,) = run(tail.model, [x], tmp_path)
    np.testing.assert_allclose(got, np.maximum(real, 0) + real + np.linspace(-1, 1, 3).reshape(1, 1, 1, 3), atol=1e-5)


def _mul_chain(dtype: str, quants: dict) -> bytes:
    """x -> MUL(x, x) -> a -> RELU -> y: a square whose grid is too coarse, then a ReLU."""
    g = Graph.empty()
    t = {n: g.add_tensor(n, SHAPE, dtype, quants.get(n)) for n in ("x", "a", "y")}
    g.add(g.new_op("MUL", [t["x"], t["x"]], [t["a"]], "MulOptions"))
    g.add(g.new_op("RELU", [t["a"]], [t["y"]]))
    return finish(g, [t["x"]], [t["y"]])


def test_an_island_runs_one_op_in_float_and_hands_back_onto_its_tensors_grid(tmp_path):
    """The MUL alone in float: fed by a DEQUANTIZE of x, QUANTIZEd back onto a's own grid for the
    quantised RELU after it. The file stays int8 at both ends, every op but the island quantised,
    and the square is computed exactly before it is rounded once onto a's grid."""
    from edgeport.ops.float_tail import float_islands, islandable

    qa = Quant(1 / 128, -128)
    q = _mul_chain("int8", {"x": FINE, "a": qa, "y": qa})
    f = _mul_chain("float32", {})
    assert islandable(Graph(q), Graph(f), 0, _fed_by(q))
    island = float_islands(q, f, [0], _fed_by(q))
    assert island is not None and island.float_ops == (0,) and island.fed_at == ("x",)
    g = Graph(island.model)
    assert [g.name(op) for op in g.ops] == ["DEQUANTIZE", "MUL", "QUANTIZE", "RELU"]
    assert [g.dtype(t) for t in (*g.sg.inputs, *g.sg.outputs)] == ["int8", "int8"]
    x = np.random.default_rng(1).integers(-128, 128, SHAPE).astype(np.int8)
    (got,) = run(island.model, [x], tmp_path)
    real = FINE.scale * (x.astype(np.float64) - FINE.zero_point)
    want = np.clip(np.round(real * real / qa.scale) + qa.zero_point, -128, 127)  # the exact square, rounded once
    assert np.abs(got.astype(np.int64) - want).max() <= 1
    assert float_islands(q, f, [0], lambda name: None) is None, "nothing quantised to meet: no island"
