"""Corrections applied to a converter's int8 TFLite output, each written through
``ops/tflite_graph.Graph``, in every subgraph: where it broke what TFLite's kernels require
(``share_resize_quantization``; elsewhere the broken quantisation is one the graph relies on, a
Concat's shared scale, a sigmoid's fixed 1/256, so ``requantize_int8_constraints`` inserts QUANTIZE
ops instead), and where it rounds a constant it could hold exactly (``exact_constants``).

``share_resize_quantization``: onnx2tf 2.x (``flatbuffer_direct``) calibrates the int8 output
of RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR apart from its input, so the two get slightly
different scales. TFLite's resize kernels and XNNPACK require them equal (XNNPACK refuses to
prepare the model; the reference kernels silently mis-scale by the ratio). A resize never
leaves its input's range, so the output takes the input's scale and zero point, as
TensorFlow's own converter writes it: the same bytes then mean what the kernel computed.
"""

from __future__ import annotations

import math

import numpy as np

from edgeport.ops.tflite_graph import Graph, Quant

RESIZE_OPS = ("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR")


def _subgraphs(model: bytes) -> tuple[Graph, list[Graph]]:
    g = Graph(model, what="the converter's file")  # bounded by its size, as every read is
    return g, [g.at(i) for i in range(g.subgraphs)]


def _int8_quant(g: Graph, i: int) -> Quant | None:
    """Per-tensor int8 quantisation, or None (float, per-channel, or another type)."""
    return g.quant(i) if g.dtype(i) == "int8" else None


