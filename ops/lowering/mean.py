"""A uint8 MEAN over height and width (global average pooling) as one DEPTHWISE_CONV_2D.

TFLite 1.13.1's uint8 MEAN wraps around where the mean leaves its output's range instead of
clamping (probed: an expected 255 comes back as 8; ``validate/boards/tflite-1.13.ops.toml``),
and its uint8 AVERAGE_POOL_2D is no way out: with a window of 32x32 it returns zeros (its
accumulator overflows), and at the input's scale it rounds once more than the MEAN. A
depthwise convolution whose ``H x W`` filter holds 1 at scale ``1 / (H W)`` sums the window in
int32 and writes the mean on the MEAN's own output grid, rounded once and clamped: within a
step of today's MEAN kernel (measured on the real runtime, tests/ops/test_lowering.py).
"""

from __future__ import annotations

import numpy as np

from edgeport.ops.lowering.base import LoweringRule, reshape
from edgeport.ops.tflite_graph import Graph, Quant


def _axes(g: Graph, op) -> list[int] | None:
    axes = g.const(op.inputs[1]) if len(op.inputs) > 1 else None
    rank = len(g.shape(op.inputs[0]))
    return sorted(int(a) % rank for a in axes.ravel()) if axes is not None and rank else None


class MeanAsDepthwise(LoweringRule):
    name = "mean_as_depthwise"
    op = "MEAN"
    dtypes = ("uint8",)
    proof = "the mean over height and width is a depthwise sum with weights 1/(H W), requantised once"

    def applies(self, g: Graph, op) -> bool:
        shape, qx, qy = g.shape(op.inputs[0]), g.quant(op.inputs[0]), g.quant(op.outputs[0])
        if len(shape) != 4 or shape[0] != 1 or _axes(g, op) != [1, 2] or qx is None or qy is None:
            return False
        return qx.scale / (shape[1] * shape[2] * qy.scale) < 1.0  # an old uint8 kernel's multiplier must be below 1

    def lower(self, g: Graph, op) -> list:
        x, (y,) = op.inputs[0], op.outputs
        _, h, w, c = g.shape(x)
        tag = g.tensor_name(y)
        step = Quant(1.0 / (h * w), 0)
        weights = g.constant(f"{tag}/ones", np.ones((1, h, w, c), np.uint8), "uint8", step)
        bias = g.constant(f"{tag}/bias", np.zeros(c, np.int32), "int32", Quant(g.quant(x).scale * step.scale, 0))
        flat = y if tuple(g.shape(y)) == (1, 1, 1, c) else g.like(y, "pooled", shape=[1, 1, 1, c])
        ops = [g.new_op("DEPTHWISE_CONV_2D", [x, weights, bias], [flat], "DepthwiseConv2DOptions",
                        padding=g.schema.Padding.VALID, strideW=1, strideH=1, depthMultiplier=1,
                        dilationWFactor=1, dilationHFactor=1)]
        if flat != y:
            ops.append(reshape(g, flat, y, g.shape(y), f"{tag}/shape"))
        return ops
