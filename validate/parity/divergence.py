"""Where a converted model stops computing what the trained model computes.

The reference is the trained model as loaded, exported to ONNX and run by ONNX Runtime
with every intermediate tensor kept. The candidate is the shipped model: ONNX Runtime on
``model.onnx``, or TFLite's reference kernels with every tensor an output (int8 tensors
dequantised, NHWC mapped to NCHW). Names do not survive conversion, so tensors are paired
by value: walking the reference graph in order, each activation is compared with every
candidate tensor of the same shape and the closest one is kept. The first reference
tensor that no candidate reproduces within tolerance is the divergence point.

Reference tensors that conversion legitimately fuses away (a Conv's output feeding only a
ReLU, Clip or BatchNormalization) are skipped: no runtime materialises them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from edgeport._lazy import require
from edgeport.ops.tflite_file import ByContent
from edgeport.validate.metrics import cosine, max_abs_rel
from edgeport.validate.parity.tensors import from_model_output, to_model_input

FUSED_CONSUMERS = {"Relu", "Clip", "BatchNormalization", "LeakyRelu"}


@dataclass(frozen=True)
class Tensor:
    producer: str  # node / op name
    op_type: str
    value: np.ndarray  # NCHW float32


@dataclass(frozen=True)
class LayerError:
    index: int
    reference: str  # reference node name
    reference_type: str
    candidate: str | None  # closest candidate producer
    candidate_type: str | None
    max_abs_rel: float
    cosine: float
    ok: bool


@dataclass(frozen=True)
class Divergence:
    found: bool
    first: LayerError | None
    curve: tuple[LayerError, ...]
    criterion: str

    def to_dict(self) -> dict:
        return {"found": self.found, "first": asdict(self.first) if self.first else None,
                "criterion": self.criterion, "curve": [asdict(e) for e in self.curve]}


def onnx_intermediates(path: Path, x: np.ndarray) -> list[Tensor]:
    """Every 4-D float activation of an ONNX model, in graph order (fused-away ones dropped)."""
    onnx = require("onnx")
    ort = require("onnxruntime")
    model = onnx.load(str(path))
    # each intermediate declared with its own dtype: a Shape's int64 declared FLOAT makes ONNX
    # Runtime refuse the whole graph; only float activations are compared
    inferred = onnx.shape_inference.infer_shapes(model)
    dtypes = {vi.name: vi.type.tensor_type.elem_type
              for vi in [*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input]}
    consumers: dict[str, list[str]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node.op_type)
    keep = []
    existing = {o.name for o in model.graph.output}
    for node in model.graph.node:
        for out in node.output:
            users = consumers.get(out, [])
            if len(users) == 1 and users[0] in FUSED_CONSUMERS and out not in existing:
                continue
            if dtypes.get(out) != onnx.TensorProto.FLOAT:
                continue  # an index, a shape, a mask -- or a tensor of unknown type: nothing to compare
            keep.append((out, node.name or out, node.op_type))
            if out not in existing:
                model.graph.output.append(onnx.helper.make_tensor_value_info(out, onnx.TensorProto.FLOAT, None))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    wanted = [k[0] for k in keep]
    values = dict(zip(wanted, sess.run(wanted, {sess.get_inputs()[0].name: x.astype(np.float32)})))
    return [Tensor(name, op_type, np.asarray(values[out], np.float32)) for out, name, op_type in keep
            if np.asarray(values[out]).ndim == 4 and np.asarray(values[out]).dtype.kind == "f"]


LAYOUTS = ("nhwc", "nchw", "both")


def tflite_intermediates(path: Path, x: np.ndarray, layout: str, *, work: Path | None = None) -> list[Tensor]:
    """Every 4-D op output of a TFLite model run by the reference kernels, in execution order,
    as NCHW: read as NHWC (how converters lay out a convolution's tensors), as NCHW, or both ways
    (as candidates, where a tensor may be kept either way -- litert-torch keeps some in PyTorch's
    layout between its TRANSPOSEs -- and the closest wins); run by ``every_tensor_values``."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r}; valid: {', '.join(LAYOUTS)}")
    from edgeport.ops.tflite_graph import Graph

    raw = Path(path).read_bytes()
    g = Graph(raw)
    (inp,) = g.sg.inputs
    q = g.quant(inp)
    x_raw = to_model_input(x, g.shape(inp), np.dtype(g.dtype(inp)), (q.scale, q.zero_point) if q else (0.0, 0))
    out = []
    for (index, op, name), raw_value in zip(every_tensor_as_output(raw)[1], every_tensor_values(path, x_raw, work)):
        t = next(t for t in g.ops[index].outputs if t >= 0 and g.tensor_name(t) == name)
        q = g.quant(t)
        if raw_value.ndim != 4 or (raw_value.dtype != np.float32 and q is None):
            continue  # not 4-D, or an integer tensor that is not a quantised activation
        for nhwc in {"nhwc": (True,), "nchw": (False,), "both": (True, False)}[layout]:
            value = from_model_output(raw_value, raw_value.dtype, (q.scale, q.zero_point) if q else (0.0, 0), nhwc=nhwc)
            out.append(Tensor(name, op, np.asarray(value, np.float32)))
    return out


