"""HARD_SWISH (TFLite 2.x) as ADD with a fused RELU6, MUL and DIV: TFLite 1.x's ops (uint8 below).

``hardswish(x) = x * relu6(x + 3) / 6``, PyTorch's own definition, computed in that order:
on TFLite 1.13.1 in float32 the result is bit-exact with ``torch.hardswish`` over every float16
value (65,536 inputs; dividing by 6 rather than multiplying by 1/6, which is 1 ulp off).
"""

from __future__ import annotations

import numpy as np

from edgeport.ops.lowering.base import LoweringRule, reshape
from edgeport.ops.tflite_graph import ACTIVATIONS, Graph, Quant


class HardSwish(LoweringRule):
    name = "hard_swish"
    op = "HARD_SWISH"
    proof = "x * relu6(x + 3) / 6 is PyTorch's hardswish, operation for operation: bit-exact on TFLite 1.13.1"

    def lower(self, g: Graph, op) -> list:
        (x,), (y,) = op.inputs, op.outputs
        tag = g.tensor_name(y)
        three = g.constant(f"{tag}/three", np.full([1], 3.0, np.float32))
        six = g.constant(f"{tag}/six", np.full([1], 6.0, np.float32))
        gate, product = g.like(y, "relu6(x+3)"), g.like(y, "x*relu6(x+3)")
        return [
            g.new_op("ADD", [x, three], [gate], "AddOptions", fusedActivationFunction=ACTIVATIONS["RELU6"]),
            g.new_op("MUL", [x, gate], [product], "MulOptions"),
            g.new_op("DIV", [product, six], [y], "DivOptions"),
        ]


class HardSwishUint8(LoweringRule):
    """uint8: ``u = relu6(x + 3)`` (ADD with a fused RELU6, at scale 6/255: exactly [0, 6]), then
    ``x * u`` (MUL) written at 6 times the output's scale and read at the output's own (a RESHAPE
    that keeps the integers: dividing by 6 exactly, every runtime copies the bytes). Two
    roundings, as today's kernel makes in fixed point: within a step of it."""

    name = "hard_swish_uint8"
    op = "HARD_SWISH"
    dtypes = ("uint8",)
    proof = "x * relu6(x + 3) at 6x the output scale is hardswish at the output scale, integer for integer"

    def applies(self, g: Graph, op) -> bool:
        qx, qy = g.quant(op.inputs[0]), g.quant(op.outputs[0])
        # an old uint8 MUL needs its multiplier below 1: s_x (6/255) / (6 s_y)
        return qx is not None and qy is not None and qx.scale / (255 * qy.scale) < 1.0

    def lower(self, g: Graph, op) -> list:
        (x,), (y,) = op.inputs, op.outputs
        tag = g.tensor_name(y)
        qy = g.quant(y)
        three = g.constant(f"{tag}/three", np.full([1], 255, np.uint8), "uint8", Quant(3.0 / 255, 0))
        gate = g.like(x, "relu6(x+3)", quant=Quant(6.0 / 255, 0))
        product = g.like(y, "x*relu6(x+3)", quant=Quant(6 * qy.scale, qy.zero_point))
        return [
            g.new_op("ADD", [x, three], [gate], "AddOptions", fusedActivationFunction=ACTIVATIONS["RELU6"]),
            g.new_op("MUL", [x, gate], [product], "MulOptions"),
            reshape(g, product, y, g.shape(y), f"{tag}/divided_by_6"),
        ]
