"""Exact ONNX rewrites that steer a converter around its own bugs; the model computes the same.

``slices_to_split``: a tensor cut into consecutive pieces along one axis by several Slice
nodes (Ultralytics' C2f and C3k2 ``chunk`` as the TorchScript exporter writes it) becomes
one Split node with the same outputs. onnx2tf 2.x (``flatbuffer_direct``, 2.6.9 measured)
fuses such Slice pairs into a SPLIT on the wrong axis of the channel-first tensor: YOLOv8n's
float32 file then has an ADD of shapes ``[1,128,8,4]`` and ``[1,64,8,4]`` that no runtime
prepares. A Split node it converts correctly. Applied to the graph handed to onnx2tf 2.x
only (``to_tflite_pass``); the shipped ``model.onnx`` is the exporter's.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from edgeport._lazy import require


def _static_slice(node, consts: dict) -> tuple[int, int, int] | None:
    """(axis, start, end) of a one-axis, step-1 Slice whose bounds are constants; else None."""
    names = list(node.input) + [""] * (5 - len(node.input))
    if not all(n in consts for n in names[1:3]) or any(n and n not in consts for n in names[3:5]):
        return None
    starts, ends = consts[names[1]], consts[names[2]]
    axes = consts[names[3]] if names[3] else [0]
    steps = consts[names[4]] if names[4] else [1]
    if len(starts) != 1 or len(ends) != 1 or len(axes) != 1 or int(steps[0]) != 1:
        return None
    return int(axes[0]), int(starts[0]), int(ends[0])


def _clamp(index: int, dim: int) -> int:
    return min(max(index + dim if index < 0 else index, 0), dim)


def slices_to_split(model) -> int:
    """Rewrite ``model`` (an ``onnx.ModelProto``) in place; return how many Split nodes replaced Slices."""
    onnx = require("onnx", purpose="ONNX rewrites")
    from onnx import helper, numpy_helper

    inferred = onnx.shape_inference.infer_shapes(model)
    dims = {
        vi.name: [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
        for vi in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]
    }
    consts = {init.name: numpy_helper.to_array(init).reshape(-1).tolist() for init in model.graph.initializer}
    by_source = defaultdict(list)
    for node in model.graph.node:
        if node.op_type == "Slice" and (site := _static_slice(node, consts)) is not None:
            by_source[node.input[0]].append((site, node))
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    replaced = 0
    for source, slices in by_source.items():
        shape = dims.get(source)
        if len(slices) < 2 or not shape:
            continue
        axes = {axis % len(shape) for (axis, _, _), _ in slices}
        axis = axes.pop()
        if axes or shape[axis] is None:
            continue
        dim = shape[axis]
        pieces = sorted((_clamp(s, dim), _clamp(e, dim), node) for (_, s, e), node in slices)
        bounds = [(s, e) for s, e, _ in pieces]
        if bounds[0][0] != 0 or bounds[-1][1] != dim or any(s >= e for s, e in bounds) \
                or any(a[1] != b[0] for a, b in zip(bounds, bounds[1:])):
            continue  # not consecutive, non-empty pieces that cover the axis exactly
        name = f"{pieces[0][2].name}/as_split"
        outputs = [node.output[0] for _, _, node in pieces]
        sizes = np.array([e - s for s, e in bounds], dtype=np.int64)
        if opset >= 13:  # the sizes are an input from opset 13 on, an attribute before
            model.graph.initializer.append(numpy_helper.from_array(sizes, f"{name}/sizes"))
            split = helper.make_node("Split", [source, f"{name}/sizes"], outputs, name=name, axis=axis)
        else:
            split = helper.make_node("Split", [source], outputs, name=name, axis=axis, split=sizes.tolist())
        nodes = list(model.graph.node)
        first = min(nodes.index(node) for _, _, node in pieces)
        for _, _, node in pieces:
            model.graph.node.remove(node)
        model.graph.node.insert(first, split)
        replaced += 1
    return replaced


def rewrite_file(src: Path, dst: Path, rewrites=(slices_to_split,)) -> dict[str, int]:
    """Apply ``rewrites`` to the ONNX file ``src``, write ``dst``; return what each changed."""
    onnx = require("onnx", purpose="ONNX rewrites")
    model = onnx.load(str(src))
    changed = {rewrite.__name__: rewrite(model) for rewrite in rewrites}
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))
    return changed
