"""int8 that detects: one output mixing box pixels and scores gets its groups normalised.

A YOLOv8 output ``(1, 4+nc, A)`` concatenates box coordinates in input pixels (0 to ~900)
with class scores (0 to 1). Full-integer int8 gives a tensor one scale: about 4.5 px per
step at 1280 px, so every score rounds to 0 and the model detects nothing. When the
output's channel groups (``models.heads.channel_groups``) differ in range by more than
``MAX_GROUP_RATIO``, the int8 model is converted from the ONNX graph with each group
scaled *before* the Concat that joins them (after it, the damage is done): boxes divided by
the input size -- 0..1, as Ultralytics' own TFLite export writes them -- and scores that
never reach 1/16 (an untrained head) raised by a power of two. Boxes and scores then share
a scale that suits both. The float32 model keeps the model's own values. The factors are in
the report (``int8_normalised``); parity multiplies the int8 outputs back before comparing,
so every metric is in the model's units.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from edgeport._lazy import require
from edgeport.models.heads import channel_groups, resolve_head

MAX_GROUP_RATIO = 100.0


def group_scales(outputs: list[np.ndarray], head: str, imgsz: int) -> list[list[tuple[int, int, int, float]]]:
    """Per output: (axis, start, stop, factor) for each channel range the int8 model divides by
    ``factor``; empty where the groups already share a range."""
    plans = []
    for out in outputs:
        groups = channel_groups(head, out.shape)
        ranges = {name: float(np.abs(out[(slice(None),) * axis + (sl,)]).max(initial=0.0)) for name, sl, axis in groups}
        plan = []
        if ranges and min(ranges.values()) > 0 and max(ranges.values()) / min(ranges.values()) > MAX_GROUP_RATIO:
            for name, sl, axis in groups:
                factor = group_factor(name, ranges[name], imgsz)
                if factor != 1.0:
                    plan.append((axis, sl.start, sl.stop, factor))
        plans.append(plan)
    return plans


def group_factor(name: str, value_range: float, imgsz: int) -> float:
    """What a group is divided by: box pixels by the input size (boxes in 0..1, Ultralytics'
    convention); scores stay as they are unless they never reach 1/16 (an untrained head),
    then the power of two above their range, exact in float and recorded."""
    if name == "boxes":
        return float(imgsz)
    if value_range >= 1 / 16:
        return 1.0
    return float(2.0 ** math.ceil(math.log2(value_range)))


def normalise_onnx(src: Path, dst: Path, plans) -> bool:
    """Write ``src`` with each planned channel range divided *before* the Concat that joins the
    groups (after it, int8 has already given them one scale). False, writing nothing, when an
    output is not such a Concat or a range straddles two of its inputs."""
    onnx = require("onnx", purpose="int8 output groups")
    model = onnx.load(str(src))
    graph = model.graph
    inferred = onnx.shape_inference.infer_shapes(model).graph
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
              for vi in [*inferred.value_info, *inferred.output, *inferred.input]}
    producer = {out: node for node in graph.node for out in node.output}
    for k, plan in enumerate(plans):
        if not plan:
            continue
        node = producer.get(graph.output[k].name)
        if node is None or node.op_type != "Concat":
            return False
        rank = len(shapes.get(node.output[0], []))
        axis = next(a.i for a in node.attribute if a.name == "axis") % max(rank, 1)
        at = list(graph.node).index(node)
        start = 0
        for i, name in enumerate(list(node.input)):
            width = shapes.get(name, [0] * rank)[axis] if rank else 0
            if width <= 0:
                return False
            span = (start, start + width)
            start += width
            hits = [(a, lo, hi, f) for a, lo, hi, f in plan if a == axis and lo < span[1] and span[0] < hi]
            if not hits:
                continue
            if len(hits) > 1 or not (hits[0][1] <= span[0] and span[1] <= hits[0][2]):
                return False  # this input carries channels of two groups
            const = f"edgeport_int8_scale_{k}_{i}"
            graph.initializer.append(onnx.numpy_helper.from_array(np.array(1.0 / hits[0][3], np.float32), const))
            scaled = f"{name}_edgeport_int8_scaled"
            graph.node.insert(at, onnx.helper.make_node("Mul", [name, const], [scaled], name=f"edgeport_int8_scale_{k}_{i}"))
            at += 1
            node.input[i] = scaled
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))
    return True


def plan_for(module, calib: np.ndarray, strides, imgsz: int, head: str | None):
    from edgeport.models.inference import forward

    outputs = forward(module, calib)
    plans = group_scales(outputs, resolve_head(head, [o.shape for o in outputs], strides), imgsz)
    return plans if any(plans) else None
