"""Corrections applied to a converter's int8 TFLite output, where it broke what TFLite's kernels require.

Two kinds. A resize's output can simply take its input's quantisation (below: an in-place
edit of two numbers, exact, since a resize never leaves its input's range). Everywhere else
the broken quantisation is one the graph relies on (a Concat's shared scale, a sigmoid's
fixed 1/256), so ``requantize_int8_constraints`` inserts QUANTIZE ops instead, as
TensorFlow's converter does.

``share_resize_quantization``: onnx2tf 2.x (``flatbuffer_direct``) calibrates the int8 output
of RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR apart from its input, so the two get slightly
different scales. TFLite's resize kernels and XNNPACK require them equal (XNNPACK refuses to
prepare the model; the reference kernels silently mis-scale by the ratio). A resize never
leaves its input's range, so the output takes the input's scale and zero point, as
TensorFlow's own converter writes it: the same bytes then mean what the kernel computed.
"""

from __future__ import annotations

import struct

from edgeport._lazy import require

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
    from edgeport.ops.tflite_model import operators

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


# Ops whose int8 kernels move values without requantising, so TFLite's reference kernels
# and XNNPACK require their data inputs and outputs quantised alike (TensorFlow's quantiser
# marks them restrict_same_input_output_scale): op -> data input indices (None: all), and
# whether the op has several outputs (a split: each output must match the input).
SAME_SCALE_OPS = {
    "CONCATENATION": (None, False),
    "PACK": (None, False),
    "TRANSPOSE": ((0,), False),
    "RESHAPE": ((0,), False),
    "SQUEEZE": ((0,), False),
    "EXPAND_DIMS": ((0,), False),
    "SLICE": ((0,), False),
    "STRIDED_SLICE": ((0,), False),
    "PAD": ((0,), False),
    "MAX_POOL_2D": ((0,), False),
    "DEPTH_TO_SPACE": ((0,), False),
    "SPACE_TO_DEPTH": ((0,), False),
    "GATHER": ((0,), False),
    "TILE": ((0,), False),
    "BROADCAST_TO": ((0,), False),
    "SPLIT": ((1,), True),
    "SPLIT_V": ((0,), True),
    "UNPACK": ((0,), True),
}


# Ops whose int8 kernels require a fixed output quantisation: (scale, zero point).
FIXED_OUTPUT_OPS = {
    "LOGISTIC": (1.0 / 256, -128),
    "SOFTMAX": (1.0 / 256, -128),
    "TANH": (1.0 / 128, 0),
}


