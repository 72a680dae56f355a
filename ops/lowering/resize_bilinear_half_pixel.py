"""RESIZE_BILINEAR with half-pixel centres (PyTorch's ``align_corners=False``) at an integer
factor ``k``, from version-1 ops: nearest upsampling, then a fixed depthwise filter.

Per axis, half-pixel centres read input position ``(x + 0.5) / k - 0.5``. Write output ``x`` as
``q k + r``: that position is ``q + f`` with ``f = (r + 0.5 - k/2) / k``, so the output is
``(1 - f) in[q] + f in[q + 1]`` (or ``(1 + f) in[q] - f in[q - 1]`` for ``f < 0``). Nearest
upsampling ``n[j] = in[floor(j / k)]`` repeats each input ``k`` times; averaging ``n`` over a
window centred on ``x`` weighs each input by how many of its copies the window holds:

- ``k`` odd: a window of ``k`` taps (each ``1/k``) centred on ``x`` holds ``k - t`` copies of
  ``in[q]`` and ``t`` of ``in[q + 1]`` when ``r = (k - 1)/2 + t``: weights ``1 - t/k`` and
  ``t/k``, and ``f = t/k``;
- ``k`` even: ``f`` is an odd multiple of ``1/(2k)``, so the window needs half taps at its ends:
  ``k + 1`` taps ``[1/2, 1, ..., 1, 1/2] / k`` (the ``k``-box smoothed by ``[1/2, 1/2]``); for ``k = 2``,
  ``[1, 2, 1] / 4``: ``out[2i] = in[i-1]/4 + 3 in[i]/4``, ``out[2i+1] = 3 in[i]/4 + in[i+1]/4``.

At the borders the window runs past the image: repeating the first and last rows and columns
(``(taps - 1) / 2`` of each) gives their inputs the weight, which is PyTorch's clamping. In 2-D the
filter is the outer product of the per-axis taps: RESIZE_NEAREST_NEIGHBOR v1 (an exact copy),
STRIDED_SLICE + CONCATENATION for the repeated border, and one DEPTHWISE_CONV_2D v1 (VALID).
Float32: exact in real arithmetic (for ``k`` a power of 2 the taps are exact in binary too; else
they round within 1e-7). uint8: the taps are small integers on one scale, so each output is one
integer sum rounded once, as TFLite's own half-pixel kernel rounds: within 1 step of it.
"""

from __future__ import annotations

import numpy as np

from edgeport.ops.lowering.base import LoweringRule, concatenation, int32, strided_slice
from edgeport.ops.lowering.resize_nearest_half_pixel import integer_factor
from edgeport.ops.tflite_graph import Graph, Quant


def taps(k: int) -> np.ndarray:
    """The per-axis filter, as integers over ``taps(k).sum()`` (``k``, or ``2k`` for even ``k``)."""
    return np.ones(k, np.int64) if k % 2 else np.concatenate([[1], np.full(k - 1, 2), [1]]).astype(np.int64)


class ResizeBilinearHalfPixel(LoweringRule):
    name = "resize_bilinear_half_pixel"
    op = "RESIZE_BILINEAR"
    dtypes = ("float32", "uint8")
    proof = "half-pixel bilinear by k = nearest by k, then a k-tap box (k odd) or [1/2, 1, .., 1, 1/2]/k (k even)"

    def applies(self, g: Graph, op) -> bool:
        opts = op.builtinOptions
        k = integer_factor(g, op)
        return opts is not None and opts.halfPixelCenters and not opts.alignCorners and k is not None and k >= 2 \
            and len(g.shape(op.inputs[0])) == 4 and g.shape(op.inputs[0])[0] == 1  # one image (what detectors export)

    def lower(self, g: Graph, op) -> list:
        x, y = op.inputs[0], op.outputs[0]
        _, h, w, c = g.shape(x)
        k = integer_factor(g, op)
        kh, kw = k * h, k * w
        tag = g.tensor_name(y)
        t = taps(k)
        pad = (len(t) - 1) // 2
        dtype, q = g.dtype(x), g.quant(x)
        near = g.add_tensor(f"{tag}/nearest", [1, kh, kw, c], dtype, q)
        ops = [g.new_op("RESIZE_NEAREST_NEIGHBOR", [x, int32(g, f"{tag}/size", [kh, kw])], [near],
                        "ResizeNearestNeighborOptions", alignCorners=False, halfPixelCenters=False)]
        padded = near
        for axis, (rows, cols) in ((1, (kh, kw)), (2, (kh + 2 * pad, kw))):
            edge_shape = [1, 1, cols, c] if axis == 1 else [1, rows, 1, c]
            first = g.add_tensor(f"{tag}/first{axis}", edge_shape, dtype, q)
            last = g.add_tensor(f"{tag}/last{axis}", edge_shape, dtype, q)
            size = [1, rows, cols, c]
            end_first = [1, 1, cols, c] if axis == 1 else [1, rows, 1, c]
            begin_last = [0, rows - 1, 0, 0] if axis == 1 else [0, 0, cols - 1, 0]
            grown = [1, rows + 2 * pad, cols, c] if axis == 1 else [1, rows, cols + 2 * pad, c]
            out = g.add_tensor(f"{tag}/repeated{axis}", grown, dtype, q)
            ops += [strided_slice(g, padded, first, [0, 0, 0, 0], end_first, f"{tag}/first{axis}"),
                    strided_slice(g, padded, last, begin_last, size, f"{tag}/last{axis}"),
                    concatenation(g, [first] * pad + [padded] + [last] * pad, out, axis=axis)]
            padded = out
        kernel = np.outer(t, t)  # integers; their real weight is kernel / t.sum()^2
        total = float(t.sum()) ** 2
        if dtype == "float32":
            weights = g.constant(f"{tag}/filter", (kernel / total).astype(np.float32).reshape(1, len(t), len(t), 1)
                                 .repeat(c, axis=3))
            bias = g.constant(f"{tag}/bias", np.zeros(c, np.float32))
        else:
            step = Quant(1.0 / total, 0)
            weights = g.constant(f"{tag}/filter", kernel.astype(np.uint8).reshape(1, len(t), len(t), 1).repeat(c, axis=3),
                                 "uint8", step)
            bias = g.constant(f"{tag}/bias", np.zeros(c, np.int32), "int32", Quant(q.scale * step.scale, 0))
        ops.append(g.new_op("DEPTHWISE_CONV_2D", [padded, weights, bias], [y], "DepthwiseConv2DOptions",
                            padding=g.schema.Padding.VALID, strideW=1, strideH=1, depthMultiplier=1,
                            dilationWFactor=1, dilationHFactor=1))
        return ops
