"""Which ops of a quantised file carry its error: each op's own error, not the error that reached it.

The accumulated curve (``divergence.py``) says where a quantised run has drifted; it cannot say
which op did the drifting, because every op inherits the error of the ops before it. Here every
op of the quantised file runs on its own, fed the float32 file's values of its inputs put on their
integer grid, and the float32 file's same op runs on the real values of those very integers. The
difference between the two is that op's own error: its weights' and its output's quantisation. What
its inputs' grids lose is their producers' error, counted there. The same comparison on the whole
quantised run gives the error that reached the tensor, for context. Both are over the size of the
float model's value (rms), so ops are ranked on one scale.

Each file runs once, its judged ops each alone in one invoke (``_alone``): the quantised file on the
reference kernels, the float32 file on the optimised ones (``FLOAT_KERNELS``). Tensors are paired
with the float32 file's by name (a converter writes both files from one graph; a fused op's name may
end differently, so the name up to its first ``;``, and the input by position). QUANTIZE and
DEQUANTIZE compute the identity in real numbers: their output stands for their input's float
tensor. The ops a board lowering wrote in place of one op (their tensors named under its output's,
``ops/lowering``) are judged together, as the op they replace. An op the float32 file does not have
otherwise (int8's own output scaling, ``convert/converters/int8_groups.py``) and every op after it
compute other units: they are not judged.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from edgeport.ops.tflite_graph import name_key
from edgeport.validate.parity.tensors import dequantize, quantize, to_model_input

IDENTITY_OPS = ("QUANTIZE", "DEQUANTIZE")
SHOWN = 5  # ops a report names, worst first
# the float32 file's values: on the optimised kernels, within float rounding (1e-6 of a value) of the
# reference kernels' and far faster (docs/measured.md; a quantised op's own error is 1e-3 and more)
FLOAT_KERNELS = "optimized"


@dataclass(frozen=True)
class OpError:
    index: int  # the op's position in the file
    op: str
    tensor: str  # the tensor it writes (its name up to the first ";")
    own: float  # rms(its output - the float32 file's) / rms(the float32 file's), inputs exact up to their grid
    reached: float  # the same on the whole quantised run: the error accumulated up to this tensor

    def to_dict(self) -> dict:
        return asdict(self)


def _relative(got: np.ndarray, want: np.ndarray, size: np.ndarray) -> float:
    """rms(got - want) / rms(size): an error on the scale of the float model's own value."""
    scale = float(np.sqrt(np.mean(size.astype(np.float64) ** 2))) if size.size else 0.0
    err = float(np.sqrt(np.mean((got.astype(np.float64) - want.astype(np.float64)) ** 2))) if want.size else 0.0
    return err / scale if scale > 0 else (0.0 if err == 0 else float("inf"))


def _float_values(f, raw: bytes, x_nchw: np.ndarray, work: Path) -> dict[str, np.ndarray]:
    """Every tensor of the float32 file (``f``, its ``raw`` bytes; its input included) by name, for one image."""
    from edgeport.validate.parity.divergence import every_tensor_as_output

    (inp,) = f.sg.inputs
    x = to_model_input(x_nchw, f.shape(inp), np.float32, (0.0, 0))
    model, order = every_tensor_as_output(raw)
    values = {name_key(f.tensor_name(inp)): x}
    values.update((name_key(name), v) for (_, _, name), v in zip(order, _run(model, [x], work / "op_errors_float.tflite",
                                                                              kernels=FLOAT_KERNELS)))
    return values


def _on_grid(value: np.ndarray, g, t: int) -> np.ndarray:
    """``value`` (a float tensor's real numbers) as tensor ``t`` holds it: on its grid where quantised."""
    dtype = np.dtype(g.dtype(t))
    q = g.quant(t)
    if q is not None and dtype.kind in "iu":
        return quantize(value.astype(np.float32), q.scale, q.zero_point, dtype)
    return value.astype(dtype)


def _real(value: np.ndarray, g, t: int) -> np.ndarray:
    q = g.quant(t)
    return dequantize(value, q.scale, q.zero_point) if q is not None and value.dtype.kind in "iu" else value.astype(np.float32)


