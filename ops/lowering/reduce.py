"""A uint8 MEAN or SUM over a block of adjacent axes as one DEPTHWISE_CONV_2D.

TFLite 1.13.1's uint8 MEAN and SUM wrap around where the result leaves the output's range
instead of clamping (probed: an expected 255 comes back as 8; ``validate/board_profiles/
tflite-1.13.ops.toml``), and its uint8 AVERAGE_POOL_2D is no way out: with a window of 32x32 it
returns zeros (its accumulator overflows), and at the input's scale it rounds once more.

Reshaped to ``[1, A, R, B]`` -- ``A`` the axes before the block, ``R`` the block, ``B`` the axes
after -- the reduction is a depthwise convolution over a ``1 x R`` window with ``B`` channels whose
taps hold ``k`` at scale ``1 / (k R)`` (MEAN) or ``1 / k`` (SUM): it sums in int32 and writes the
result on the op's own output grid, rounded once and clamped, as today's kernels do (within a
step, measured on the real runtime: tests/ops/test_lowering.py). ``k`` is 1 unless the output's
grid is so much finer than the input's that the kernel's multiplier would reach 1 (an old uint8
kernel refuses that). The block may be any adjacent axes: a MEAN over height and width of
channels-last or channels-first data, a SUM over attention's key axis (onnx2tf 2.x writes
attention as MUL and SUM).
"""

from __future__ import annotations

import numpy as np

from edgeport.ops.lowering.base import LoweringRule, reshape
from edgeport.ops.tflite_graph import Graph, Quant


def _block(g: Graph, op) -> tuple[int, int, int] | None:
    """(before, reduced, after) sizes when the reduced axes are one adjacent block, else None."""
    shape = g.shape(op.inputs[0])
    axes = g.const(op.inputs[1]) if len(op.inputs) > 1 else None
    if axes is None or not shape or any(v <= 0 for v in shape):
        return None
    axes = sorted({int(a) % len(shape) for a in axes.ravel()})
    if axes != list(range(axes[0], axes[-1] + 1)):
        return None
    size = lambda dims: int(np.prod(dims)) if len(dims) else 1  # noqa: E731
    return size(shape[:axes[0]]), size(shape[axes[0]:axes[-1] + 1]), size(shape[axes[-1] + 1:])


class ReduceAsDepthwise(LoweringRule):
    dtypes = ("uint8",)
    mean: bool

    def applies(self, g: Graph, op) -> bool:
        block = _block(g, op)
        return block is not None and g.quant(op.inputs[0]) is not None and g.quant(op.outputs[0]) is not None \
            and self._tap(g, op, block[1]) <= 255

    def _tap(self, g: Graph, op, reduced: int) -> int:
        """``k`` (module docstring): the smallest that keeps the multiplier ``s_x * s_w / s_y`` below 1."""
        qx, qy = g.quant(op.inputs[0]), g.quant(op.outputs[0])
        return int(qx.scale / ((reduced if self.mean else 1) * qy.scale)) + 1

    def lower(self, g: Graph, op) -> list:
        x, (y,) = op.inputs[0], op.outputs
        before, reduced, after = _block(g, op)
        tag = g.tensor_name(y)
        k = self._tap(g, op, reduced)
        step = Quant(1.0 / (k * (reduced if self.mean else 1)), 0)
        rows = g.like(x, "rows", shape=[1, before, reduced, after])
        weights = g.constant(f"{tag}/taps", np.full((1, 1, reduced, after), k, np.uint8), "uint8", step)
        bias = g.constant(f"{tag}/bias", np.zeros(after, np.int32), "int32", Quant(g.quant(x).scale * step.scale, 0))
        out = g.like(y, "reduced", shape=[1, before, 1, after])
        return [reshape(g, x, rows, [1, before, reduced, after], f"{tag}/rows"),
                g.new_op("DEPTHWISE_CONV_2D", [rows, weights, bias], [out], "DepthwiseConv2DOptions",
                         padding=g.schema.Padding.VALID, strideW=1, strideH=1, depthMultiplier=1,
                         dilationWFactor=1, dilationHFactor=1),
                reshape(g, out, y, g.shape(y), f"{tag}/shape")]


class MeanAsDepthwise(ReduceAsDepthwise):
    name = "mean_as_depthwise"
    op = "MEAN"
    mean = True
    proof = "a mean over adjacent axes is a depthwise sum with weights 1/R, requantised once"


class SumAsDepthwise(ReduceAsDepthwise):
    name = "sum_as_depthwise"
    op = "SUM"
    mean = False
    proof = "a sum over adjacent axes is a depthwise sum with weights 1, requantised once"
