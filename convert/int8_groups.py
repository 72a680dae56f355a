"""int8 that detects: an output mixing scales gets its channel groups scaled apart.

A YOLOv8 output ``(1, 4+nc, A)`` concatenates box coordinates in input pixels (0 to ~900)
with class scores (0 to 1); a pose head adds keypoint pixels and visibility scores, a
segmentation head mask coefficients. Full-integer int8 gives a tensor one scale: about 4.5 px
per step at 1280 px, so every score rounds to 0 and the model detects nothing. When an output's
channel groups (``models.heads.Head.groups``) differ in range by more than ``MAX_GROUP_RATIO``,
the int8 model is converted from the ONNX graph with each group scaled *before* the tensors that
carry it are joined (after, the damage is done): pixels divided by the input size -- 0..1, as
Ultralytics' own TFLite export writes boxes -- and scores that never reach 1/16 (an untrained
head) or values far past 1 raised or lowered by a power of two. The float32 model keeps the
model's own values. The factors are in the report (``int8_normalised``); parity multiplies the
int8 outputs back before comparing, so every metric is in the model's units.

The scaling walks back from the output through the ops that only place channels -- a Concat
along the channel axis, a Reshape that splits it (a pose head's ``(K, 3)`` keypoints become
``K*3`` channels) -- to tensors that each carry one group, and scales each there.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from edgeport._lazy import require
from edgeport.models.heads import FREE, PIXELS, Head

MAX_GROUP_RATIO = 100.0


def group_factor(kind: str, value_range: float, imgsz: int) -> float:
    """What a group is divided by: pixels by the input size (0..1, Ultralytics' convention); a
    score that never reaches 1/16 (an untrained head) by the power of two above its range; any
    other value past 1 by the power of two above its range. Powers of two are exact in float."""
    if kind == PIXELS:
        return float(imgsz)
    if value_range <= 0:
        return 1.0
    if value_range < 1 / 16 or (kind == FREE and value_range > 1.0):
        return float(2.0 ** math.ceil(math.log2(value_range)))
    return 1.0


def group_scales(outputs: list[np.ndarray], head: Head, imgsz: int) -> list[list[tuple[int, int, int, float]]]:
    """Per output: (axis, start, stop, factor) for each run of channels the int8 model divides by
    ``factor``; empty where the groups already share a range."""
    plans = []
    for k, out in enumerate(outputs):
        groups = head.groups(k, out.shape)
        ranges = {g.name: float(np.abs(g.take(out)).max(initial=0.0)) for g in groups if g.channels}
        plan: list[tuple[int, int, int, float]] = []
        if len(ranges) > 1 and min(ranges.values()) > 0 and max(ranges.values()) / min(ranges.values()) > MAX_GROUP_RATIO:
            factors = {}
            for g in groups:
                factor = group_factor(g.kind, ranges.get(g.name, 0.0), imgsz)
                factors.update({c: (g.axis, factor) for c in g.channels})
            for c in sorted(factors):  # runs of channels with one factor
                axis, factor = factors[c]
                if factor == 1.0:
                    continue
                if plan and plan[-1][0] == axis and plan[-1][2] == c and plan[-1][3] == factor:
                    plan[-1] = (axis, plan[-1][1], c + 1, factor)
                else:
                    plan.append((axis, c, c + 1, factor))
        plans.append(plan)
    return plans


class _Graph:
    """The ONNX graph being rewritten, with its static shapes and who produces each tensor."""

    def __init__(self, model):
        onnx = require("onnx", purpose="int8 output groups")
        self.onnx, self.model, self.graph = onnx, model, model.graph
        inferred = onnx.shape_inference.infer_shapes(model).graph
        self.shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
                       for vi in [*inferred.value_info, *inferred.output, *inferred.input]}
        self.producer = {out: node for node in self.graph.node for out in node.output}
        self.added = 0

    def attribute(self, node, name: str, default=None):
        for a in node.attribute:
            if a.name == name:
                return self.onnx.helper.get_attribute_value(a)
        return default

    def constant(self, name: str) -> np.ndarray | None:
        for init in self.graph.initializer:
            if init.name == name:
                return self.onnx.numpy_helper.to_array(init)
        node = self.producer.get(name)
        if node is not None and node.op_type == "Constant":
            return self.onnx.numpy_helper.to_array(self.attribute(node, "value"))
        return None

    def scale_input(self, consumer, index: int, factor: float) -> None:
        """Divide ``consumer``'s input ``index`` by ``factor`` with a Mul placed before the consumer."""
        name = consumer.input[index]
        self.added += 1
        const, scaled = f"edgeport_int8_scale_{self.added}", f"{name}_edgeport_int8_scaled_{self.added}"
        self.graph.initializer.append(self.onnx.numpy_helper.from_array(np.array(1.0 / factor, np.float32), const))
        at = list(self.graph.node).index(consumer)
        self.graph.node.insert(at, self.onnx.helper.make_node("Mul", [name, const], [scaled], name=f"edgeport_int8_scale_{self.added}"))
        consumer.input[index] = scaled

    def scale(self, consumer, index: int, axis: int, factors: np.ndarray) -> bool:
        """Scale the tensor ``consumer`` reads at ``index``, channel by channel along ``axis``
        (``factors``: one per channel), where it still carries one group per tensor; False when a
        tensor mixing groups is made by an op that does more than place channels."""
        if np.all(factors == 1.0):
            return True
        if np.all(factors == factors[0]):
            self.scale_input(consumer, index, float(factors[0]))
            return True
        name = consumer.input[index]
        node, shape = self.producer.get(name), self.shapes.get(name, [])
        rank = len(shape)
        if node is None or not rank:
            return False
        if node.op_type == "Concat" and self.attribute(node, "axis") % rank == axis:
            start = 0
            for i, part in enumerate(list(node.input)):
                width = (self.shapes.get(part) or [0] * rank)[axis]
                if width <= 0 or not self.scale(node, i, axis, factors[start : start + width]):
                    return False
                start += width
            return start == len(factors)
        if node.op_type == "Reshape":
            src = self.shapes.get(node.input[0], [])
            # a split of the channel axis into two: (.., A*B, ..) from (.., A, B, ..)
            if len(src) == rank + 1 and src[:axis] == shape[:axis] and src[axis + 2:] == shape[axis + 1:] \
                    and src[axis] * src[axis + 1] == shape[axis]:
                grid = factors.reshape(src[axis], src[axis + 1])
                if np.all(grid == grid[:1]):  # the same pattern in every block: scale the inner axis
                    return self.scale(node, 0, axis + 1, grid[0])
                if np.all(grid == grid[:, :1]):
                    return self.scale(node, 0, axis, grid[:, 0])
        return False


def normalise_onnx(src: Path, dst: Path, plans) -> bool:
    """Write ``src`` with each planned channel range divided before the tensors carrying the
    groups are joined. False, writing nothing, when some group cannot be reached apart."""
    onnx = require("onnx", purpose="int8 output groups")
    model = onnx.load(str(src))
    g = _Graph(model)
    for k, plan in enumerate(plans):
        if not plan:
            continue
        out = model.graph.output[k].name
        node = g.producer.get(out)
        shape = g.shapes.get(out, [])
        if node is None or not shape:
            return False
        axis = plan[0][0]
        factors = np.ones(shape[axis], np.float64)
        for a, lo, hi, f in plan:
            if a != axis:
                return False
            factors[lo:hi] = f
        # the output's producer reads the tensors to scale: pretend the output is its consumer's input
        holder = onnx.helper.make_node("Identity", [out], ["edgeport_int8_output_holder"])
        model.graph.node.append(holder)
        ok = g.scale(holder, 0, axis, factors)
        model.graph.node.remove(holder)
        if not ok or holder.input[0] != out:
            return False
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))
    return True


def plan_for(module, calib: np.ndarray, head: Head, imgsz: int):
    from edgeport.models.inference import forward

    plans = group_scales(forward(module, calib), head, imgsz)
    return plans if any(plans) else None