_RUNS = ByContent(1)  # (the file's digest, the input's) -> every op output on the reference kernels: the last run only


def every_tensor_values(path: Path, x_raw: np.ndarray, work: Path | None = None) -> list[np.ndarray]:
    """Every op output of ``path`` (in ``every_tensor_as_output``'s order, read-only) for its input
    ``x_raw`` (as the file takes it), on the reference kernels; once per file and input: a failing
    quantised row's divergence and its op errors both read that run, which is long on a large model."""
    import tempfile

    from edgeport.ops.tflite_file import digest
    from edgeport.ops.tflite_run import run_tflite

    raw = Path(path).read_bytes()
    x_raw = np.ascontiguousarray(x_raw)

    def run() -> tuple[np.ndarray, ...]:
        model, _ = every_tensor_as_output(raw)
        with tempfile.TemporaryDirectory(prefix="every-tensor-", dir=work) as tmp:
            every = Path(tmp) / f"every_tensor_{Path(path).name}"
            every.write_bytes(model)
            values = run_tflite(every, x_raw, source=Path(path))
        for v in values:
            v.setflags(write=False)
        return tuple(values)

    key = (digest(raw), str(x_raw.dtype), x_raw.shape, digest(x_raw.tobytes()))
    return list(_RUNS.get(key, run))


def _errors(ref: np.ndarray, got: np.ndarray) -> tuple[float, float]:
    return max_abs_rel(ref, got), cosine(ref, got)


def _closest(ref: np.ndarray, pool: list[Tensor], *, by_rel: bool, norms: dict) -> Tensor:
    """The candidate in ``pool`` closest to ``ref``: least max|difference| (then highest cosine) when
    ``by_rel``, else highest cosine; in float32, the norms of candidates kept in ``norms`` (by id). A pool holds
    up to tens of tensors of a shape, so nothing is converted a pair at a time."""
    r = np.ascontiguousarray(ref, np.float32).ravel()
    r_norm = float(np.linalg.norm(r))
    best, best_key = pool[0], None
    for c in pool:
        g = np.ascontiguousarray(c.value, np.float32).ravel()
        if id(c) not in norms:
            norms[id(c)] = float(np.linalg.norm(g))
        denom = r_norm * norms[id(c)]
        cos = float(np.dot(r, g)) / denom if denom > 0 else (1.0 if r_norm == norms[id(c)] else 0.0)
        cos = cos if math.isfinite(cos) else -math.inf
        if by_rel:
            diff = float(np.abs(r - g).max(initial=0.0))
            key = (diff if math.isfinite(diff) else math.inf, -cos)
        else:
            key = (-cos,)
        if best_key is None or key < best_key:
            best, best_key = c, key
    return best


def locate(reference: list[Tensor], candidates: list[Tensor], *, max_abs_rel: float | None, min_cosine: float | None) -> Divergence:
    """Pair reference tensors with their closest candidates and find the first unmatched one."""
    by_shape: dict[tuple, list[Tensor]] = {}
    for c in candidates:
        by_shape.setdefault(c.value.shape, []).append(c)
    curve, norms = [], {}
    for i, ref in enumerate(reference):
        pool = by_shape.get(ref.value.shape)
        if not pool:
            continue  # nothing of that shape was materialised: cannot judge here
        # screened in float32 (``_closest``); the closest's errors then computed as everywhere else (float64)
        best = _closest(ref.value, pool, by_rel=max_abs_rel is not None, norms=norms)
        rel, cos = _errors(ref.value, best.value)
        ok = (max_abs_rel is None or rel <= max_abs_rel) and (min_cosine is None or cos >= min_cosine)
        curve.append(LayerError(i, ref.producer, ref.op_type, best.producer, best.op_type, rel, cos, ok))
    first = next((e for e in curve if not e.ok), None)
    criterion = " and ".join(
        ([f"max_abs <= {max_abs_rel:g} x max|ref|"] if max_abs_rel is not None else [])
        + ([f"cosine >= {min_cosine}"] if min_cosine is not None else [])
    )
    return Divergence(first is not None, first, tuple(curve), criterion)


