"""BATCH_MATMUL (attention's ``Q K^T`` and ``P V``) as one FULLY_CONNECTED per batch entry.

FULLY_CONNECTED computes ``y = x W^T``: with the weight a runtime tensor, ``A B`` for one
batch entry is ``FULLY_CONNECTED(A, B^T)``, the same dot products. The batch is flattened and
split (SPLIT), each entry reshaped to 2-D, ``B`` transposed once for all entries (TRANSPOSE),
and the products concatenated back (CONCATENATION, RESHAPE). YOLO11's C2PSA attention then runs
on TFLite 1.13.1 within 1e-6 of PyTorch (measured); broadcasting ``A * B`` and summing instead
would build a heads x N x N x d tensor (82 MB at 640 px). A zero bias is given (``base.zero_bias``).
"""

from __future__ import annotations

import numpy as np

from edgeport.ops.lowering.base import LoweringRule, concatenation, int32, reshape, zero_bias
from edgeport.ops.tflite_graph import Graph


class BatchMatMul(LoweringRule):
    name = "batch_matmul_as_fully_connected"
    op = "BATCH_MATMUL"
    dtypes = ("float32", "uint8")
    proof = "A B = FULLY_CONNECTED(A, B^T) per batch entry: the same dot products"

    def applies(self, g: Graph, op) -> bool:
        a, b = g.shape(op.inputs[0]), g.shape(op.inputs[1])
        return len(a) >= 2 and len(a) == len(b) and a[:-2] == b[:-2] and all(v > 0 for v in a + b)

    def lower(self, g: Graph, op) -> list:
        a, b = op.inputs[0], op.inputs[1]
        (y,) = op.outputs
        tag = g.tensor_name(y)
        opts = op.builtinOptions
        adj_x, adj_y = bool(opts and opts.adjX), bool(opts and opts.adjY)
        sa, sb = g.shape(a), g.shape(b)
        batch = int(np.prod(sa[:-2])) if len(sa) > 2 else 1
        m, k = (sa[-1], sa[-2]) if adj_x else (sa[-2], sa[-1])
        n = sb[-1] if not adj_y else sb[-2]
        ops: list = []

        def as_rows(t: int, shape, transpose: bool, what: str) -> int:
            """``t`` as [batch, rows, K]: reshaped, and transposed when its last two axes are swapped."""
            three = g.like(t, f"{what}3d", shape=[batch, *shape[-2:]])
            ops.append(reshape(g, t, three, [batch, *shape[-2:]], f"{tag}/{what}3d"))
            if not transpose:
                return three
            moved = g.like(t, f"{what}T", shape=[batch, shape[-1], shape[-2]])
            ops.append(g.new_op("TRANSPOSE", [three, int32(g, f"{tag}/{what}/perm", [0, 2, 1])], [moved], "TransposeOptions"))
            return moved

        rows_a = as_rows(a, sa, adj_x, "a")  # [batch, M, K]
        rows_b = as_rows(b, sb, not adj_y, "b")  # [batch, N, K]: the weight's layout

        def entries(t: int, rows: int, what: str) -> list[int]:
            flat = [g.like(t, f"{what}{i}", shape=[rows, k]) for i in range(batch)]
            if batch == 1:
                ops.append(reshape(g, rows_a if what == "a" else rows_b, flat[0], [rows, k], f"{tag}/{what}0"))
                return flat
            pieces = [g.like(t, f"{what}{i}_3d", shape=[1, rows, k]) for i in range(batch)]
            ops.append(g.new_op("SPLIT", [int32(g, f"{tag}/{what}/axis", 0), rows_a if what == "a" else rows_b], pieces,
                                "SplitOptions", numSplits=batch))
            for i, (piece, out) in enumerate(zip(pieces, flat)):
                ops.append(reshape(g, piece, out, [rows, k], f"{tag}/{what}{i}"))
            return flat

        left, right = entries(a, m, "a"), entries(b, n, "b")
        products = [g.like(y, f"product{i}", shape=[m, n]) for i in range(batch)]
        for i, (x, w, out) in enumerate(zip(left, right, products)):
            bias = zero_bias(g, f"{tag}/zero_bias{i}", n, x, w)
            ops.append(g.new_op("FULLY_CONNECTED", [x, w, bias], [out], "FullyConnectedOptions", keepNumDims=False))
        if batch == 1:
            ops.append(reshape(g, products[0], y, g.shape(y), f"{tag}/out"))
            return ops
        stacked = g.like(y, "stacked", shape=[batch * m, n])
        ops += [concatenation(g, products, stacked, axis=0), reshape(g, stacked, y, g.shape(y), f"{tag}/out")]
        return ops
