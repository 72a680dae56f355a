"""Which ops a runtime computes on uint8, asked of the runtime itself.

An op version table (``probe.py``) says which kernels a runtime registers, not which types
they take: TFLite 1.13.1 registers LEAKY_RELU and TRANSPOSE_CONV v1 for float32 only. Here each
op is one small uint8 model (inputs of a fixed pattern, the quantisation its uint8 kernel
requires); the board's runtime runs it, today's reference kernels run the same file, and an op
counts as the board's when the two agree within ``STEPS`` quantisation steps. ``edgeport boards
probe`` writes the ops that pass into the board's ``[uint8]`` table.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from edgeport.ops.lowering.base import int32
from edgeport.ops.tflite_graph import ACTIVATIONS, Graph, Quant
from edgeport.ops.tflite_model import FINE_INPUT_SCALE
from edgeport.ops.tflite_versions import needed_version

STEPS = 1  # uint8 on the board may round a tie apart from today's kernels by one step
SHAPE = (1, 6, 6, 4)  # NHWC
IN = Quant(0.05, 120)  # a range of about [-6, 6.75]
OUT = Quant(0.04, 110)
# an input grid finer than 2^-12 (a pose head's visibility logits came out at 2.1e-4): probed as
# its own case, "OP.fine_input", since TFLite 1.13.1's LOGISTIC and TANH return 0 there
FINE = Quant(FINE_INPUT_SCALE / 2, 128)


def variant(op: str, note: str) -> str:
    """The probe name of ``op`` used as ``note`` says (``LOGISTIC.fine_input``)."""
    return f"{op}.{note}"


# an AVERAGE_POOL_2D window of 17 x 17 (more than 256 values), on an input of that size
LARGE = (1, 17, 17, 4)


def _one(build: Callable[[Graph, int], int], quant: Quant = IN, shape=SHAPE) -> bytes:
    g = Graph.empty()
    x = g.add_tensor("x", shape, "uint8", quant)
    y = build(g, x)
    g.set_io([x], [y])
    for op in g.ops:  # each op at the version its uint8 signature needs, as a converter writes it
        needs = needed_version(g, op)
        if needs is not None:
            g.set_version(op, needs)
    return g.to_bytes()


def _unary(name: str, options: str | None = None, out: Quant = OUT, **fields):
    def build(g: Graph, x: int) -> int:
        y = g.add_tensor("y", SHAPE, "uint8", out)
        g.add(g.new_op(name, [x], [y], options, **fields))
        return y
    return build


def _binary(name: str, options: str | None = None, same: bool = False):
    def build(g: Graph, x: int) -> int:
        other = g.constant("c", (np.arange(np.prod(SHAPE)) * 37 % 256).astype(np.uint8).reshape(SHAPE), "uint8",
                           IN if same else Quant(0.03, 100))
        y = g.add_tensor("y", SHAPE, "uint8", IN if same else OUT)
        g.add(g.new_op(name, [x, other], [y], options))
        return y
    return build


def _weights(g: Graph, name: str, shape) -> tuple[int, int]:
    w = g.constant(name, (np.arange(int(np.prod(shape))) * 53 % 256).astype(np.uint8).reshape(shape), "uint8", Quant(0.01, 128))
    b = g.constant(f"{name}/bias", (np.arange(shape[0]) * 7 - 10).astype(np.int32), "int32", Quant(IN.scale * 0.01, 0))
    return w, b


def _conv(g: Graph, x: int) -> int:
    w, b = _weights(g, "w", (5, 3, 3, 4))
    y = g.add_tensor("y", (1, 6, 6, 5), "uint8", Quant(0.2, 100))
    g.add(g.new_op("CONV_2D", [x, w, b], [y], "Conv2DOptions", padding=g.schema.Padding.SAME, strideW=1, strideH=1,
                   dilationWFactor=1, dilationHFactor=1, fusedActivationFunction=ACTIVATIONS["RELU6"]))
    return y


def _depthwise(g: Graph, x: int) -> int:
    w, b = _weights(g, "w", (1, 3, 3, 4))
    b = g.constant("bias4", np.arange(4, dtype=np.int32), "int32", Quant(IN.scale * 0.01, 0))
    y = g.add_tensor("y", SHAPE, "uint8", Quant(0.1, 120))
    g.add(g.new_op("DEPTHWISE_CONV_2D", [x, w, b], [y], "DepthwiseConv2DOptions", padding=g.schema.Padding.SAME,
                   strideW=1, strideH=1, depthMultiplier=1, dilationWFactor=1, dilationHFactor=1))
    return y


def _fully_connected(g: Graph, x: int) -> int:
    flat = g.add_tensor("flat", (6, 24), "uint8", IN)
    g.add(g.new_op("RESHAPE", [x, int32(g, "shape", [6, 24])], [flat], "ReshapeOptions", newShape=[6, 24]))
    w, b = _weights(g, "w", (7, 24))
    y = g.add_tensor("y", (6, 7), "uint8", Quant(0.3, 128))
    g.add(g.new_op("FULLY_CONNECTED", [flat, w, b], [y], "FullyConnectedOptions"))
    return y


def _dequantize(g: Graph, x: int) -> int:
    # uint8 to float32: where a repaired file's float tail reads the quantised graph (ops/float_tail.py)
    y = g.add_tensor("y", SHAPE, "float32")
    g.add(g.new_op("DEQUANTIZE", [x], [y]))
    return y


def _shaped(name: str, out_shape, extra: Callable[[Graph], list[int]], options: str | None = None, **fields):
    def build(g: Graph, x: int) -> int:
        y = g.add_tensor("y", out_shape, "uint8", IN)
        g.add(g.new_op(name, [x, *extra(g)], [y], options, **fields))
        return y
    return build


def _softmax(g: Graph, x: int) -> int:
    flat = g.add_tensor("flat", (36, 4), "uint8", IN)
    g.add(g.new_op("RESHAPE", [x, int32(g, "shape", [36, 4])], [flat], "ReshapeOptions", newShape=[36, 4]))
    y = g.add_tensor("y", (36, 4), "uint8", Quant(1 / 256, 0))
    g.add(g.new_op("SOFTMAX", [flat], [y], "SoftmaxOptions", beta=1.0))
    return y


def _split(g: Graph, x: int) -> int:
    a = g.add_tensor("a", (1, 6, 6, 2), "uint8", IN)
    b = g.add_tensor("b", (1, 6, 6, 2), "uint8", IN)
    g.add(g.new_op("SPLIT", [int32(g, "axis", 3), x], [a, b], "SplitOptions", numSplits=2))
    return b


def _concat(g: Graph, x: int) -> int:
    other = g.constant("c", np.full(SHAPE, 7, np.uint8), "uint8", Quant(0.02, 3))
    y = g.add_tensor("y", (1, 6, 6, 8), "uint8", OUT)
    g.add(g.new_op("CONCATENATION", [x, other], [y], "ConcatenationOptions", axis=3))
    return y


def _mean(g: Graph, x: int) -> int:
    # an output range narrower than the input's: channels 0 and 1's means (``probe_input``) must clamp
    y = g.add_tensor("y", (1, 1, 1, 4), "uint8", Quant(0.01, 100))
    g.add(g.new_op("MEAN", [x, int32(g, "axes", [1, 2])], [y], "ReducerOptions", keepDims=True))
    return y


def _reduce(name: str):
    # (REDUCE_MAX's uint8 kernel writes at its input's quantisation; SUM requantises)
    out = IN if name == "REDUCE_MAX" else Quant(0.2, 10)

    def build(g: Graph, x: int) -> int:
        y = g.add_tensor("y", (1, 6, 6, 1), "uint8", out)
        g.add(g.new_op(name, [x, int32(g, "axes", [3])], [y], "ReducerOptions", keepDims=True))
        return y
    return build


def _pack(g: Graph, x: int) -> int:
    y = g.add_tensor("y", (2, 1, 6, 6, 4), "uint8", IN)
    g.add(g.new_op("PACK", [x, x], [y], "PackOptions", valuesCount=2, axis=0))
    return y


def _batch_matmul(g: Graph, x: int) -> int:
    y = g.add_tensor("y", (1, 6, 6, 6), "uint8", Quant(0.5, 128))
    g.add(g.new_op("BATCH_MATMUL", [x, x], [y], "BatchMatMulOptions", adjX=False, adjY=True))
    return y


def _transpose_conv(g: Graph, x: int) -> int:
    w, _ = _weights(g, "w", (3, 2, 2, 4))
    y = g.add_tensor("y", (1, 12, 12, 3), "uint8", Quant(0.2, 128))
    g.add(g.new_op("TRANSPOSE_CONV", [int32(g, "out", [1, 12, 12, 3]), w, x], [y], "TransposeConvOptions",
                   padding=g.schema.Padding.VALID, strideW=2, strideH=2))
    return y


def _pool(name: str):
    return _shaped(name, (1, 3, 3, 4), lambda g: [], "Pool2DOptions", padding=1, strideW=2, strideH=2,
                   filterWidth=2, filterHeight=2)


def _resize(name: str):
    options = "ResizeBilinearOptions" if name == "RESIZE_BILINEAR" else "ResizeNearestNeighborOptions"
    return _shaped(name, (1, 12, 12, 4), lambda g: [int32(g, "size", [12, 12])], options, alignCorners=False,
                   halfPixelCenters=False)


# op -> how its one-op uint8 model is built (input: x, uint8 NHWC SHAPE at IN)
PROBES: dict[str, Callable[[Graph, int], int]] = {
    "ADD": _binary("ADD", "AddOptions"),
    "SUB": _binary("SUB", "SubOptions"),
    "MUL": _binary("MUL", "MulOptions"),
    "MAXIMUM": _binary("MAXIMUM", same=True),
    "MINIMUM": _binary("MINIMUM", same=True),
    "CONCATENATION": _concat,
    "CONV_2D": _conv,
    "DEPTHWISE_CONV_2D": _depthwise,
    "FULLY_CONNECTED": _fully_connected,
    "AVERAGE_POOL_2D": _pool("AVERAGE_POOL_2D"),
    "MAX_POOL_2D": _pool("MAX_POOL_2D"),
    "LOGISTIC": _unary("LOGISTIC", out=Quant(1 / 256, 0)),
    "TANH": _unary("TANH", out=Quant(1 / 128, 128)),
    variant("LOGISTIC", "fine_input"): _unary("LOGISTIC", out=Quant(1 / 256, 0)),
    variant("TANH", "fine_input"): _unary("TANH", out=Quant(1 / 128, 128)),
    variant("AVERAGE_POOL_2D", "large_window"): _shaped("AVERAGE_POOL_2D", (1, 1, 1, 4), lambda g: [], "Pool2DOptions",
                                                        padding=1, strideW=1, strideH=1, filterWidth=17, filterHeight=17),
    "SOFTMAX": _softmax,
    "RELU": _unary("RELU", out=IN),
    "RELU6": _unary("RELU6", out=IN),
    "RELU_N1_TO_1": _unary("RELU_N1_TO_1", out=IN),
    "LEAKY_RELU": _unary("LEAKY_RELU", "LeakyReluOptions", alpha=0.1),
    "HARD_SWISH": _unary("HARD_SWISH"),
    "QUANTIZE": _unary("QUANTIZE"),
    "DEQUANTIZE": _dequantize,
    "RESHAPE": _shaped("RESHAPE", (1, 36, 4), lambda g: [int32(g, "shape", [1, 36, 4])], "ReshapeOptions", newShape=[1, 36, 4]),
    "TRANSPOSE": _shaped("TRANSPOSE", (1, 4, 6, 6), lambda g: [int32(g, "perm", [0, 3, 1, 2])], "TransposeOptions"),
    "PAD": _shaped("PAD", (1, 8, 8, 4), lambda g: [int32(g, "pads", [[0, 0], [1, 1], [1, 1], [0, 0]])], "PadOptions"),
    "STRIDED_SLICE": _shaped("STRIDED_SLICE", (1, 3, 3, 4), lambda g: [int32(g, "b", [0, 1, 0, 0]), int32(g, "e", [1, 6, 6, 4]),
                                                                         int32(g, "s", [1, 2, 2, 1])], "StridedSliceOptions"),
    "SPLIT": _split,
    "SLICE": _shaped("SLICE", (1, 3, 4, 2), lambda g: [int32(g, "b", [0, 1, 2, 1]), int32(g, "s", [1, 3, 4, 2])], "SliceOptions"),
    "SUM": _reduce("SUM"),
    "REDUCE_MAX": _reduce("REDUCE_MAX"),
    "SQUEEZE": _shaped("SQUEEZE", (6, 6, 4), lambda g: [], "SqueezeOptions", squeezeDims=[0]),
    "PACK": _pack,
    "MEAN": _mean,
    "RESIZE_BILINEAR": _resize("RESIZE_BILINEAR"),
    "RESIZE_NEAREST_NEIGHBOR": _resize("RESIZE_NEAREST_NEIGHBOR"),
    "BATCH_MATMUL": _batch_matmul,
    "TRANSPOSE_CONV": _transpose_conv,
}


def probe_models() -> dict[str, bytes]:
    """op -> its one-op uint8 model."""
    return {name: _one(build, FINE if name.endswith(".fine_input") else IN, _shape(name)) for name, build in PROBES.items()}


def _shape(name: str | None):
    return LARGE if name is not None and name.endswith(".large_window") else SHAPE


def probe_input(name: str | None = None) -> np.ndarray:
    """The input op ``name``'s probe model runs on (NHWC uint8): every uint8 value in a fixed
    order, and for MEAN a channel of the lowest and one of the highest value, whose means leave
    its output's range; for a large pool window, channels of high values whose sum passes 16 bits."""
    shape = _shape(name)
    x = (np.arange(int(np.prod(shape))) * 7 % 256).astype(np.uint8).reshape(shape)
    if name == "MEAN":
        x[..., 0], x[..., 1] = 0, 255
    if name is not None and name.endswith(".large_window"):
        x[..., 0], x[..., 1] = 255, 250
    return x
