"""int8 that detects: an output mixing scales gets its channel groups scaled apart.

A YOLOv8 output ``(1, 4+nc, A)`` concatenates box coordinates in input pixels (0 to ~900)
with class scores (0 to 1); a pose head adds keypoint pixels and visibility scores, a
segmentation head mask coefficients. Full-integer int8 gives a tensor one scale: about 4.5 px
per step at 1280 px, so every score rounds to 0 and the model detects nothing. When an output's
channel groups (``models.heads.Head.groups``) differ in range by more than ``MAX_GROUP_RATIO``,
the int8 model is converted from a float graph with each group scaled (``group_factor``) *before*
the tensors that carry it are joined (after, the damage is done) -- the ONNX graph onnx2tf
converts, or the float32 TFLite file litert-torch wrote, which ai-edge-quantizer quantises. The
float32 model keeps the model's own values. The factors are in the report (``int8_normalised``);
parity multiplies the int8 outputs back before comparing, so every metric is in the model's units.

The scaling walks back from the output through the ops that only place channels -- a Concat
along the channel axis, a Reshape that splits it (a pose head's ``(K, 3)`` keypoints become
``K*3`` channels) -- to tensors that each carry one group, and scales each there: one walk
(``_Walk``), read from either format (``_Onnx``, ``_Tflite``).
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np

from edgeport._lazy import require
from edgeport.models.heads import FREE, PIXELS, Head

MAX_GROUP_RATIO = 100.0


def group_factor(kind: str, value_range: float, imgsz: int) -> float:
    """What a group is divided by: pixels by the input size (0..1, Ultralytics' convention); a score
    that never reaches 1/16 (an untrained head), or any other value past 1, by the power of two above
    its range (exact in float)."""
    if kind == PIXELS:
        return float(imgsz)
    if value_range <= 0:
        return 1.0
    if value_range < 1 / 16 or (kind == FREE and value_range > 1.0):
        return float(2.0 ** math.ceil(math.log2(value_range)))
    return 1.0


# per output, the channel ranges its values are divided by: (axis, first channel, end, factor) each
Plans = list[list[tuple[int, int, int, float]]]


def group_scales(outputs: list[np.ndarray], head: Head, imgsz: int) -> Plans:
    """The ``Plans`` of ``outputs``: empty for an output whose groups already share a range."""
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


class _Walk:
    """A graph the walk (module docstring) rewrites; each subclass reads its own format. ``made_by``:
    tensor -> the op that makes it (none for a graph input, a constant); ``read``: how many read each
    tensor (the ops that take it, and the graph, where it is an output)."""

    made_by: dict
    read: Counter

    def shape(self, tensor) -> list[int]:
        raise NotImplementedError

    def inputs(self, op) -> list:
        raise NotImplementedError

    def places(self, op) -> str | None:
        """``"concat"`` for a join along ``concat_axis(op)``, ``"reshape"``, or None: an op that does more."""
        raise NotImplementedError

    def concat_axis(self, op) -> int:
        raise NotImplementedError

    def scale_input(self, consumer, index: int, factor: float) -> None:
        """Divide ``consumer``'s input ``index`` by ``factor`` with a multiplication placed before the consumer."""
        raise NotImplementedError

    def scale(self, consumer, index: int, axis: int, factors: np.ndarray) -> bool:
        """Scale the tensor ``consumer`` reads at ``index``, channel by channel along ``axis``
        (``factors``: one per channel), where it still carries one group per tensor; False when a
        tensor mixing groups is made by an op that does more than place channels."""
        if np.all(factors == 1.0):
            return True
        if np.all(factors == factors[0]):
            self.scale_input(consumer, index, float(factors[0]))
            return True
        return self.scale_made(self.inputs(consumer)[index], axis, factors)

    def scale_made(self, tensor, axis: int, factors: np.ndarray) -> bool:
        """Scale ``tensor`` channel by channel where the op making it reads its parts. Only a
        tensor with one reader (the op the walk came from, or the graph for its output): another
        would read the divided values too."""
        node, shape = self.made_by.get(tensor), self.shape(tensor)
        rank = len(shape)
        if node is None or not rank or self.read[tensor] != 1:
            return False
        kind = self.places(node)
        if kind == "concat" and self.concat_axis(node) % rank == axis:
            start = 0
            for i, part in enumerate(list(self.inputs(node))):
                width = (self.shape(part) or [0] * rank)[axis]
                if width <= 0 or not self.scale(node, i, axis, factors[start : start + width]):
                    return False
                start += width
            return start == len(factors)
        if kind == "reshape":
            src = self.shape(self.inputs(node)[0])
            # a split of the channel axis into two: (.., A*B, ..) from (.., A, B, ..)
            if len(src) == rank + 1 and src[:axis] == shape[:axis] and src[axis + 2:] == shape[axis + 1:] \
                    and src[axis] * src[axis + 1] == shape[axis]:
                grid = factors.reshape(src[axis], src[axis + 1])
                if np.all(grid == grid[:1]):  # the same pattern in every block: scale the inner axis
                    return self.scale(node, 0, axis + 1, grid[0])
                if np.all(grid == grid[:, :1]):
                    return self.scale(node, 0, axis, grid[:, 0])
        return False

    def scale_outputs(self, outputs: list, plans) -> bool:
        """Each planned output's channel ranges divided upstream of it (the output itself unchanged in name)."""
        if len(outputs) != len(plans):
            return False
        for out, plan in zip(outputs, plans):
            if not plan:
                continue
            shape = self.shape(out)
            axis = plan[0][0]
            if not shape or not 0 <= axis < len(shape) or any(a != axis or not 0 <= lo < hi <= shape[axis] for a, lo, hi, _ in plan):
                return False
            factors = np.ones(shape[axis], np.float64)
            for _, lo, hi, f in plan:
                factors[lo:hi] = f
            if not self.scale_made(out, axis, factors):
                return False
        return True


class _Onnx(_Walk):
    """An ONNX graph: tensors by name, static shapes from ONNX's shape inference."""

    def __init__(self, model):
        onnx = require("onnx", purpose="int8 output groups")
        self.onnx, self.graph = onnx, model.graph
        inferred = onnx.shape_inference.infer_shapes(model).graph
        self.shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
                       for vi in [*inferred.value_info, *inferred.output, *inferred.input]}
        self.made_by = {out: node for node in self.graph.node for out in node.output}
        self.read = Counter([*(i for node in self.graph.node for i in node.input), *(o.name for o in self.graph.output)])
        self.added = 0

    def shape(self, tensor) -> list[int]:
        return self.shapes.get(tensor, [])

    def inputs(self, op) -> list:
        return op.input

    def places(self, op) -> str | None:
        return {"Concat": "concat", "Reshape": "reshape"}.get(op.op_type)

    def concat_axis(self, op) -> int:
        for a in op.attribute:
            if a.name == "axis":
                return self.onnx.helper.get_attribute_value(a)
        return 0

    def scale_input(self, consumer, index: int, factor: float) -> None:
        name = consumer.input[index]
        self.added += 1
        const, scaled = f"edgeport_int8_scale_{self.added}", f"{name}_edgeport_int8_scaled_{self.added}"
        self.graph.initializer.append(self.onnx.numpy_helper.from_array(np.array(1.0 / factor, np.float32), const))
        at = list(self.graph.node).index(consumer)
        self.graph.node.insert(at, self.onnx.helper.make_node("Mul", [name, const], [scaled], name=f"edgeport_int8_scale_{self.added}"))
        consumer.input[index] = scaled