# -- where a quantised run parts from another, integer for integer ------------------------------------


@dataclass(frozen=True)
class Parting:
    """The first tensor, in execution order, where two runs of a quantised file differ by more steps than allowed."""

    index: int  # the op's position in the file
    op: str
    tensor: str
    max_steps: int
    checked: int  # tensors compared before and including it

    def to_dict(self) -> dict:
        return asdict(self)


_EVERY = ByContent(8)  # digest -> (the model with every tensor an output, the outputs' order)


def every_tensor_as_output(model: bytes) -> tuple[bytes, list[tuple[int, str, str]]]:
    """The model with every op's output made a graph output (a runtime then keeps them all, even
    one that cannot be told to), and per output (op index, op name, tensor name), in op order."""
    from edgeport.ops.tflite_file import digest

    # once per file: parity's step checks ask for a file and its twin again per row and image
    made, order = _EVERY.get(digest(model), lambda: _every_tensor_as_output(model))
    return made, list(order)


def _every_tensor_as_output(model: bytes) -> tuple[bytes, tuple]:
    from edgeport.ops.tflite_graph import Graph

    g = Graph(model)
    order, outputs = [], []
    for i, op in enumerate(g.ops):
        for t in op.outputs:
            if t >= 0 and t not in outputs:
                outputs.append(t)
                order.append((i, g.name(op), g.tensor_name(t)))
    g.sg.outputs = outputs
    return g.to_bytes(), tuple(order)


def _raw_outputs_board(transport, path: Path, x_raw: np.ndarray, work: Path) -> list[np.ndarray]:
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="board-tensors-", dir=work))
    try:
        shutil.copy2(path, folder / "model.tflite")
        (folder / "inputs").mkdir()
        np.save(folder / "inputs" / "0000.npy", x_raw)
        result = transport.execute(folder, "run")
        if not result["ok"]:
            raise RuntimeError(result.get("message", "refused"))
        return [np.load(folder / "outputs" / f"0000_{k}.npy", allow_pickle=False) for k in range(len(result["outputs"]))]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def first_parting(path: Path, x_nchw: np.ndarray, *, transport=None, twin: Path | None = None, work: Path,
                  allowed: int = 1) -> Parting | None:
    """Where the run of quantised ``path`` parts from its other: the board's runtime (``transport``)
    against today's reference kernels on the same file, or the reference kernels on ``path``
    against them on its ``twin`` (tensors paired by name; a uint8 file and its int8 twin share
    names). Steps are counted on each tensor's own grid; float tensors are skipped."""
    from edgeport.ops.tflite_model import read_tflite
    from edgeport.ops.tflite_run import run_tflite
    from edgeport.validate.parity.tensors import to_model_input

    summary = read_tflite(path)
    x_raw = to_model_input(np.ascontiguousarray(x_nchw[:1], np.float32), summary.input_shape, summary.input_dtype,
                           summary.input_quantization)
    model, order = every_tensor_as_output(Path(path).read_bytes())
    mine = every_tensor_values(path, x_raw, work)
    if transport is not None:
        every = Path(work) / f"every_tensor_{Path(path).name}"
        every.write_bytes(model)
        theirs = _raw_outputs_board(transport, every, x_raw, Path(work))
        pairs = list(zip(order, mine, theirs))
        shift = 0
    else:
        twin_model, twin_order = every_tensor_as_output(Path(twin).read_bytes())
        twin_every = Path(work) / f"every_tensor_twin_{Path(twin).name}"
        twin_every.write_bytes(twin_model)
        x_twin = (x_raw.astype(np.int16) - 128).astype(np.int8) if x_raw.dtype == np.uint8 else x_raw
        by_name = dict(zip((name for _, _, name in twin_order), run_tflite(twin_every, x_twin, source=Path(twin))))
        pairs = [(o, m, by_name[o[2]]) for o, m in zip(order, mine) if o[2] in by_name]
        shift = 128  # uint8 = int8 + 128, the same real number
    checked = 0
    for (index, op, name), a, b in pairs:
        if a.dtype.kind not in "iu" or a.shape != b.shape or a.dtype == np.int32:
            continue
        checked += 1
        steps = int(np.abs(a.astype(np.int32) - (b.astype(np.int32) + (shift if a.dtype == np.uint8 and b.dtype == np.int8 else 0))).max()) \
            if a.size else 0
        if steps > allowed:
            return Parting(index, op, name, steps, checked)
    return None
