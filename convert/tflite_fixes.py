"""Corrections applied to a converter's TFLite output, each a small in-place flatbuffer edit.

``share_resize_quantization``: onnx2tf 2.x (``flatbuffer_direct``) calibrates the int8 output
of RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR apart from its input, so the two get slightly
different scales. TFLite's resize kernels and XNNPACK require them equal (XNNPACK refuses to
prepare the model; the reference kernels silently mis-scale by the ratio). A resize never
leaves its input's range, so the output takes the input's scale and zero point, as
TensorFlow's own converter writes it: the same bytes then mean what the kernel computed.
"""

from __future__ import annotations

import struct

RESIZE_OPS = ("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR")
# vtable offsets of QuantizationParameters.scale and .zero_point in TFLite's schema
_SCALE, _ZERO_POINT = 8, 10


def _quant(tensor):
    q = tensor.Quantization()
    if q is None or q.ScaleLength() != 1 or q.ZeroPointLength() != 1:
        return None  # float, or per-channel: not what a resize activation carries
    return q


def share_resize_quantization(model: bytes) -> tuple[bytes, int]:
    """Return the model with every int8 resize output quantised like its input, and how many changed."""
    from edgeport.validate.tflite_model import operators

    buf = bytearray(model)
    changed = 0
    for _, sg, op in operators(model, RESIZE_OPS):
        qin, qout = _quant(sg.Tensors(op.Inputs(0))), _quant(sg.Tensors(op.Outputs(0)))
        if qin is None or qout is None or (qin.Scale(0), qin.ZeroPoint(0)) == (qout.Scale(0), qout.ZeroPoint(0)):
            continue
        tab = qout._tab  # the flatbuffer table the generated reader wraps
        struct.pack_into("<f", buf, tab.Vector(tab.Offset(_SCALE)), qin.Scale(0))
        struct.pack_into("<q", buf, tab.Vector(tab.Offset(_ZERO_POINT)), qin.ZeroPoint(0))
        changed += 1
    return bytes(buf), changed
