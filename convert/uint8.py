"""A full-integer int8 file, quantised per tensor, rewritten as the uint8 file old runtimes run.

TFLite 1.x ran quantised models in uint8 (asymmetric, per tensor); int8 kernels came with 2.x.
The two are the same arithmetic shifted by 128: a value ``q`` at (scale, zero point ``z``) in
int8 is ``q + 128`` at (scale, ``z + 128``) in uint8, the same real number. So every int8 tensor
becomes uint8 with its zero point moved by 128 and, when constant, its bytes moved by 128; int32
biases (zero point 0, scale ``s_in * s_w``) stay as they are, since neither scale changes. Each op
then gets the version its uint8 signature needs (``ops/tflite_versions.py``: 1 for nearly all,
where int8 needs 2 to 4), and a FULLY_CONNECTED without a bias gets a zero one (TFLite 1.13's
uint8 kernel crashes without). A bias whose scale is not its input's times its weight's (onnx2tf
2.x writes some a little apart; today's kernels let that pass, TFLite 1.13 refuses the file when
it prepares it: "input_product_scale - bias_scale") is put back on that scale, each value rounded
to the nearest step of the accumulator it is added to. Measured on TFLite 1.13.1: the demo detector's uint8 file is
bit-exact with today's reference kernels on the int8 file it came from.

Per-channel files cannot be rewritten: a uint8 kernel of that era has one scale per tensor.
"""

from __future__ import annotations

import numpy as np

from edgeport.errors import ConversionError
from edgeport.ops.lowering.base import zero_bias
from edgeport.ops.tflite_graph import Graph, Quant
from edgeport.ops.tflite_versions import version_for


class PerChannelError(ConversionError):
    """The int8 file has per-channel tensors: uint8 kernels are per tensor."""


def int8_to_uint8(model: bytes) -> bytes:
    g = Graph(model)
    if g.subgraphs != 1:
        raise ConversionError("the int8 file has several subgraphs (control flow); a uint8 file is written for one graph only")
    per_channel = [g.tensor_name(i) for i in range(len(g.sg.tensors)) if g.dtype(i) == "int8" and g.per_channel(i)]
    if per_channel:
        raise PerChannelError(f"{len(per_channel)} int8 tensors are quantised per channel (first: {per_channel[0]}); "
                              f"uint8 needs one scale per tensor")
    moved: set[int] = set()  # buffers already shifted (tensors may share one)
    for i, t in enumerate(g.sg.tensors):
        if g.dtype(i) != "int8":
            continue
        t.type = g.schema.TensorType.UINT8
        if t.quantization is not None and t.quantization.scale is not None and len(t.quantization.scale):
            zero = t.quantization.zeroPoint  # absent means 0
            t.quantization.zeroPoint = [int(z) + 128 for z in (zero if zero is not None and len(zero) else [0])]
        buf = g.model.buffers[t.buffer] if 0 < t.buffer < len(g.model.buffers) else None
        if buf is not None and buf.data is not None and len(buf.data) and t.buffer not in moved:
            data = np.frombuffer(np.asarray(buf.data, np.uint8).tobytes(), np.int8)
            buf.data = np.frombuffer((data.astype(np.int16) + 128).astype(np.uint8).tobytes(), np.uint8)
            moved.add(t.buffer)
    aligned: set[int] = set()
    for op in g.ops:
        _align_bias(g, op, aligned)
        if g.name(op) == "FULLY_CONNECTED" and (len(op.inputs) < 3 or op.inputs[2] < 0):
            bias = zero_bias(g, f"{g.tensor_name(op.outputs[0])}/zero_bias", g.shape(op.inputs[1])[0], op.inputs[0], op.inputs[1])
            op.inputs = [*op.inputs[:2], bias]
        version = version_for(g, op)
        if version is not None:
            g.set_version(op, version)
    return g.to_bytes()


# op -> (data input, weight input, bias input)
BIASED = {"CONV_2D": (0, 1, 2), "DEPTHWISE_CONV_2D": (0, 1, 2), "FULLY_CONNECTED": (0, 1, 2), "TRANSPOSE_CONV": (2, 1, 3)}
BIAS_SCALE_RTOL = 1e-6  # what TFLite's GetQuantizedConvolutionMultipler allows


def bias_inputs(g: Graph, op) -> tuple[int, int, int] | None:
    """An op's (data, weight, bias) tensors, where it has a bias (``BIASED``)."""
    where = BIASED.get(g.name(op))
    if where is None or len(op.inputs) <= where[2] or op.inputs[where[2]] < 0:
        return None
    return tuple(op.inputs[i] for i in where)


def _align_bias(g: Graph, op, aligned: set[int]) -> None:
    """Put an int32 bias on the scale ``s_in * s_w``, the accumulator it is added to."""
    if (parts := bias_inputs(g, op)) is None:
        return
    x, w, b = parts
    qx, qw, qb, value = g.quant(x), g.quant(w), g.quant(b), g.const(b)
    if qx is None or qw is None or qb is None or value is None or g.dtype(b) != "int32":
        return
    want = float(np.float32(qx.scale) * np.float32(qw.scale))
    if abs(qb.scale - want) <= BIAS_SCALE_RTOL * min(qb.scale, want) or b in aligned:
        return
    moved = np.round(value.astype(np.float64) * qb.scale / want).astype(np.int64)
    fresh = g.constant(f"{g.tensor_name(b)}/aligned", np.clip(moved, -(2**31), 2**31 - 1).astype(np.int32), "int32",
                       Quant(want, 0))
    op.inputs = [fresh if i == BIASED[g.name(op)][2] else t for i, t in enumerate(op.inputs)]
    aligned.add(fresh)
