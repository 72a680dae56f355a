"""A uint8 clamp (RELU, RELU_0_TO_1, RELU_N1_TO_1) whose output range lies inside the clamp,
as a requantisation (a one-input CONCATENATION, ``requantize.py``).

TFLite 1.13.1 has none of these on uint8 (RELU needs v2; the others are float-only, probed).
Writing a value on an output grid saturates at the grid's ends; where those lie within the clamp's
bounds (RELU: an output zero point of 0; RELU_0_TO_1, a hard sigmoid's clamp: an output range inside
[0, 1]), requantising ``x`` onto that grid is the clamp, rounded once as the op's kernel does.
"""

from __future__ import annotations

from edgeport.ops.lowering.base import LoweringRule, requantize
from edgeport.ops.tflite_graph import Graph

BOUNDS = {"RELU": (0.0, float("inf")), "RELU_0_TO_1": (0.0, 1.0), "RELU_N1_TO_1": (-1.0, 1.0)}


class _ClampAsRequantize(LoweringRule):
    dtypes = ("uint8",)
    proof = "an output grid inside the clamp's bounds saturates where the clamp would: a requantisation"

    def applies(self, g: Graph, op) -> bool:
        q = g.quant(op.outputs[0])
        if q is None or g.quant(op.inputs[0]) is None:
            return False
        lo, hi = q.scale * (0 - q.zero_point), q.scale * (255 - q.zero_point)
        low, high = BOUNDS[self.op]
        slack = 1e-6  # scales are stored as float32: 1/255 * 255 reads 1 + 6e-8
        return lo >= low - slack * max(1.0, abs(low)) and hi <= high + slack * max(1.0, abs(high))

    def lower(self, g: Graph, op) -> list:
        return [requantize(g, op.inputs[0], op.outputs[0])]


class ReluAsRequantize(_ClampAsRequantize):
    name = "relu_as_requantize"
    op = "RELU"


class Relu0To1AsRequantize(_ClampAsRequantize):
    name = "relu_0_to_1_as_requantize"
    op = "RELU_0_TO_1"


class ReluN1To1AsRequantize(_ClampAsRequantize):
    name = "relu_n1_to_1_as_requantize"
    op = "RELU_N1_TO_1"
