"""The op version an operator needs, from what it computes: its tensor types, options and ranks.

A converter writes one op code per (op, version) and points every use of an op at it, so the
version it declares is the highest any use needs (TensorFlow's converter declares CONV_2D v6
for every convolution of a model with one grouped convolution), and some writers declare less
than an op needs (onnx2tf 2.x: a grouped CONV_2D, or RESIZE_BILINEAR with half-pixel centres,
as v1). A runtime resolves a kernel by the declared version; the kernel registered for a
version computes every feature of the versions up to it, and nothing after.

``needed_version`` mirrors TensorFlow Lite's own table (``tensorflow/lite/tools/versioning/
op_version.cc``, GetBuiltinOperatorVersion) for the ops detectors convert to; an op it does not
know keeps the version its writer declared (``None``). Each version below names the feature
that introduced it.
"""

from __future__ import annotations

from edgeport.ops.tflite_graph import Graph

# ops whose only version steps are their int8 (and int16) kernels: int8 -> 2, anything else 1
_INT8_IS_2 = {
    "ADD", "SUB", "MUL", "CONCATENATION", "AVERAGE_POOL_2D", "MAX_POOL_2D", "LOGISTIC", "TANH", "SOFTMAX", "MEAN",
    "RELU6", "RSQRT", "REDUCE_MAX", "REDUCE_MIN", "MIRROR_PAD", "PACK", "MAXIMUM", "MINIMUM", "SUM", "SQUARED_DIFFERENCE",
    "DEPTH_TO_SPACE", "SPACE_TO_DEPTH", "SPLIT_V", "GATHER", "ARG_MAX", "ARG_MIN", "LESS", "GREATER", "GREATER_EQUAL",
    "LESS_EQUAL", "EQUAL", "NOT_EQUAL", "LOG_SOFTMAX", "DEQUANTIZE", "EXP", "BATCH_MATMUL", "SELECT", "TOPK_V2",
}
# ops with one version whatever they compute (on the types detectors use)
_ALWAYS_1 = {"RESHAPE", "SQUEEZE", "EXPAND_DIMS", "SHAPE", "HARD_SWISH", "RELU_0_TO_1", "RELU_N1_TO_1", "LEAKY_RELU",
             "QUANTIZE", "DIV", "FLOOR", "NEG", "SQRT", "CAST", "GELU", "RANGE", "FILL", "SIN", "COS", "POW", "FLOOR_DIV"}


# the highest version of each op whose every feature ``needed_version`` models: a declared
# version above it may mean a feature this table does not know (GATHER v5's batch_dims, DIV v2's
# broadcast over more than 4 dimensions, an int16 kernel), so it is never moved down from there
_MODELLED_UP_TO = {
    "CONV_2D": 6, "DEPTHWISE_CONV_2D": 6, "FULLY_CONNECTED": 6, "TRANSPOSE_CONV": 4, "RESIZE_BILINEAR": 3,
    "RESIZE_NEAREST_NEIGHBOR": 3, "STRIDED_SLICE": 4, "TRANSPOSE": 4, "PAD": 2, "PADV2": 2, "SLICE": 2, "SPLIT": 3,
    "RELU": 2, "TILE": 1, "MUL": 3, "SUB": 3, "MAXIMUM": 3, "MINIMUM": 3,
    **{name: 2 for name in _INT8_IS_2 if name not in ("MUL", "SUB", "MAXIMUM", "MINIMUM")},
    **{name: 1 for name in _ALWAYS_1},
}


def version_for(g: Graph, op) -> int | None:
    """The version ``op`` needs, or ``None`` (keep the declared one) where that is unknown or would
    move a declared version down from above ``_MODELLED_UP_TO``."""
    needs = needed_version(g, op)
    if needs is None or (needs < g.version(op) and g.version(op) > _MODELLED_UP_TO.get(g.name(op), 0)):
        return None
    return needs


# the input that carries an op's data, where it is not the first (the others: shapes, axes)
DATA_INPUT = {"TRANSPOSE_CONV": 2, "SPLIT": 1}


def data_type(g: Graph, op) -> str:
    """The type an op computes on: its data input's (``float32``, ``uint8``, ...), or ``""``."""
    return _type(g, op, DATA_INPUT.get(g.name(op), 0)) or ""


