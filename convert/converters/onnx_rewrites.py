"""Exact ONNX rewrites that steer a converter around its own bugs; the model computes the same.

Applied to the graph handed to onnx2tf 2.x only (``Onnx2tfBackend.prepare``); the shipped
``model.onnx`` is the exporter's. Each is measured on onnx2tf 2.6.9 with the model zoo.

``slices_to_split``: a tensor cut into consecutive pieces along one axis by several Slice
nodes (Ultralytics' C2f and C3k2 ``chunk`` as the TorchScript exporter writes it) becomes
one Split node with the same outputs. onnx2tf 2.x fuses such Slice pairs into a SPLIT on the
wrong axis of the channel-first tensor: YOLOv8n's float32 file then has an ADD of shapes
``[1,128,8,4]`` and ``[1,64,8,4]`` that no runtime prepares. A Split node it converts correctly.

``hardsigmoid_as_relu6``: HardSigmoid(x) = clip(a*x + b, 0, 1) becomes
clip(6a*x + 6b, 0, 6) / 6. onnx2tf 2.x writes HardSigmoid as RELU_0_TO_1, which its own int8
quantiser refuses ("unsupported op for strict full integer quantization"); RELU6 it
quantises. (MobileNetV3's squeeze-excitation gates.)

``matmul_as_mul_reducesum`` (int8 graphs only): a MatMul of two activations (attention's
q @ k and attn @ v in YOLO11n) becomes a broadcast Mul and a ReduceSum over the shared axis.
onnx2tf 2.x's int8 quantiser takes a BATCH_MATMUL's second input for a weight and refuses
it ("Weight tensor must be constant for strict full integer quantization"); MUL and SUM it
quantises. Only where the broadcast product stays under ``MAX_PRODUCT`` elements.

``pad_before_maxpool``: a padded MaxPool whose input is never negative (it follows a Relu,
Relu6 or a Clip at 0) pads with zeros in a Pad node first; zeros lose to every input value
as -inf padding does. onnx2tf 2.x writes MaxPool's own padding as PADV2 with -inf, which its
int8 quantiser refuses. (ResNet's stem.)
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
    from onnx import helper

    dims = _dims(model)
    consts = _consts(model)
    by_source = defaultdict(list)
    for node in model.graph.node:
        if node.op_type == "Slice" and (site := _static_slice(node, consts)) is not None:
            by_source[node.input[0]].append((site, node))
    opset = _opset(model)
    index = {id(node): i for i, node in enumerate(model.graph.node)}
    replacements: dict[int, list] = {}
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
            split = helper.make_node("Split", [source, _const(model, f"{name}/sizes", sizes)], outputs, name=name, axis=axis)
        else:
            split = helper.make_node("Split", [source], outputs, name=name, axis=axis, split=sizes.tolist())
        at = sorted(index[id(node)] for _, _, node in pieces)
        replacements.update({at[0]: [split], **{i: [] for i in at[1:]}})  # the Split where the first Slice was
    _replace(model, replacements)
    return len(replacements) - sum(not nodes for nodes in replacements.values())


def _dims(model) -> dict[str, list[int | None]]:
    """Every value's shape as ONNX's shape inference gives it (None: a dimension it cannot tell)."""
    onnx = require("onnx", purpose="ONNX rewrites")
    inferred = onnx.shape_inference.infer_shapes(model)
    return {
        vi.name: [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
        for vi in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]
    }


# the rewrites read constants of a few values (a Slice's bounds, a Clip's minimum); a weight is never one
SMALL_CONST = 16


def _consts(model) -> dict[str, list]:
    """Every small initializer's values (``SMALL_CONST`` at most), flattened: the weights of a large
    model, turned into lists, cost a large model's rewrite time for nothing."""
    from onnx import numpy_helper

    return {init.name: numpy_helper.to_array(init).reshape(-1).tolist() for init in model.graph.initializer
            if int(np.prod(init.dims, dtype=np.int64)) <= SMALL_CONST}


def _opset(model) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)


def _const(model, name: str, value) -> str:
    from onnx import numpy_helper

    model.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
    return name


def _replace(model, replacements: dict[int, list]) -> None:
    """Swap node ``i`` for the nodes ``replacements[i]``, keeping the order."""
    nodes = list(model.graph.node)
    del model.graph.node[:]
    for i, node in enumerate(nodes):
        model.graph.node.extend(replacements.get(i, [node]))