@dataclass(frozen=True)
class _Unit:
    """What is judged as one op: the op whose output the float32 file has too (``head``), with the
    ops a board lowering wrote in its place (their tensors named under its output's), fed at
    ``frontier`` (tensors the float32 file has)."""

    head: int
    ops: tuple[int, ...]  # in file order
    frontier: tuple[int, ...]


def _alone(raw: bytes, units: list[tuple[tuple[int, ...], tuple[int, ...]]], feed) -> tuple[bytes, list[np.ndarray], list[list[int]]]:
    """The file with only the ops of ``units`` (each: its ops, and the tensors it is fed at), each
    unit reading its own copy of each tensor it is fed at, every copy a graph input fed
    ``feed(unit index, tensor)``, and its last op's outputs graph outputs: one invoke runs each
    unit on the inputs given. Returns the model, the inputs, and per unit its outputs."""
    from edgeport.ops.tflite_graph import Graph

    g = Graph(raw)
    inputs, values, outputs, kept = [], [], [], []
    for n, (ops, frontier) in enumerate(units):
        copies = {}
        for t in frontier:
            copies[t] = g.like(t, f"alone{n}")
            inputs.append(copies[t])
            values.append(feed(n, t))
        for i in ops:
            op = g.ops[i]
            op.inputs = [copies.get(t, t) for t in op.inputs]
            kept.append(op)
        outputs.append([t for t in g.ops[ops[-1]].outputs if t >= 0])
    g.sg.operators = kept
    g.set_io(inputs, [t for out in outputs for t in out])
    return g.to_bytes(), values, outputs


def _run(model: bytes, values: list[np.ndarray], path: Path, *, kernels: str = "reference",
         source: Path | None = None) -> list[np.ndarray]:
    from edgeport.ops.tflite_run import run_tflite

    path.write_bytes(model)
    return run_tflite(path, values, kernels=kernels, source=source) if values else []