def _type(g: Graph, op, k: int) -> str | None:
    return g.dtype(op.inputs[k]) if k < len(op.inputs) and op.inputs[k] >= 0 else None


def _rank(g: Graph, op, k: int = 0) -> int:
    return len(g.shape(op.inputs[k]))


def is_grouped(g: Graph, op) -> bool:
    """A CONV_2D whose filter has fewer input channels than its input: a grouped convolution."""
    x, w = g.shape(op.inputs[0]), g.shape(op.inputs[1])
    return len(x) == 4 and len(w) == 4 and x[3] != w[3]


def needed_version(g: Graph, op) -> int | None:
    name = g.name(op)
    t0 = _type(g, op, 0)
    opts = op.builtinOptions
    int8 = t0 == "int8"
    if name == "CONV_2D":
        if is_grouped(g, op):
            return 6  # grouped convolution
        w = _type(g, op, 1)
        if int8 and w == "int8":
            return 3  # int8 (per-channel) kernels
        if t0 == "float32" and w == "int8":
            return 5 if g.per_channel(op.inputs[1]) else 2  # hybrid
        return 1
    if name == "DEPTHWISE_CONV_2D":
        if int8:
            return 3
        if t0 == "float32" and _type(g, op, 1) == "int8":
            return 6 if g.per_channel(op.inputs[1]) else 4
        if opts is not None and (opts.dilationWFactor != 1 or opts.dilationHFactor != 1):
            return 2  # dilation
        return 1
    if name == "FULLY_CONNECTED":
        if len(op.inputs) == 2:
            return 6  # two inputs (a third, optional bias of -1 is version 1)
        if opts is not None and opts.keepNumDims:
            return 5  # keep_num_dims
        if int8:
            return 4
        if t0 == "float32" and _type(g, op, 1) == "int8":
            return 3
        if opts is not None and opts.weightsFormat != 0:
            return 2  # shuffled weights
        return 1
    if name == "TRANSPOSE_CONV":
        if opts is not None and getattr(opts, "fusedActivationFunction", 0):
            return 4  # fused activation
        if len(op.inputs) == 4 and op.inputs[3] >= 0:
            return 3  # bias input
        return 2 if _type(g, op, 1) == "int8" else 1
    if name in ("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"):
        if opts is not None and (opts.halfPixelCenters or (name == "RESIZE_NEAREST_NEIGHBOR" and opts.alignCorners)):
            return 3  # half-pixel centres (and, for nearest, align_corners)
        return 2 if int8 else 1
    if name == "STRIDED_SLICE":
        if opts is not None and getattr(opts, "offset", False):
            return 8
        if opts is not None and (opts.ellipsisMask or opts.newAxisMask):
            return 6
        if _rank(g, op) > 4:
            return 4  # more than 4 dimensions
        if t0 == "bool":
            return 3
        return 2 if int8 else 1
    if name in ("TRANSPOSE", "PAD", "PADV2", "SLICE"):
        if _rank(g, op) > 4:
            return {"TRANSPOSE": 4, "PAD": 4, "PADV2": 4, "SLICE": 5}[name]  # more than 4 dimensions
        if name == "TRANSPOSE" and t0 == "bool":
            return 3
        return 2 if int8 else 1
    if name == "SPLIT":
        t1 = _type(g, op, 1)
        return 3 if t1 == "int32" else 2 if t1 == "int8" else 1
    if name == "RELU":
        return 2 if t0 in ("int8", "uint8") else 1  # quantised RELU
    if name == "TILE":
        return 3 if int8 else 1
    if name in _INT8_IS_2:
        if name == "MUL" and t0 in ("int8", "uint8"):
            q = [g.quant(op.inputs[0]), g.quant(op.inputs[1]), g.quant(op.outputs[0])]
            if all(q) and q[0].scale * q[1].scale / q[2].scale >= 1.0:
                return 3  # a rescale of 1 or more
        if name in ("SUB", "MAXIMUM", "MINIMUM") and max(_rank(g, op, 0), _rank(g, op, 1)) > 4 \
                and g.shape(op.inputs[0]) != g.shape(op.inputs[1]):
            return 3  # broadcast over more than 4 dimensions
        return 2 if int8 else 1
    if name in _ALWAYS_1:
        return 1
    return None
