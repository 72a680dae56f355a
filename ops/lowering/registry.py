"""The lowering rules, and the one mechanism that runs them by a board's op table.

``lower_for_board`` reads a converted file; when the board runs every operator as it is, the
file is returned byte for byte. Otherwise:

1. every operator gets the version what it computes needs (``ops/tflite_versions.py`` says why the
   declared one may differ), never moved down past the versions that table models; a version only
   adds features, so the needed one computes the same values;
2. each operator the board still lacks goes to the first rule for it that applies and whose
   operators the board runs, at the versions they need; the rule's operators replace it;
3. what no rule covers is left as it is: the board gate then names it.

Rules are tried in the order listed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from edgeport.ops.lowering.base import LoweringRule
from edgeport.ops.lowering.batch_matmul import BatchMatMul
from edgeport.ops.lowering.clamp import Relu0To1AsRequantize, ReluAsRequantize, ReluN1To1AsRequantize
from edgeport.ops.lowering.fine_input import LogisticFineInput, TanhFineInput
from edgeport.ops.lowering.fully_connected import FullyConnected
from edgeport.ops.lowering.grouped_conv import GroupedConv
from edgeport.ops.lowering.hard_swish import HardSwish, HardSwishUint8
from edgeport.ops.lowering.leaky_relu import LeakyReluUint8, PReluUint8, PReluUint8Signed
from edgeport.ops.lowering.reduce import MeanAsDepthwise, SumAsDepthwise
from edgeport.ops.lowering.relu_0_to_1 import Relu0To1
from edgeport.ops.lowering.requantize import Requantize
from edgeport.ops.lowering.resize_bilinear_half_pixel import ResizeBilinearHalfPixel
from edgeport.ops.lowering.resize_nearest_half_pixel import ResizeNearestHalfPixel
from edgeport.ops.lowering.transpose_conv import TransposeConvAsConv, TransposeConvBias
from edgeport.ops.tflite_graph import Graph
from edgeport.ops.tflite_model import op_notes
from edgeport.ops.tflite_versions import data_type, needed_version, version_for

RULES: tuple[LoweringRule, ...] = (
    HardSwish(),
    HardSwishUint8(),
    LeakyReluUint8(),
    PReluUint8(),
    PReluUint8Signed(),
    Relu0To1(),
    Relu0To1AsRequantize(),
    ReluAsRequantize(),
    ReluN1To1AsRequantize(),
    ResizeBilinearHalfPixel(),
    ResizeNearestHalfPixel(),
    GroupedConv(),
    FullyConnected(),
    TransposeConvBias(),
    TransposeConvAsConv(),
    BatchMatMul(),
    Requantize(),
    LogisticFineInput(),
    TanhFineInput(),
    MeanAsDepthwise(),
    SumAsDepthwise(),
)


@dataclass(frozen=True)
class Lowering:
    """What ``lower_for_board`` did to one file."""

    model: bytes
    rules: dict[str, int] = field(default_factory=dict)  # rule name -> operators it rewrote
    reversioned: int = 0  # operators given the version they need instead of the one declared
    left: tuple[str, ...] = ()  # operators the board lacks that no rule covers, "NAME vN"

    @property
    def changed(self) -> bool:
        return bool(self.rules) or self.reversioned > 0

    def describe(self) -> str:
        parts = [f"{rule} x{n}" for rule, n in self.rules.items()]
        if self.reversioned:
            parts.append(f"{self.reversioned} ops at the version they need")
        text = ", ".join(parts) or "nothing to lower"
        return text + (f"; left for the gate: {', '.join(self.left)}" if self.left else "")


# whether a board lacks an operator: (name, declared version, version needed, input type, notes
# (ops/tflite_model.op_notes)) -> bool; the board's side (validate/board/profiles.op_reasons)
# decides, so the rules never see a profile
Lacks = Callable[[str, int, "int | None", str, tuple], bool]


def lacks(board: Lacks, g: Graph, op) -> bool:
    """Whether the board cannot run ``op`` of ``g`` as it is: the declared version is not one it
    has, what the op computes needs a version it lacks, or it has no kernel for the op's type."""
    name = g.name(op)
    if name.startswith("CUSTOM:"):
        return True
    return board(name, g.version(op), needed_version(g, op), data_type(g, op), op_notes(g, op, name))


def lower_for_board(model: bytes, board: Lacks) -> Lowering:
    g = Graph(model)
    lacking = [op for op in g.ops if lacks(board, g, op)]
    if not lacking:
        return Lowering(model)
    if g.subgraphs != 1:  # control flow: not lowered, and what the main graph lacks is said
        return Lowering(model, left=tuple(sorted({f"{g.name(op)} v{g.version(op)}" for op in lacking})))
    before = len(lacking)
    reversioned = 0
    for op in g.ops:
        version = version_for(g, op)
        if version is not None and version != g.version(op):
            g.set_version(op, version)
            reversioned += 1
    applied: Counter = Counter()
    left: list[str] = []
    for op in list(g.ops):
        if not lacks(board, g, op):
            continue
        rule = _lower_one(board, g, op)
        if rule is None:
            left.append(f"{g.name(op)} v{g.version(op)}")
        else:
            applied[rule.name] += 1
    if len(left) == before:  # nothing the board lacked is fixed: the file stays as written
        return Lowering(model, left=tuple(sorted(set(left))))
    return Lowering(g.to_bytes(), dict(applied), reversioned, tuple(sorted(set(left))))


def _lower_one(board: Lacks, g: Graph, op) -> LoweringRule | None:
    name, dtype = g.name(op), data_type(g, op)
    for rule in RULES:
        if rule.op != name or dtype not in rule.dtypes or not rule.applies(g, op):
            continue
        tensors, buffers = len(g.sg.tensors), len(g.model.buffers)
        new = rule.lower(g, op)
        for n in new:
            needs = needed_version(g, n)
            if needs is not None:
                g.set_version(n, needs)
        if any(lacks(board, g, n) for n in new):
            # the board lacks what this rule writes: what it added goes, and the next rule, or none
            del g.sg.tensors[tensors:], g.model.buffers[buffers:]
            continue
        g.replace(op, new)
        return rule
    return None
