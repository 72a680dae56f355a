"""Read what a board needs to know from a .tflite flatbuffer, without running it.

Operators with their versions and options that change semantics (resize flags), the
dtypes of activation tensors, the ``min_runtime_version`` metadata and the file size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from edgeport._lazy import require
from edgeport.errors import BadInputError


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

    def op(self, name: str) -> list[OpUse]:
        return [o for o in self.ops if o.name == name]


def _names(enum_cls) -> dict[int, str]:
    return {v: k for k, v in vars(enum_cls).items() if not k.startswith("_") and isinstance(v, int)}


def read_tflite(path: Path) -> TFLiteSummary:
    schema = require("ai_edge_litert.schema_py_generated", package="ai-edge-litert", purpose="reading .tflite files")
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise BadInputError(f"cannot read {str(path)!r}: {exc}") from exc
    if len(data) < 8 or data[4:8] != b"TFL3":
        raise BadInputError(f"{str(path)!r} is not a TFLite model (no TFL3 identifier); pass a .tflite file")
    try:
        model = schema.Model.GetRootAs(data, 0)
        if model.SubgraphsLength() == 0:
            raise ValueError("no subgraphs")
        return _summarise(schema, model, str(path), len(data), data)
    except Exception as exc:  # a damaged flatbuffer raises anything from struct errors to IndexError
        raise BadInputError(f"{str(path)!r} is a damaged TFLite flatbuffer ({type(exc).__name__}: {exc})") from exc


def operator_codes(schema, model) -> list[tuple[str, int]]:
    """(op name, version) per operator code: a builtin name, or ``CUSTOM:name``."""
    op_names = _names(schema.BuiltinOperator)
    codes = []
    for i in range(model.OperatorCodesLength()):
        oc = model.OperatorCodes(i)
        # builtin codes past 127 live in the newer field; the deprecated one saturates
        code = max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())
        custom = oc.CustomCode().decode() if oc.CustomCode() else None
        codes.append((f"CUSTOM:{custom}" if custom else op_names.get(code, f"OP_{code}"), oc.Version()))
    return codes


def operators(model: bytes, names: tuple[str, ...]):
    """(schema, subgraph, operator) for every operator named in ``names``, across all subgraphs:
    the walk every in-place flatbuffer edit starts from."""
    schema = require("ai_edge_litert.schema_py_generated", package="ai-edge-litert", purpose="reading .tflite files")
    root = schema.Model.GetRootAs(bytes(model), 0)
    codes = [name for name, _ in operator_codes(schema, root)]
    for g in range(root.SubgraphsLength()):
        sg = root.Subgraphs(g)
        for o in range(sg.OperatorsLength()):
            op = sg.Operators(o)
            if codes[op.OpcodeIndex()] in names:
                yield schema, sg, op


def _summarise(schema, model, path: str, size: int, data: bytes) -> TFLiteSummary:
    from edgeport.ops.tflite_graph import Graph
    from edgeport.ops.tflite_versions import data_type, needed_version

    dtype_names = _names(schema.TensorType)
    codes = operator_codes(schema, model)
    counts: dict[tuple[str, int, tuple[str, ...], int | None, str], int] = {}
    activation = set()
    graph = Graph(data)
    for g in range(model.SubgraphsLength()):
        sg = model.Subgraphs(g)
        for t in range(sg.TensorsLength()):
            tensor = sg.Tensors(t)
            buf = model.Buffers(tensor.Buffer()) if tensor.Buffer() < model.BuffersLength() else None
            if buf is None or buf.DataLength() == 0:
                activation.add(dtype_names.get(tensor.Type(), str(tensor.Type())).lower())
        view = graph.at(g)
        for op in view.ops:
            name, version = codes[op.opcodeIndex]
            notes = op_notes(view, op, name)
            needs = needed_version(view, op) if not name.startswith("CUSTOM:") else None
            dtype = data_type(view, op)
            key = (name, version, notes, needs if needs is not None and needs > version else None, dtype)
            counts[key] = counts.get(key, 0) + 1
    main = model.Subgraphs(0)
    first_input = main.Tensors(int(main.Inputs(0))) if main.InputsLength() else None
    min_rt = None
    for i in range(model.MetadataLength()):
        md = model.Metadata(i)
        if md.Name() == b"min_runtime_version":
            raw = model.Buffers(md.Buffer()).DataAsNumpy().tobytes()
            min_rt = raw.split(b"\x00")[0].decode() or None
    ops = tuple(OpUse(n, v, c, notes, needs, dtype) for (n, v, notes, needs, dtype), c in
                sorted(counts.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2], kv[0][3] or 0, kv[0][4])))
    return TFLiteSummary(
        path=path, size_bytes=size, ops=ops, activation_dtypes=tuple(sorted(activation)),
        min_runtime_version=min_rt, custom_ops=tuple(sorted({n for n, _ in codes if n.startswith("CUSTOM:")})),
        num_outputs=model.Subgraphs(0).OutputsLength(),
        input_shape=tuple(int(v) for v in first_input.ShapeAsNumpy()) if first_input is not None else (),
        input_dtype=dtype_names.get(first_input.Type(), "?").lower() if first_input is not None else "",
        input_quantization=_quantization(first_input),
    )


def _quantization(tensor) -> tuple[float, int]:
    q = tensor.Quantization() if tensor is not None else None
    if q is None or q.ScaleLength() == 0:
        return (0.0, 0)
    return (float(q.Scale(0)), int(q.ZeroPoint(0)) if q.ZeroPointLength() else 0)


# the finest input grid every uint8 LOGISTIC and TANH kernel handles: TFLite 1.13.1's return 0
# (every value) below it (measured: validate/board/uint8_probe.py probes it on each runtime)
FINE_INPUT_SCALE = 2.0**-12
# the most values a uint8 AVERAGE_POOL_2D window may sum: TFLite 1.13.1's sums them in 16 bits
# (256 x 255 fits; from 17 x 17 on its averages come back wrapped, measured)
POOL_WINDOW_VALUES = 256


def op_notes(g, op, name: str) -> tuple[str, ...]:
    """What an op computes beyond its plain form, where a kernel version decides it:
    ``half_pixel_centers`` / ``align_corners`` of a resize, ``grouped`` for a CONV_2D whose input
    has more channels than its filter (a grouped convolution, whatever version the writer
    declared: onnx2tf 2.x writes these as v1, which only runtimes with the v6 kernel compute);
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
