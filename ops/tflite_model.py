"""What a board needs to know of a .tflite file (``TFLiteSummary``), read without running it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from edgeport.errors import BadInputError
from edgeport.ops.tflite_file import ByContent, digest
from edgeport.userfiles import Refused, read_bounded

# a flatbuffer's offsets are signed 32-bit: no .tflite whose tensors lie inside it is larger
MAX_TFLITE_BYTES = 2 << 30


@dataclass(frozen=True)
class OpUse:
    name: str  # builtin op name, e.g. RESIZE_BILINEAR
    version: int
    count: int
    notes: tuple[str, ...] = ()  # e.g. ("half_pixel_centers",)
    # the version what these uses compute needs, where more than declared (ops/tflite_versions.py)
    needs: int | None = None
    dtype: str = ""  # the type of their first input (a quantised kernel is per type)


@dataclass(frozen=True)
class TFLiteSummary:
    path: str
    size_bytes: int
    ops: tuple[OpUse, ...]
    activation_dtypes: tuple[str, ...]  # dtypes of non-constant tensors
    min_runtime_version: str | None
    custom_ops: tuple[str, ...] = field(default=())
    num_outputs: int = 0
    input_shape: tuple[int, ...] = ()  # the first input's
    input_dtype: str = ""
    input_quantization: tuple[float, int] = (0.0, 0)  # (scale, zero_point) of the first input
    output_shapes: tuple[tuple[int, ...], ...] = ()  # the main subgraph's outputs, in order
    # why it cannot run although it unpacks (``structural_problems``): the gate's first reasons
    problems: tuple[str, ...] = ()

    def op(self, name: str) -> list[OpUse]:
        return [o for o in self.ops if o.name == name]


_SUMMARIES = ByContent(16)  # (path, digest) -> TFLiteSummary (frozen)


def read_tflite(path: Path) -> TFLiteSummary:
    """What a board needs to know of the file at ``path``, read through the one bounded reader
    (``ops/tflite_file.py``): a damaged or hostile flatbuffer is bad input (exit 2), a file that
    unpacks but cannot run (``structural_problems``) is summarised with its problems."""
    try:
        data = read_bounded(path, MAX_TFLITE_BYTES)
    except Refused as exc:
        raise BadInputError(f"{str(path)!r} {exc}; pass a .tflite file") from None
    except OSError as exc:
        raise BadInputError(f"cannot read {str(path)!r}: {exc}") from exc
    # summarised once per path and exact bytes (``ByContent`` says why)
    return _SUMMARIES.get((str(path), digest(data)), lambda: _read(data, str(path)))


def _read(data: bytes, path: str) -> TFLiteSummary:
    from edgeport.ops.tflite_graph import Graph

    graph = Graph(data, what=repr(path))
    try:
        return _summarise(graph, path, len(data))
    except BadInputError:
        raise
    except Exception as exc:  # a damaged flatbuffer raises anything from struct errors to IndexError
        raise BadInputError(f"{path!r} is a damaged TFLite flatbuffer ({type(exc).__name__}: {exc})") from exc


# bytes per element, for the constant buffers a shape needs
_ITEM_BYTES = {"float32": 4, "int8": 1, "uint8": 1, "int32": 4, "int64": 8, "int16": 2, "bool": 1, "float16": 2,
               "float64": 8, "uint16": 2, "uint32": 4, "uint64": 8}


def structural_problems(graph) -> list[str]:
    """Why a file that unpacks still cannot run, as a runtime would say it: an op code, tensor or
    buffer index past the end of its list; a constant whose buffer is shorter than its shape; an
    output no operator computes (an empty operator list); an operator reading a tensor no earlier
    operator wrote (one reading its own output). Empty when none."""
    import numpy as np

    model, problems = graph.model, []
    n_codes, n_buffers = len(model.operatorCodes or ()), len(model.buffers or ())
    for g, sg in enumerate(model.subgraphs):
        where = "" if len(model.subgraphs) == 1 else f" of subgraph {g}"
        tensors = sg.tensors or []
        view = graph.at(g)

        def name(t: int, view=view, tensors=tensors) -> str:
            return repr(view.tensor_name(t)) if 0 <= t < len(tensors) else str(t)

        constant = set()
        for t, tensor in enumerate(tensors):
            if tensor.type not in graph._type_names:
                problems.append(f"tensor {name(t)}{where} has type {tensor.type}, which no runtime knows")
            if not 0 <= tensor.buffer < n_buffers:
                problems.append(f"tensor {name(t)}{where} names buffer {tensor.buffer}; the model has {n_buffers} buffers")
                continue
            data = model.buffers[tensor.buffer].data
            if tensor.buffer > 0 and data is not None and len(data):
                constant.add(t)
                dtype = graph._type_names.get(tensor.type, "?").lower()
                shape = [int(v) for v in tensor.shape] if tensor.shape is not None else []
                if dtype in _ITEM_BYTES and tensor.sparsity is None and all(v >= 0 for v in shape):
                    need = _ITEM_BYTES[dtype] * int(np.prod(shape, dtype=np.float64))
                    if len(data) < need:
                        problems.append(f"constant {name(t)}{where} holds {len(data):,} bytes; its shape {shape} of {dtype} "
                                        f"needs {need:,} (a cut-short buffer)")
        for kind, ids in (("input", sg.inputs), ("output", sg.outputs)):
            bad = [int(i) for i in ids if not 0 <= int(i) < len(tensors)]
            if bad:
                problems.append(f"the model's {kind} tensor {bad[0]}{where} is past its {len(tensors)} tensors")
        # what an operator may read before any operator writes it: the model's inputs, constants, variables,
        # and tensors of no elements (a zero-size constant has an empty buffer)
        empty = {t for t, x in enumerate(tensors) if x.shape is not None and any(int(v) == 0 for v in x.shape)}
        written = {int(i) for i in sg.inputs} | constant | empty | {t for t, x in enumerate(tensors) if x.isVariable}
        for k, op in enumerate(sg.operators or ()):
            if not 0 <= op.opcodeIndex < n_codes:
                problems.append(f"operator {k}{where} names op code {op.opcodeIndex}; the model has {n_codes}")
                continue
            label = f"operator {k} ({view.name(op)}){where}"
            bad = [int(i) for i in op.inputs if not -1 <= int(i) < len(tensors)] + \
                [int(o) for o in op.outputs if not 0 <= int(o) < len(tensors)]
            if bad:
                problems.append(f"{label} names tensor {bad[0]}; the graph has {len(tensors)} tensors")
                continue
            outputs = {int(o) for o in op.outputs}
            for i in (int(i) for i in op.inputs if int(i) >= 0 and int(i) not in written):
                problems.append(f"{label} reads tensor {name(i)}, which it writes itself" if i in outputs else
                                f"{label} reads tensor {name(i)} before any operator writes it")
                break
            written |= outputs
        unwritten = [int(o) for o in sg.outputs if 0 <= int(o) < len(tensors) and int(o) not in written]
        if unwritten:
            why = "the operator list is empty" if not sg.operators else "no operator writes it"
            problems.append(f"output {name(unwritten[0])}{where} is never computed ({why})")
    return problems


def _summarise(graph, path: str, size: int) -> TFLiteSummary:
    from edgeport.ops.tflite_versions import data_type, needed_version

    model = graph.model
    problems = structural_problems(graph)
    dtype_names = graph._type_names
    counts: dict[tuple[str, int, tuple[str, ...], int | None, str], int] = {}
    activation = set()
    n_buffers = len(model.buffers)
    for g, sg in enumerate(model.subgraphs):
        tensors = sg.tensors or []
        for tensor in tensors:
            data = model.buffers[tensor.buffer].data if 0 <= tensor.buffer < n_buffers else None
            if data is None or len(data) == 0:
                activation.add(dtype_names.get(tensor.type, str(tensor.type)).lower())
        view = graph.at(g)
        for op in view.ops:
            if not (0 <= op.opcodeIndex < len(model.operatorCodes)):
                continue
            name, version = view.name(op), view.version(op)
            sound = all(-1 <= i < len(tensors) for i in op.inputs) and all(0 <= o < len(tensors) for o in op.outputs)
            try:  # what an op computes is read from its tensors: only where they exist
                notes = op_notes(view, op, name) if sound else ()
                needs = needed_version(view, op) if sound and not name.startswith("CUSTOM:") else None
                dtype = data_type(view, op) if sound else ""
            except (IndexError, KeyError, TypeError, AttributeError, ValueError) as exc:  # inputs or options unlike the op's
                notes, needs, dtype = (), None, ""
                problems.append(f"{name} v{version}: its inputs or options are not what {name} takes ({type(exc).__name__})")
            key = (name, version, notes, needs if needs is not None and needs > version else None, dtype)
            counts[key] = counts.get(key, 0) + 1
    # every custom op code, used or not: a runtime resolves each code when it loads the file
    custom = {name for name in (graph.code_name(c) for c in model.operatorCodes or ()) if name.startswith("CUSTOM:")}
    main = model.subgraphs[0]
    inputs = [int(i) for i in main.inputs if 0 <= int(i) < len(main.tensors or ())]
    first_input = main.tensors[inputs[0]] if inputs else None
    min_rt = None
    for md in model.metadata or ():
        if md.name == b"min_runtime_version" and 0 <= md.buffer < n_buffers and model.buffers[md.buffer].data is not None:
            raw = bytes(bytearray(model.buffers[md.buffer].data))
            min_rt = raw.split(b"\x00")[0].decode(errors="replace") or None
    ops = tuple(OpUse(n, v, c, notes, needs, dtype) for (n, v, notes, needs, dtype), c in
                sorted(counts.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2], kv[0][3] or 0, kv[0][4])))
    outputs = [int(o) for o in main.outputs if 0 <= int(o) < len(main.tensors or ())]
    return TFLiteSummary(
        path=path, size_bytes=size, ops=ops, activation_dtypes=tuple(sorted(activation)),
        min_runtime_version=min_rt, custom_ops=tuple(sorted(custom)),
        num_outputs=len(main.outputs),
        input_shape=tuple(int(v) for v in first_input.shape) if first_input is not None and first_input.shape is not None else (),
        input_dtype=dtype_names.get(first_input.type, "?").lower() if first_input is not None else "",
        input_quantization=_quantization(first_input),
        output_shapes=tuple(tuple(int(v) for v in (main.tensors[o].shape if main.tensors[o].shape is not None else ()))
                            for o in outputs),
        problems=tuple(dict.fromkeys(problems)),
    )


def _quantization(tensor) -> tuple[float, int]:
    q = tensor.quantization if tensor is not None else None
    if q is None or q.scale is None or len(q.scale) == 0:
        return (0.0, 0)
    return (float(q.scale[0]), int(q.zeroPoint[0]) if q.zeroPoint is not None and len(q.zeroPoint) else 0)


# the finest input grid every uint8 LOGISTIC and TANH kernel handles (ops/lowering/fine_input.py says why)
FINE_INPUT_SCALE = 2.0**-12
# the most values a uint8 AVERAGE_POOL_2D window may sum: TFLite 1.13.1's sums them in 16 bits
# (256 x 255 fits; from 17 x 17 on its averages come back wrapped, measured)
POOL_WINDOW_VALUES = 256


def op_notes(g, op, name: str) -> tuple[str, ...]:
    """What an op computes beyond its plain form, where a kernel version decides it:
    ``half_pixel_centers`` / ``align_corners`` of a resize; ``grouped`` for a grouped CONV_2D, which
    only a v6 kernel computes, whatever version its writer declared (onnx2tf 2.x: v1);
    ``fine_input`` for a uint8 LOGISTIC or TANH whose input scale is under ``FINE_INPUT_SCALE``;
    ``large_window`` for a uint8 AVERAGE_POOL_2D over more than ``POOL_WINDOW_VALUES`` values."""
    from edgeport.ops.tflite_versions import is_grouped

    opts = op.builtinOptions
    notes = []
    if name in ("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR") and opts is not None:
        if opts.alignCorners:
            notes.append("align_corners")
        if opts.halfPixelCenters:
            notes.append("half_pixel_centers")
    if name == "CONV_2D" and len(op.inputs) >= 2 and is_grouped(g, op):
        notes.append("grouped")
    if name in ("LOGISTIC", "TANH") and g.dtype(op.inputs[0]) == "uint8":
        q = g.quant(op.inputs[0])
        if q is not None and q.scale < FINE_INPUT_SCALE:
            notes.append("fine_input")
    if name == "AVERAGE_POOL_2D" and g.dtype(op.inputs[0]) == "uint8" and opts is not None \
            and opts.filterWidth * opts.filterHeight > POOL_WINDOW_VALUES:
        notes.append("large_window")
    return tuple(notes)
