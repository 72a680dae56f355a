"""FULLY_CONNECTED v5 (``keep_num_dims``) and v6 (no bias input) as version 1.

Version 1 flattens the input to ``[rows, K]`` and writes ``[rows, N]``; ``keep_num_dims`` only
keeps the leading dimensions in the output's shape, so a RESHAPE to that shape after a v1 op
holds the same values in the same order. A missing bias is a zero bias (``base.zero_bias``).
"""

from __future__ import annotations

import numpy as np

from edgeport.ops.lowering.base import LoweringRule, reshape, zero_bias
from edgeport.ops.tflite_graph import Graph


class FullyConnected(LoweringRule):
    name = "fully_connected_v1"
    op = "FULLY_CONNECTED"
    dtypes = ("float32", "uint8")
    proof = "keep_num_dims is a reshape of v1's [rows, N] output; a missing bias is a zero one"

    def applies(self, g: Graph, op) -> bool:
        opts = op.builtinOptions
        keep = opts is not None and opts.keepNumDims
        no_bias = len(op.inputs) < 3 or op.inputs[2] < 0
        return (keep or no_bias) and (opts is None or opts.weightsFormat == 0)

    def lower(self, g: Graph, op) -> list:
        x, w = op.inputs[0], op.inputs[1]
        (y,) = op.outputs
        tag = g.tensor_name(y)
        n = g.shape(w)[0]
        bias = op.inputs[2] if len(op.inputs) > 2 and op.inputs[2] >= 0 else zero_bias(g, f"{tag}/zero_bias", n, x, w)
        opts = op.builtinOptions
        act = opts.fusedActivationFunction if opts is not None else 0
        out_shape = g.shape(y)
        flat = y
        if opts is not None and opts.keepNumDims and len(out_shape) != 2:
            flat = g.like(y, "rows", shape=[int(np.prod(out_shape[:-1])), n])
        ops = [g.new_op("FULLY_CONNECTED", [x, w, bias], [flat], "FullyConnectedOptions", fusedActivationFunction=act,
                        keepNumDims=False)]
        if flat != y:
            ops.append(reshape(g, flat, y, out_shape, f"{tag}/keep_num_dims"))
        return ops
