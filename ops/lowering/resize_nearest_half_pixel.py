"""RESIZE_NEAREST_NEIGHBOR with half-pixel centres (v3) at an integer factor, as v1.

With half-pixel centres the kernel reads input ``floor((x + 0.5) / k)`` for output ``x``; at an
integer factor ``k``, writing ``x = q k + r`` (``0 <= r < k``), ``(x + 0.5) / k = q + (r + 0.5) / k``
with ``(r + 0.5) / k < 1``, so it is ``q = floor(x / k)``: what version 1 reads. The fractional part
stays at least ``0.5 / k`` from an integer, so float rounding cannot tip it. Any type: it copies.
"""

from __future__ import annotations

from edgeport.ops.lowering.base import LoweringRule
from edgeport.ops.tflite_graph import Graph


def integer_factor(g: Graph, op) -> int | None:
    """The resize's integer factor, the same on both axes, or None."""
    x, y = g.shape(op.inputs[0]), g.shape(op.outputs[0])
    if len(x) != 4 or len(y) != 4 or x[1] <= 0 or x[2] <= 0 or y[1] % x[1] or y[2] % x[2] or y[1] // x[1] != y[2] // x[2]:
        return None
    return y[1] // x[1]


class ResizeNearestHalfPixel(LoweringRule):
    name = "resize_nearest_half_pixel"
    op = "RESIZE_NEAREST_NEIGHBOR"
    dtypes = ("float32", "uint8", "int8")
    proof = "floor((x + 0.5) / k) = floor(x / k) for an integer factor k: the same input pixel"

    def applies(self, g: Graph, op) -> bool:
        opts = op.builtinOptions
        return opts is not None and opts.halfPixelCenters and not opts.alignCorners and integer_factor(g, op) is not None

    def lower(self, g: Graph, op) -> list:
        new = g.new_op("RESIZE_NEAREST_NEIGHBOR", op.inputs, op.outputs, "ResizeNearestNeighborOptions",
                       alignCorners=False, halfPixelCenters=False)
        return [new]
