"""What a lowering rule is.

A rule rewrites one operator of a converted .tflite file (``ops/tflite_graph.Graph``) into
operators that compute the same values, for boards that lack the operator or the version it
needs. It edits the flatbuffer, so no user module (its attributes, its forward) is touched and
a converter cannot fuse the rewrite back (TensorFlow's fuses any spelling of HardSwish into
HARD_SWISH).

``lower`` returns the operators that replace the op, in order; ``registry.lower_for_board``
versions them (``ops/tflite_versions.py``) and keeps them only where the board runs every one.
"""

from __future__ import annotations

import abc
from typing import ClassVar

import numpy as np

from edgeport.ops.tflite_graph import Graph, Quant


class LoweringRule(abc.ABC):
    name: ClassVar[str]
    op: ClassVar[str]  # the builtin operator it rewrites
    dtypes: ClassVar[tuple[str, ...]] = ("float32",)  # the types it handles (its data input's: tflite_versions.data_type)
    proof: ClassVar[str]  # why the result is the same: the identity, or the measured bound

    def applies(self, g: Graph, op) -> bool:
        """Preconditions beyond the operator's name and type (an integer scale, a bias, ...)."""
        return True

    @abc.abstractmethod
    def lower(self, g: Graph, op) -> list: ...

    def __repr__(self) -> str:
        return f"<lowering {self.name}>"


def int32(g: Graph, name: str, values) -> int:
    """A constant int32 tensor (a shape, an axis, a begin/end)."""
    return g.constant(name, np.asarray(values, np.int32), "int32")


def zero_bias(g: Graph, name: str, n: int, x: int, w: int) -> int:
    """A zero bias of ``n`` channels for an op with input ``x`` and weights ``w``: float zeros, or
    int32 zeros at scale ``s_x * s_w`` where they are quantised (the bias a quantised kernel expects;
    TFLite 1.13's uint8 kernels crash without one). Adding 0 changes nothing."""
    if g.dtype(x) == "float32":
        return g.constant(name, np.zeros(n, np.float32), "float32")
    qx, qw = g.quant(x), g.quant(w)
    return g.constant(name, np.zeros(n, np.int32), "int32", Quant(qx.scale * qw.scale, 0))


def strided_slice(g: Graph, x: int, out: int, begin, end, tag: str):
    """out = x[begin:end] (every axis given, stride 1)."""
    return g.new_op("STRIDED_SLICE", [x, int32(g, f"{tag}/begin", begin), int32(g, f"{tag}/end", end),
                                       int32(g, f"{tag}/strides", [1] * len(begin))], [out], "StridedSliceOptions")


def reshape(g: Graph, x: int, out: int, shape, tag: str):
    return g.new_op("RESHAPE", [x, int32(g, f"{tag}/shape", shape)], [out], "ReshapeOptions", newShape=[int(v) for v in shape])


def concatenation(g: Graph, xs: list[int], out: int, axis: int):
    return g.new_op("CONCATENATION", xs, [out], "ConcatenationOptions", axis=axis)


def requantize(g: Graph, x: int, out: int):
    """``x`` written on ``out``'s grid by a one-input uint8 CONCATENATION (``requantize.py`` says why)."""
    return concatenation(g, [x], out, axis=max(len(g.shape(x)) - 1, 0))