def op_errors(quantised: Path, float_file: Path, x_nchw: np.ndarray, work: Path) -> list[OpError]:
    """Each judged op of ``quantised`` with its own error and the error that reached it (the module's
    docstring says how), worst own error first, for the first image of ``x_nchw``."""
    from edgeport.ops.tflite_graph import Graph
    from edgeport.validate.parity.divergence import every_tensor_as_output, every_tensor_values

    work = Path(work)
    x_nchw = np.ascontiguousarray(x_nchw[:1], np.float32)
    raw, float_raw = Path(quantised).read_bytes(), Path(float_file).read_bytes()
    g, f = Graph(raw), Graph(float_raw)
    ref = _float_values(f, float_raw, x_nchw, work)
    (inp,) = g.sg.inputs
    ref.setdefault(name_key(g.tensor_name(inp)), ref[name_key(f.tensor_name(f.sg.inputs[0]))])  # the input, whatever its name
    x = _on_grid(ref[name_key(g.tensor_name(inp))], g, inp)  # the image as the quantised file takes it

    def fkey(u: int) -> str:  # a float32 file's tensor by the quantised file's name for it (its input may be named otherwise)
        return name_key(g.tensor_name(inp)) if u == f.sg.inputs[0] else name_key(f.tensor_name(u))

    float_op = {fkey(t): j for j, op in enumerate(f.ops) for t in op.outputs if t >= 0}
    alias: dict[str, str] = {}  # a requantisation's output -> the float tensor it stands for
    bad: set[int] = set()  # tensors in other units (after an op the float32 file does not have)

    def qkey(t: int) -> str:  # the float32 file's name for a quantised file's tensor
        return alias.get(name_key(g.tensor_name(t)), name_key(g.tensor_name(t)))

    def known(t: int) -> bool:
        return t not in bad and ref.get(qkey(t), np.empty(0)).shape == g.shape(t)

    def activations(op) -> list[int]:
        return [t for t in op.inputs if t >= 0 and g.const(t) is None]

    producer = {t: i for i, op in enumerate(g.ops) for t in op.outputs if t >= 0}
    units: list[_Unit] = []
    used: set[int] = set()  # ops of the quantised file, and of the float32 file, in a unit already
    used_float: set[int] = set()
    for i, op in enumerate(g.ops):
        outs = [t for t in op.outputs if t >= 0]
        ins = activations(op)
        if not outs:
            continue
        j = float_op.get(qkey(outs[0]))
        if j is None:
            # a requantisation (QUANTIZE, DEQUANTIZE, a one-input CONCATENATION) stands for its input's
            # float tensor; a lowering's inner op is judged with the op it serves (below); what reads
            # anything else (int8's own output scaling: other units) is not judged, nor what follows it
            requantises = len(ins) == 1 and (g.name(op) in IDENTITY_OPS or g.name(op) == "CONCATENATION" and len(op.inputs) == 1)
            if requantises and known(ins[0]):
                alias[name_key(g.tensor_name(outs[0]))] = qkey(ins[0])
            continue
        # the op and the ops a lowering wrote for it, back to known tensors; a DEQUANTIZE or QUANTIZE that took the float
        # op's name (a quantised file's float output) is judged with the op before it: the head's last convolution, say
        tail = set(ins) if g.name(op) in IDENTITY_OPS else set()
        ops, frontier, stack, prefix = {i}, [], list(ins), name_key(g.tensor_name(outs[0])) + "/"
        while stack and ops is not None:
            t = stack.pop()
            if known(t):
                frontier += [t] if t not in frontier else []
            elif t in producer and (t in tail or g.tensor_name(t).startswith(prefix)) and producer[t] not in ops and len(ops) < 16:
                ops.add(producer[t])
                stack += activations(g.ops[producer[t]])
            else:
                ops = None
        wants = {fkey(u) for u in f.ops[j].inputs if u >= 0 and f.const(u) is None}
        if ops is None or ops & used or j in used_float or not wants <= {qkey(t) for t in frontier} \
                or not all(known(t) for t in outs):
            bad.update(outs)
            continue
        used |= ops
        used_float.add(j)
        units.append(_Unit(i, tuple(sorted(ops)), tuple(frontier)))

    # the whole quantised run, every tensor kept: the error that reached each one
    _, order = every_tensor_as_output(raw)
    reached = dict(zip((name for _, _, name in order), every_tensor_values(quantised, x, work)))  # the divergence's run
    # each unit alone, quantised, fed the float values on their grid ...
    model, values, q_outs = _alone(raw, [(u.ops, u.frontier) for u in units],
                                   lambda n, t: _on_grid(ref[qkey(t)], g, t))
    own = dict(zip([t for out in q_outs for t in out], _run(model, values, work / "op_errors_alone.tflite", source=Path(quantised))))
    # ... and the float32 file's same op on the real values of those very integers
    # (where a lowering requantised an input for itself, the float op reads the input as the file held it)
    grid_real = [{qkey(t): _real(_on_grid(ref[qkey(t)], g, t), g, t)
                  for t in sorted(u.frontier, key=lambda t: name_key(g.tensor_name(t)) == qkey(t))} for u in units]
    f_units = [((float_op[qkey(q_outs[n][0])],), tuple(u for u in f.ops[float_op[qkey(q_outs[n][0])]].inputs
                                                        if u >= 0 and f.const(u) is None)) for n in range(len(units))]
    model, values, f_outs = _alone(float_raw, f_units, lambda n, u: grid_real[n][fkey(u)].astype(np.dtype(f.dtype(u))))
    exact = iter(_run(model, values, work / "op_errors_float_alone.tflite", kernels=FLOAT_KERNELS))
    exact = [[next(exact) for _ in out] for out in f_outs]  # per unit, the float op's outputs in order

    found = []
    for n, u in enumerate(units):
        head = g.name(g.ops[u.head])
        if head in IDENTITY_OPS and len(u.ops) > 1:  # a float output: the op before its DEQUANTIZE
            head = f"{g.name(g.ops[u.ops[-2]])} (and {head})"
        elif len(u.ops) > 1:
            head += f" (lowered: {len(u.ops)} ops)"
        for t, same in zip(q_outs[n], exact[n]):  # output by output (a SPLIT's parts are each judged)
            want, whole = ref.get(qkey(t)), reached.get(g.tensor_name(t))
            if g.dtype(t) in ("int32", "int64", "bool") or want is None or not own[t].shape == same.shape == want.shape:
                continue
            found.append(OpError(u.head, head, qkey(t), _relative(_real(own[t], g, t), same, want),
                                 _relative(_real(whole, g, t), want, want) if whole is not None else float("nan")))
    return sorted(found, key=lambda e: -e.own if e.own == e.own else 0.0)