class _Tflite(_Walk):
    """A float32 TFLite file's main subgraph (``ops.tflite_graph.Graph``): tensors by index."""

    def __init__(self, graph):
        self.g = graph
        self.made_by = {t: op for op in graph.ops for t in op.outputs}
        self.read = Counter([*(i for op in graph.ops for i in op.inputs), *graph.sg.outputs])
        self.added = 0

    def shape(self, tensor) -> list[int]:
        return list(self.g.shape(tensor))

    def inputs(self, op) -> list:
        return op.inputs

    def places(self, op) -> str | None:
        name = self.g.name(op)
        if name == "CONCATENATION" and not op.builtinOptions.fusedActivationFunction:
            return "concat"
        return "reshape" if name == "RESHAPE" else None

    def concat_axis(self, op) -> int:
        return int(op.builtinOptions.axis)

    def scale_input(self, consumer, index: int, factor: float) -> None:
        g, tensor = self.g, consumer.inputs[index]
        self.added += 1
        const = g.constant(f"edgeport_int8_scale_{self.added}", np.array(1.0 / factor, np.float32))
        scaled = g.like(tensor, f"edgeport_int8_scaled_{self.added}", quant=False)
        g.sg.operators.insert(g.sg.operators.index(consumer), g.new_op("MUL", [tensor, const], [scaled], "MulOptions"))
        consumer.inputs[index] = scaled


def normalise_onnx(src: Path, dst: Path, plans: Plans) -> bool:
    """Write ``src`` with each planned channel range divided before the tensors carrying the
    groups are joined. False, writing nothing, when some group cannot be reached apart."""
    onnx = require("onnx", purpose="int8 output groups")
    model = onnx.load(str(src))
    if not _Onnx(model).scale_outputs([o.name for o in model.graph.output], plans):
        return False
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))
    return True


def normalise_tflite(src: Path, dst: Path, plans: Plans) -> bool:
    """``normalise_onnx`` for a float32 TFLite file (litert-torch's, which ai-edge-quantizer quantises)."""
    from edgeport.ops.tflite_graph import Graph

    g = Graph(src.read_bytes(), what=str(src))
    if g.subgraphs != 1 or not _Tflite(g).scale_outputs(list(g.sg.outputs), plans):
        return False
    dst.write_bytes(g.to_bytes())
    return True


def plan_for(prepared) -> Plans | None:
    """The plans for the prepared model's outputs on its first calibration images; None where no output mixes scales."""
    from edgeport.models.inference import forward

    plans = group_scales(forward(prepared.module, prepared.calib[:4]), prepared.head, prepared.imgsz)
    return plans if any(plans) else None
