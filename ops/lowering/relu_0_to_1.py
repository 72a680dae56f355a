"""RELU_0_TO_1 (hard-sigmoid's clamp, TFLite 2.x) as RELU then RELU_N1_TO_1.

``min(max(x, 0), 1) = min(max(max(x, 0), -1), 1)``: clamping at 0 first makes the lower clamp
at -1 a no-op. Both ops only compare and select, so the values are bit-identical.
"""

from __future__ import annotations

from edgeport.ops.lowering.base import LoweringRule
from edgeport.ops.tflite_graph import Graph


class Relu0To1(LoweringRule):
    name = "relu_0_to_1"
    op = "RELU_0_TO_1"
    proof = "min(max(x, 0), 1) = relu_n1_to_1(relu(x)): comparisons only, bit-identical"

    def lower(self, g: Graph, op) -> list:
        (x,), (y,) = op.inputs, op.outputs
        positive = g.like(y, "relu")
        return [g.new_op("RELU", [x], [positive]), g.new_op("RELU_N1_TO_1", [positive], [y])]
