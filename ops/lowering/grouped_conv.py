"""A grouped CONV_2D (v6: the filter has fewer input channels than the input) as SPLIT, one
version-1 CONV_2D per group, and CONCATENATION.

A grouped convolution with ``g`` groups is, by definition, ``g`` independent convolutions: group
``i`` reads input channels ``[i Cin/g, (i+1) Cin/g)`` and writes output channels
``[i Cout/g, (i+1) Cout/g)`` with its slice of the filter and bias. Each output channel sums the
same products as the grouped kernel (in float32, possibly in another order: within 1e-6 of the
output's range); quantised, every group keeps the tensor's quantisation, so each value is
requantised exactly once, as before. Stride, padding, dilation and the fused activation apply
per group unchanged.
"""

from __future__ import annotations

from edgeport.ops.lowering.base import LoweringRule, concatenation, int32, zero_bias
from edgeport.ops.tflite_graph import Graph
from edgeport.ops.tflite_versions import is_grouped


class GroupedConv(LoweringRule):
    name = "grouped_conv"
    op = "CONV_2D"
    dtypes = ("float32", "uint8")
    proof = "a grouped convolution is one convolution per group, on its channel slice"

    def applies(self, g: Graph, op) -> bool:
        if not is_grouped(g, op) or g.const(op.inputs[1]) is None or g.per_channel(op.inputs[1]):
            return False
        cin, (cout, _, _, per_group) = g.shape(op.inputs[0])[3], g.shape(op.inputs[1])
        return cin % per_group == 0 and cout % (cin // per_group) == 0

    def lower(self, g: Graph, op) -> list:
        x, w = op.inputs[0], op.inputs[1]
        b = op.inputs[2] if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
        (y,) = op.outputs
        n, height, width, cin = g.shape(x)
        cout, kh, kw, per_group = g.shape(w)
        groups, out_per = cin // per_group, cout // (cin // per_group)
        tag = g.tensor_name(y)
        weights, bias = g.const(w), g.const(b) if b is not None else None
        pieces = [g.like(x, f"group{i}", shape=[n, height, width, per_group]) for i in range(groups)]
        ops = [g.new_op("SPLIT", [int32(g, f"{tag}/axis", 3), x], pieces, "SplitOptions", numSplits=groups)]
        outs = []
        opts = op.builtinOptions
        for i, piece in enumerate(pieces):
            out = g.like(y, f"group{i}", shape=[*g.shape(y)[:3], out_per])
            filt = g.constant(f"{tag}/filter{i}", weights[i * out_per:(i + 1) * out_per], g.dtype(w), g.quant(w))
            inputs = [piece, filt, g.constant(f"{tag}/bias{i}", bias[i * out_per:(i + 1) * out_per], g.dtype(b), g.quant(b))
                      if bias is not None else zero_bias(g, f"{tag}/zero_bias{i}", out_per, x, w)]
            ops.append(g.new_op("CONV_2D", inputs, [out], "Conv2DOptions", padding=opts.padding, strideW=opts.strideW,
                                strideH=opts.strideH, dilationWFactor=opts.dilationWFactor,
                                dilationHFactor=opts.dilationHFactor, fusedActivationFunction=opts.fusedActivationFunction))
            outs.append(out)
        ops.append(concatenation(g, outs, y, axis=3))
        return ops