def hardsigmoid_as_relu6(model) -> int:
    """Rewrite every HardSigmoid in ``model`` in place as Mul, Add, Clip(0, 6), Mul; return how many."""
    from onnx import helper

    replacements = {}
    for i, node in enumerate(model.graph.node):
        if node.op_type != "HardSigmoid" or _opset(model) < 11:  # Clip's bounds are inputs from opset 11
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        alpha, beta = attrs.get("alpha", 0.2), attrs.get("beta", 0.5)
        p = f"{node.name or node.output[0]}/as_relu6"
        replacements[i] = [
            helper.make_node("Mul", [node.input[0], _const(model, f"{p}/a", np.float32(6 * alpha))], [f"{p}/ax"]),
            helper.make_node("Add", [f"{p}/ax", _const(model, f"{p}/b", np.float32(6 * beta))], [f"{p}/axb"]),
            helper.make_node("Clip", [f"{p}/axb", _const(model, f"{p}/lo", np.float32(0)), _const(model, f"{p}/hi", np.float32(6))],
                             [f"{p}/relu6"]),
            helper.make_node("Mul", [f"{p}/relu6", _const(model, f"{p}/sixth", np.float32(1 / 6))], list(node.output),
                             name=node.name),
        ]
    _replace(model, replacements)
    return len(replacements)


def _never_negative(node, consts: dict) -> bool:
    if node is None:
        return False
    if node.op_type in ("Relu", "Sigmoid"):
        return True
    if node.op_type == "Clip" and len(node.input) > 1 and node.input[1] in consts:
        return consts[node.input[1]][0] >= 0
    return False


def pad_before_maxpool(model) -> int:
    """Give every padded MaxPool of a never-negative input a zero Pad node instead; return how many."""
    from onnx import helper

    consts = _consts(model)
    producer = {out: node for node in model.graph.node for out in node.output}
    replacements = {}
    for i, node in enumerate(model.graph.node):
        if node.op_type != "MaxPool" or _opset(model) < 11:  # Pad's pads are an input from opset 11
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        pads = attrs.get("pads")
        if not pads or not any(pads) or attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET") \
                or attrs.get("ceil_mode", 0) or len(node.output) != 1 or not _never_negative(producer.get(node.input[0]), consts):
            continue
        half = len(pads) // 2  # ONNX: begins of every spatial axis, then ends; Pad: every axis, N and C unpadded
        p = f"{node.name or node.output[0]}/zero_pad"
        pad = helper.make_node("Pad", [node.input[0], _const(model, f"{p}/pads", np.array([0, 0, *pads[:half], 0, 0, *pads[half:]], np.int64))],
                               [f"{p}/out"], mode="constant")
        rest = {k: v for k, v in attrs.items() if k != "pads"}
        replacements[i] = [pad, helper.make_node("MaxPool", [f"{p}/out"], list(node.output), name=node.name, **rest)]
    _replace(model, replacements)
    return len(replacements)


MAX_PRODUCT = 1 << 26  # elements of the Mul's broadcast product (256 MiB of float32)


def matmul_as_mul_reducesum(model) -> int:
    """Rewrite every MatMul of two activations (rank >= 2 each) in place as
    ReduceSum(Unsqueeze(a, -1) * Unsqueeze(b, -3), axis=-2); return how many."""
    from onnx import helper

    if _opset(model) < 13:  # Unsqueeze's and ReduceSum's axes are inputs from opset 13
        return 0
    dims = _dims(model)
    constants = {init.name for init in model.graph.initializer}
    replacements = {}
    for i, node in enumerate(model.graph.node):
        if node.op_type != "MatMul" or any(name in constants for name in node.input):
            continue
        a, b, out = (dims.get(name) for name in (*node.input, node.output[0]))
        if not a or not b or not out or len(a) < 2 or len(b) < 2 or None in out or None in a:
            continue
        if int(np.prod(out, dtype=np.int64)) * a[-1] > MAX_PRODUCT:
            continue
        p = f"{node.name or node.output[0]}/as_mul_reducesum"
        replacements[i] = [
            helper.make_node("Unsqueeze", [node.input[0], _const(model, f"{p}/last", np.array([-1], np.int64))], [f"{p}/a"]),
            helper.make_node("Unsqueeze", [node.input[1], _const(model, f"{p}/third", np.array([-3], np.int64))], [f"{p}/b"]),
            helper.make_node("Mul", [f"{p}/a", f"{p}/b"], [f"{p}/ab"]),
            helper.make_node("ReduceSum", [f"{p}/ab", _const(model, f"{p}/shared", np.array([-2], np.int64))], list(node.output),
                             keepdims=0, name=node.name),
        ]
    _replace(model, replacements)
    return len(replacements)


REWRITES = (slices_to_split, hardsigmoid_as_relu6, pad_before_maxpool)
INT8_REWRITES = (*REWRITES, matmul_as_mul_reducesum)


def rewrite_file(src: Path, dst: Path, rewrites=REWRITES) -> dict[str, int] | None:
    """Apply ``rewrites`` to the ONNX file ``src`` and write ``dst`` when any changed it; return what
    each changed, or None (nothing written) for a file ONNX cannot read: the converter then says
    what is wrong."""
    onnx = require("onnx", purpose="ONNX rewrites")
    from google.protobuf.message import DecodeError

    try:
        model = onnx.load(str(src))
    except (DecodeError, ValueError):
        return None
    changed = {rewrite.__name__: rewrite(model) for rewrite in rewrites}
    if any(changed.values()):
        onnx.checker.check_model(model)
        onnx.save(model, str(dst))
    return changed