def requantize_int8_constraints(model: bytes) -> tuple[bytes, int]:
    """Return the model with a QUANTIZE (int8 to int8 requantise) op wherever an int8 kernel's
    quantisation constraint is broken, and how many were inserted.

    Two constraints, both of which onnx2tf 2.x breaks and TensorFlow's converter keeps:
    - a value-moving op's int8 input and output are quantised alike;
    - LOGISTIC, SOFTMAX and TANH write at a fixed quantisation (``FIXED_OUTPUT_OPS``): 2.x gives
      YOLOv8's score LOGISTIC the scale of the Concat it feeds. TFLite's reference kernels
      refuse it ("output->params.scale == 1. / 256 was not true"); the op now writes at the
      fixed quantisation and a QUANTIZE takes it to the one its consumers read.

    onnx2tf 2.x quantises such inputs apart from their outputs (YOLOv8's TRANSPOSE around
    its split, CONCATENATION of pieces calibrated separately): XNNPACK then refuses the model
    and the reference kernels refuse or mis-scale it. TensorFlow's converter inserts exactly
    these requantising ops; the requantised value is the input's value on the output's grid.
    A single-output value-moving op gets its mismatched inputs requantised to the output's quantisation; a
    split writes each mismatched output at the input's quantisation and requantises it to the
    output's. A model that needs none is returned byte for byte.
    """
    schema = require("ai_edge_litert.schema_py_generated", package="ai-edge-litert", purpose="editing .tflite files")
    import copy

    import flatbuffers

    from edgeport.ops.tflite_file import root as checked_root
    from edgeport.ops.tflite_file import unpack
    from edgeport.ops.tflite_model import operator_codes

    root = checked_root(bytes(model), "the converter's file")  # bounded by its size, as every read is
    names = [name for name, _ in operator_codes(schema, root)]
    if not any(n in SAME_SCALE_OPS or n in FIXED_OUTPUT_OPS for n in names):
        return model, 0
    m = unpack(bytes(model), "the converter's file")
    quantize = None  # operator code index of QUANTIZE v1 (int8 to int8, per tensor), added on first use
    inserted = 0

    def params(tensor):
        q = tensor.quantization
        if tensor.type != schema.TensorType.INT8 or q is None or q.scale is None or len(q.scale) != 1:
            return None
        return float(q.scale[0]), int(q.zeroPoint[0])

    def fixed(scale: float, zero: int):
        q = schema.QuantizationParametersT()
        q.scale, q.zeroPoint, q.quantizedDimension = [scale], [zero], 0
        return q

    def requantized(sg, source: int, quantization) -> tuple[int, object]:
        """A new tensor shaped like ``source`` and quantised as given, and the op that fills it."""
        nonlocal quantize, inserted
        if quantize is None:
            code = schema.OperatorCodeT()
            code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.QUANTIZE
            code.version = 1
            m.operatorCodes.append(code)
            quantize = len(m.operatorCodes) - 1
        tensor = copy.deepcopy(sg.tensors[source])
        tensor.name = (tensor.name.decode() if isinstance(tensor.name, bytes) else tensor.name or "") + "/requantized"
        tensor.buffer = 0  # an activation: no data of its own
        tensor.quantization = copy.deepcopy(quantization)
        sg.tensors.append(tensor)
        op = schema.OperatorT()
        op.opcodeIndex = quantize
        op.builtinOptionsType = schema.BuiltinOptions.QuantizeOptions
        op.builtinOptions = schema.QuantizeOptionsT()
        inserted += 1
        return len(sg.tensors) - 1, op

    for sg in m.subgraphs:
        ops = []
        for op in sg.operators:
            kind = names[op.opcodeIndex]
            if kind in FIXED_OUTPUT_OPS and len(op.outputs) == 1:
                out = int(op.outputs[0])
                if params(sg.tensors[out]) not in (None, FIXED_OUTPUT_OPS[kind]):
                    written, requant = requantized(sg, out, fixed(*FIXED_OUTPUT_OPS[kind]))
                    op.outputs = [written]  # the op writes at its fixed quantisation...
                    requant.inputs, requant.outputs = [written], [out]  # ...then at its consumers'
                    ops += [op, requant]
                    continue
            if kind not in SAME_SCALE_OPS or not len(op.outputs):
                ops.append(op)
                continue
            data, split = SAME_SCALE_OPS[kind]
            op.inputs, op.outputs = [int(i) for i in op.inputs], [int(o) for o in op.outputs]  # read-only views otherwise
            data = [i for i in (range(len(op.inputs)) if data is None else data) if i < len(op.inputs) and op.inputs[i] >= 0]
            if split:
                source = op.inputs[data[0]]
                ops.append(op)
                for k, out in enumerate(list(op.outputs)):
                    if params(sg.tensors[source]) is None or params(sg.tensors[out]) in (None, params(sg.tensors[source])):
                        continue
                    written, requant = requantized(sg, out, sg.tensors[source].quantization)  # the split writes at its input's grid...
                    op.outputs[k] = written
                    requant.inputs, requant.outputs = [written], [out]  # ...then to the output's
                    ops.append(requant)
                continue
            out = op.outputs[0]
            for i in data:
                source = op.inputs[i]
                if params(sg.tensors[out]) is None or params(sg.tensors[source]) in (None, params(sg.tensors[out])):
                    continue
                fed, requant = requantized(sg, source, sg.tensors[out].quantization)
                requant.inputs, requant.outputs = [source], [fed]
                op.inputs[i] = fed
                ops.append(requant)
            ops.append(op)
        sg.operators = ops
    if not inserted:
        return model, 0
    builder = flatbuffers.Builder(len(model) + 1024)
    builder.Finish(m.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output()), inserted
