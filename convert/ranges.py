"""Calibration ranges, repaired: a quantised file's activation grids set again from the float32
file's own values on the calibration images, where the converter's grid wastes most of its steps.

A converter calibrates each activation's range, and sometimes gives a tensor the range of another
(MobileViT's attention outputs, at 64 px: values within +-0.024 on a grid of +-7.4, 0.057 a step,
so every value rounds to zero). Such a grid is found by comparing it with the values the float32
file computes at the same tensor (paired by name, as ``validate/parity/op_errors.py`` pairs them)
on the calibration images: a grid at least ``WASTE`` times wider than the values, or one they
overflow by more than its own width. It gets min/max of those values, on the type's whole range.

What must stay equal stays equal: tensors an op requires quantised alike (a RESHAPE's input and
output, a CONCATENATION's inputs and output: ``convert/tflite_fixes.SAME_SCALE_OPS``, the resizes)
move together, as one group; a group holding a graph input or output, a fixed-quantisation output
(LOGISTIC, SOFTMAX, TANH) or a constant keeps its grid. Every convolution and fully connected op
reading a re-gridded input gets its int32 bias re-stated on the new scale (input scale x weight
scale), so it adds what it added before. Costs nothing at run time: the file has the same ops.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgeport.ops.tflite_graph import Graph, Quant
from edgeport.ops.tflite_graph import name_key as key

WASTE = 16  # a grid this many times wider than its values leaves 4 of its 8 bits unused
# beyond convert/tflite_fixes.SAME_SCALE_OPS: ops whose quantised kernels compare or move integers
# across their inputs and output (TFLite's quantisation spec ties them), with their data inputs
TIED = {"MAXIMUM": None, "MINIMUM": None, "AVERAGE_POOL_2D": (0,), "PADV2": (0,), "MIRROR_PAD": (0,), "SELECT": (1, 2),
        "SELECT_V2": (1, 2), "SPACE_TO_BATCH_ND": (0,), "BATCH_TO_SPACE_ND": (0,), "REDUCE_MAX": (0,), "REDUCE_MIN": (0,)}
# ops whose old uint8 kernels abort unless input scale x weight scale / output scale is below 1 (TFLite 1.x)
MULTIPLIED = {"CONV_2D": (0, 1), "DEPTHWISE_CONV_2D": (0, 1), "FULLY_CONNECTED": (0, 1), "MUL": (0, 1)}
LIMITS = {"int8": (-128, 127), "uint8": (0, 255)}


@dataclass(frozen=True)
class Reranged:
    model: bytes
    tensors: tuple[str, ...]  # the tensors given a new grid, by name (one group's members each)


def float_ranges(float_file: Path, images: np.ndarray, work: Path) -> dict[str, tuple[float, float, tuple]]:
    """Every tensor of the float32 file by name: (min, max, shape) over ``images`` (NCHW, as parity feeds them).
    Run on the optimised kernels (``op_errors.FLOAT_KERNELS``), one interpreter for every image."""
    from edgeport.ops.tflite_run import load_interpreter
    from edgeport.validate.parity.divergence import every_tensor_as_output
    from edgeport.validate.parity.op_errors import FLOAT_KERNELS
    from edgeport.validate.parity.tensors import to_model_input

    raw = Path(float_file).read_bytes()
    f = Graph(raw)
    model, order = every_tensor_as_output(raw)
    path = Path(work) / "ranges_float.tflite"
    path.write_bytes(model)
    interp = load_interpreter(path, kernels=FLOAT_KERNELS)
    (inp,), outs = interp.get_input_details(), interp.get_output_details()
    found: dict[str, tuple[float, float, tuple]] = {}
    for x in images:
        interp.set_tensor(inp["index"], to_model_input(x[None], f.shape(f.sg.inputs[0]), np.float32, (0.0, 0)))
        interp.invoke()
        for (_, _, name), d in zip(order, outs):
            v = interp.get_tensor(d["index"])
            if v.size and v.dtype.kind == "f":
                lo, hi, _ = found.get(key(name), (np.inf, -np.inf, None))
                found[key(name)] = (min(lo, float(v.min())), max(hi, float(v.max())), tuple(v.shape))
    return found


class _Groups:
    """Union-find over tensor indices."""

    def __init__(self):
        self.parent: dict[int, int] = {}

    def find(self, t: int) -> int:
        self.parent.setdefault(t, t)
        while self.parent[t] != t:
            self.parent[t] = self.parent[self.parent[t]]
            t = self.parent[t]
        return t

    def join(self, a: int, b: int) -> None:
        self.parent[self.find(a)] = self.find(b)


def rerange(quantised: bytes, ranges: dict) -> Reranged:
    """``quantised`` with the grids ``ranges`` (``float_ranges``) show badly wrong set again; the
    model byte for byte, and no tensor named, where none is."""
    from edgeport.convert.tflite_fixes import FIXED_OUTPUT_OPS, RESIZE_OPS, SAME_SCALE_OPS
    from edgeport.convert.uint8 import bias_inputs

    g = Graph(quantised)
    if g.subgraphs != 1:
        return Reranged(quantised, ())
    groups, locked = _Groups(), set()
    for op in g.ops:
        name = g.name(op)
        outs = [t for t in op.outputs if t >= 0]
        if name in FIXED_OUTPUT_OPS:
            locked.update(outs)
        tied = SAME_SCALE_OPS.get(name) or (((0,), False) if name in RESIZE_OPS else None) or \
            ((TIED[name], False) if name in TIED else None)
        if tied is not None:
            data = [op.inputs[i] for i in (range(len(op.inputs)) if tied[0] is None else tied[0])
                    if i < len(op.inputs) and op.inputs[i] >= 0]
            for t in data + outs:
                groups.join(t, outs[0] if outs else data[0])
    locked.update(g.sg.inputs, g.sg.outputs)
    members: dict[int, list[int]] = {}
    for t in range(len(g.sg.tensors)):
        members.setdefault(groups.find(t), []).append(t)
    new: dict[int, Quant] = {}

    def known(t: int):  # the float32 file's range at tensor t, where it has the tensor
        found = ranges.get(key(g.tensor_name(t)))
        return found if found is not None and found[2] == g.shape(t) else None

    for group in members.values():
        if any(t in locked or g.const(t) is not None or g.dtype(t) not in LIMITS or g.quant(t) is None for t in group):
            continue
        if len({g.quant(t) for t in group}) != 1 or len({g.dtype(t) for t in group}) != 1:
            continue
        # every member paired with the float32 file: a tensor it lacks (one a lowering wrote) keeps its grid
        known_ = [known(t) for t in group]
        if None in known_:
            continue
        lo, hi = min(0.0, *(k[0] for k in known_)), max(0.0, *(k[1] for k in known_))
        q, (qmin, qmax) = g.quant(group[0]), LIMITS[g.dtype(group[0])]
        grid_lo, grid_hi = q.scale * (qmin - q.zero_point), q.scale * (qmax - q.zero_point)
        width = grid_hi - grid_lo
        if not (hi > lo and np.isfinite(lo) and np.isfinite(hi)):
            continue
        if width > (hi - lo) * WASTE or lo < grid_lo - width or hi > grid_hi + width:
            scale = (hi - lo) / (qmax - qmin)
            zero = int(np.clip(np.rint(qmin - lo / scale), qmin, qmax))
            new.update({t: Quant(float(scale), zero) for t in group})
    readers: dict[int, int] = {}
    for op in g.ops:
        for t in op.inputs:
            readers[t] = readers.get(t, 0) + 1

    def drop(t: int) -> None:
        nonlocal new
        new = {u: q for u, q in new.items() if groups.find(u) != groups.find(t)}

    for op in g.ops:
        if (parts := bias_inputs(g, op)) is None:
            continue
        x, w, b = parts
        # a bias another op reads too, or not an int32 constant: its input's group keeps its grid
        if x in new and (readers[b] > 1 or g.const(b) is None or g.dtype(b) != "int32"):
            drop(x)
        # weights that are an activation (a FULLY_CONNECTED of two activations): its bias would be stale
        if w in new:
            drop(w)
    changed = True
    while changed and new:  # MULTIPLIED: a group whose multiplier reaches 1 keeps its grid
        changed = False
        for op in g.ops:
            ins = MULTIPLIED.get(g.name(op))
            outs = [t for t in op.outputs if t >= 0]
            if ins is None or len(op.inputs) < 2 or not outs or g.dtype(outs[0]) != "uint8":
                continue
            scale = {t: (new[t].scale if t in new else (g.quant(t).scale if g.quant(t) else None)) for t in [*op.inputs[:2], outs[0]]}
            if any(v is None for v in scale.values()):
                continue
            if scale[op.inputs[0]] * scale[op.inputs[1]] / scale[outs[0]] >= 1.0 - 1e-6:
                for t in [*op.inputs[:2], outs[0]]:
                    if t in new:
                        drop(t)
                        changed = True
    for op in g.ops:  # a bias is stated on its op's input scale: the same real numbers on the new one
        parts = bias_inputs(g, op)
        if parts is None or parts[0] not in new:
            continue
        x, _, bias = parts
        ratio = g.quant(x).scale / new[x].scale
        value = g.const(bias)
        restated = np.clip(np.rint(value.astype(np.float64) * ratio), -(2 ** 31), 2 ** 31 - 1).astype(np.int32)
        g.set_const(bias, restated)
        qb = g.tensor(bias).quantization
        if qb is not None and qb.scale is not None:
            qb.scale = [float(s) / ratio for s in qb.scale]
    if not new:
        return Reranged(quantised, ())
    for t, quant in new.items():
        q = g.tensor(t).quantization
        q.scale, q.zeroPoint = [quant.scale], [quant.zero_point]
    return Reranged(g.to_bytes(), tuple(sorted(g.tensor_name(t) for t in new)))
