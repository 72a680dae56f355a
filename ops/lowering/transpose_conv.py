"""TRANSPOSE_CONV with a bias input (v3), for runtimes whose kernel has none.

Float: version 1 (no bias), then ADD of the bias: one addition per output value, as v3's kernel
makes after summing the products.

Quantised (uint8): TFLite 1.13.1 has no uint8 TRANSPOSE_CONV at all. Where the kernel equals the
stride and nothing is padded (YOLOv8-seg's 2x2, stride 2 prototype upsampling), the windows do
not overlap: output pixel ``(k i + a, k j + b)`` is ``sum_c x[i, j, c] W[o, a, b, c] + bias[o]``,
a 1x1 convolution with ``k*k*Cout`` output channels, ordered ``(a, b, o)``, whose channels are
then moved into place by RESHAPE [H, W, k, k Cout], TRANSPOSE (0, 2, 1, 3) and RESHAPE
[1, k H, k W, Cout]. Each value is one product sum, requantised once, as before.
"""

from __future__ import annotations

import numpy as np

from edgeport.ops.lowering.base import LoweringRule, int32, reshape, zero_bias
from edgeport.ops.tflite_graph import Graph


def _parts(op):
    """(output shape, weights, input, bias or None) of a TRANSPOSE_CONV."""
    bias = op.inputs[3] if len(op.inputs) > 3 and op.inputs[3] >= 0 else None
    return op.inputs[0], op.inputs[1], op.inputs[2], bias


class TransposeConvBias(LoweringRule):
    name = "transpose_conv_bias"
    op = "TRANSPOSE_CONV"
    proof = "v3's bias is added once per output value: v1, then ADD"

    def applies(self, g: Graph, op) -> bool:
        opts = op.builtinOptions
        return _parts(op)[3] is not None and not (opts is not None and getattr(opts, "fusedActivationFunction", 0))

    def lower(self, g: Graph, op) -> list:
        shape, w, x, b = _parts(op)
        (y,) = op.outputs
        opts = op.builtinOptions
        raw = g.like(y, "without_bias")
        return [g.new_op("TRANSPOSE_CONV", [shape, w, x], [raw], "TransposeConvOptions", padding=opts.padding,
                         strideW=opts.strideW, strideH=opts.strideH),
                g.new_op("ADD", [raw, b], [y], "AddOptions")]


class TransposeConvAsConv(LoweringRule):
    name = "transpose_conv_as_conv"
    op = "TRANSPOSE_CONV"
    dtypes = ("uint8", "float32")
    proof = "kernel = stride, no padding: windows do not overlap, a 1x1 convolution and a channel shuffle"

    def applies(self, g: Graph, op) -> bool:
        _, w, x, _ = _parts(op)
        opts = op.builtinOptions
        if g.const(w) is None or g.per_channel(w) or opts is None:
            return False
        cout, kh, kw, _ = g.shape(w)
        (_, h, wd, _), out = g.shape(x), g.shape(op.outputs[0])
        return (kh, kw) == (opts.strideH, opts.strideW) and tuple(out) == (1, h * kh, wd * kw, cout)

    def lower(self, g: Graph, op) -> list:
        _, w, x, b = _parts(op)
        (y,) = op.outputs
        tag = g.tensor_name(y)
        cout, kh, kw, cin = g.shape(w)
        _, h, wd, _ = g.shape(x)
        weights = g.const(w).transpose(1, 2, 0, 3).reshape(kh * kw * cout, 1, 1, cin)  # channel (a, b, o)
        filt = g.constant(f"{tag}/as_1x1", np.ascontiguousarray(weights), g.dtype(w), g.quant(w))
        bias = (g.constant(f"{tag}/bias_tiled", np.tile(g.const(b), kh * kw), g.dtype(b), g.quant(b)) if b is not None
                else zero_bias(g, f"{tag}/zero_bias", kh * kw * cout, x, w))
        inputs = [x, filt, bias]
        conv = g.like(y, "1x1", shape=[1, h, wd, kh * kw * cout])
        rows = g.like(y, "rows", shape=[h, wd, kh, kw * cout])
        moved = g.like(y, "moved", shape=[h, kh, wd, kw * cout])
        act = getattr(op.builtinOptions, "fusedActivationFunction", 0) or 0
        return [g.new_op("CONV_2D", inputs, [conv], "Conv2DOptions", padding=g.schema.Padding.VALID, strideW=1, strideH=1,
                         dilationWFactor=1, dilationHFactor=1, fusedActivationFunction=act),
                reshape(g, conv, rows, [h, wd, kh, kw * cout], f"{tag}/rows"),
                g.new_op("TRANSPOSE", [rows, int32(g, f"{tag}/perm", [0, 2, 1, 3])], [moved], "TransposeOptions"),
                reshape(g, moved, y, [1, h * kh, wd * kw, cout], f"{tag}/pixels")]
