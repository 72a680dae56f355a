"""A requantising QUANTIZE (quantised in, quantised out) as a one-input CONCATENATION.

TFLite 1.13 has no QUANTIZE kernel. Its uint8 CONCATENATION takes inputs at any scale and
writes each value on the output's grid, ``round((q - z_in) s_in / s_out) + z_out``, clamped:
a requantisation. With one input it is exactly that, nothing else (measured bit-exact with
today's QUANTIZE on the demo's requantise ops; at most 1 step where the two round a tie apart).
"""

from __future__ import annotations

from edgeport.ops.lowering.base import LoweringRule, requantize
from edgeport.ops.tflite_graph import Graph


class Requantize(LoweringRule):
    name = "requantize_as_concatenation"
    op = "QUANTIZE"
    dtypes = ("uint8",)
    proof = "a one-input uint8 CONCATENATION writes its input on the output's grid: a requantisation"

    def applies(self, g: Graph, op) -> bool:
        (x,), (y,) = op.inputs, op.outputs
        return g.dtype(x) == g.dtype(y) == "uint8" and g.quant(x) is not None and g.quant(y) is not None

    def lower(self, g: Graph, op) -> list:
        return [requantize(g, op.inputs[0], op.outputs[0])]