def share_resize_quantization(model: bytes) -> tuple[bytes, int]:
    """Return the model with every int8 resize output quantised like its input, and how many
    changed (a model that needs none is returned byte for byte)."""
    g, views = _subgraphs(model)
    changed = 0
    for view in views:
        for op in view.ops:
            if view.name(op) not in RESIZE_OPS:
                continue
            qin, qout = _int8_quant(view, op.inputs[0]), _int8_quant(view, op.outputs[0])
            if qin is None or qout is None or qin == qout:
                continue
            q = view.tensor(op.outputs[0]).quantization
            q.scale, q.zeroPoint = [qin.scale], [qin.zero_point]
            changed += 1
    return (g.to_bytes(), changed) if changed else (model, 0)


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

    Two constraints, both of which onnx2tf 2.x breaks and TensorFlow's converter keeps with these ops:
    - a value-moving op's int8 input and output are quantised alike;
    - LOGISTIC, SOFTMAX and TANH write at a fixed quantisation (``FIXED_OUTPUT_OPS``): 2.x gives
      YOLOv8's score LOGISTIC the scale of the Concat it feeds. TFLite's reference kernels
      refuse it ("output->params.scale == 1. / 256 was not true"); the op now writes at the
      fixed quantisation and a QUANTIZE takes it to the one its consumers read.

    2.x quantises value-moving inputs apart from their outputs (YOLOv8's TRANSPOSE around its split,
    CONCATENATION of pieces calibrated separately): XNNPACK then refuses the model and the reference
    kernels refuse or mis-scale it. A single-output value-moving op's mismatched input is requantised
    to its output's grid; a split writes each mismatched output on its input's grid, then requantises
    it to the output's. A model that needs none is returned byte for byte.
    """
    g, views = _subgraphs(model)
    inserted = 0

    def quantize(view: Graph, source: int, into: int):
        """The QUANTIZE op that requantises ``source`` into ``into``."""
        nonlocal inserted
        inserted += 1
        return view.new_op("QUANTIZE", [source], [into], "QuantizeOptions")

    for view in views:
        ops = []
        for op in view.ops:
            kind = view.name(op)
            if kind in FIXED_OUTPUT_OPS and len(op.outputs) == 1:
                out, fixed = op.outputs[0], Quant(*FIXED_OUTPUT_OPS[kind])
                if _int8_quant(view, out) not in (None, fixed):
                    written = view.like(out, "requantized", quant=fixed)
                    op.outputs = [written]  # the op writes at its fixed quantisation...
                    ops += [op, quantize(view, written, out)]  # ...then at its consumers'
                    continue
            if kind not in SAME_SCALE_OPS or not op.outputs:
                ops.append(op)
                continue
            data, split = SAME_SCALE_OPS[kind]
            data = [i for i in (range(len(op.inputs)) if data is None else data) if i < len(op.inputs) and op.inputs[i] >= 0]
            if split:
                source = op.inputs[data[0]]
                qsource = _int8_quant(view, source)
                ops.append(op)
                for k, out in enumerate(list(op.outputs)):
                    if qsource is None or _int8_quant(view, out) in (None, qsource):
                        continue
                    written = view.like(out, "requantized", quant=qsource)  # the split writes at its input's grid...
                    op.outputs[k] = written
                    ops.append(quantize(view, written, out))  # ...then to the output's
                continue
            out = op.outputs[0]
            qout = _int8_quant(view, out)
            for i in data:
                source = op.inputs[i]
                if qout is None or _int8_quant(view, source) in (None, qout):
                    continue
                fed = view.like(source, "requantized", quant=qout)
                op.inputs[i] = fed
                ops.append(quantize(view, source, fed))
            ops.append(op)
        view.sg.operators = ops
    return (g.to_bytes(), inserted) if inserted else (model, 0)


# Elementwise ops whose int8 kernels take each input on its own grid (TFLite's reference kernels and
# XNNPACK rescale both inputs to the output's): a constant input may take any scale and zero point.
ELEMENTWISE_OPS = ("ADD", "SUB", "MUL")


def exact_grid(values: np.ndarray, below: float = math.inf) -> Quant | None:
    """An int8 grid on which every one of ``values`` lies exactly: a step under ``below`` that divides
    each of them (the smallest nonzero magnitude over 1, 2, ... 255: the coarsest first) and a zero
    point that fits them all; None where no such grid exists."""
    v = np.unique(np.asarray(values, np.float64))
    nonzero = np.abs(v[v != 0])
    if nonzero.size == 0 or not np.all(np.isfinite(v)):
        return None
    for n in range(1, 256):
        step = float(nonzero.min()) / n
        if not step < below:
            continue
        k = v / step
        if np.all(np.abs(k - np.round(k)) <= 1e-6 * np.maximum(1.0, np.abs(k))):
            k = np.round(k)
            low = min(float(k.min()), 0.0)
            if float(k.max()) - low <= 255:
                return Quant(step, int(-128 - low))
    return None


def _mul_step_bound(view, op, constant: int) -> float:
    """The step ``constant`` of MUL ``op`` must stay under for the op to rescale its product by less
    than 1 (its inputs' scales' product over its output's): at 1 or more it needs MUL version 3, which
    an old board's runtime (TFLite 1.13) lacks, and aborts on. 0 where the op's grids are not all per-tensor int8."""
    other = [_int8_quant(view, i) for i in op.inputs if i >= 0 and i != constant]
    out = _int8_quant(view, op.outputs[0])
    # (a rescale of 1 to float32 rounding is 1 to a kernel that computes it in float32: kept clear of it)
    return out.scale / other[0].scale * (1 - 1e-5) if len(other) == 1 and other[0] is not None and out is not None else 0.0


def exact_constants(model: bytes, float_file: bytes, factors=()) -> tuple[bytes, int]:
    """The int8 file with each quantised constant of an elementwise op put on a grid that holds its
    values exactly, where one exists, and how many changed (a model that needs none is returned byte
    for byte). A converter gives a constant the grid of its range, 255 steps across it, where no value
    but the ends may lie: YOLOv8's anchor centres (0.5, 1.5, ...) and strides (8, 16, 32) round by up
    to half a step, and every box shifts with them, a bias of up to 0.4 % of its position. The
    constant's values come from the float32 file of the same conversion: the one constant there of as
    many values that the int8 constant is the quantisation of, to the bit -- or that constant divided
    by one of ``factors`` (the output groups' normalisation, ``convert/converters/int8_groups.py``: the
    int8 file is converted from the graph with its groups divided, and a converter may fuse the
    division into a constant). No match, two, or no exact grid: the constant stays as it is."""
    g, views = _subgraphs(model)
    f = Graph(float_file, what="the float32 file")
    known = [c.astype(np.float64) for c in (f.const(i) for i in sorted({i for op in f.ops for i in op.inputs if i >= 0}))
             if c is not None and c.dtype == np.float32]
    known += [c / factor for c in list(known) for factor in factors if factor not in (0, 1)]
    changed = 0
    for view in views:
        done = set()
        for op in view.ops:
            if view.name(op) not in ELEMENTWISE_OPS:
                continue
            for i in op.inputs:
                q = _int8_quant(view, i) if i >= 0 and i not in done else None
                held = view.const(i) if q is not None else None
                if held is None:
                    continue
                quantised = [c for c in known if c.size == held.size and np.array_equal(
                    np.clip(np.round(c.reshape(held.shape) / q.scale) + q.zero_point, -128, 127), held)]
                values = {c.tobytes(): c for c in quantised}
                below = _mul_step_bound(view, op, i) if view.name(op) == "MUL" else math.inf
                grid = exact_grid(next(iter(values.values())), below) if len(values) == 1 else None
                if grid is None or grid == q:
                    continue
                exact = next(iter(values.values())).reshape(held.shape)
                view.set_const(i, (np.round(exact / grid.scale) + grid.zero_point).astype(np.int8))
                quant = view.tensor(i).quantization
                quant.scale, quant.zeroPoint = [grid.scale], [grid.zero_point]
                done.add(i)
                changed += 1
    return (g.to_bytes(), changed) if changed else (model, 0)
