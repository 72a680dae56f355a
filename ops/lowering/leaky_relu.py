"""uint8 LEAKY_RELU and PRELU (TFLite 1.13 runs both on float32 only) as MUL and MAXIMUM.

For a slope ``0 <= a <= 1``, ``leaky_relu(x) = max(x, a x)``: where ``x >= 0``, ``x >= a x``;
where ``x < 0``, ``a x >= x``. Both branches are written on the output's grid (``x`` requantised,
``base.requantize``; ``a x`` by a MUL), on which TFLite 1.x's uint8 MAXIMUM, comparing integers,
orders them as the real numbers. One rounding per branch, as today's kernel makes in fixed
point: within a step of it. PRELU is the same with one slope per channel (a constant broadcast
along the last axis).

A learned slope may lie outside [0, 1] (MTCNN's trained P-Net: -1.28 to 1.01). Then
``prelu(x) = max(x, 0) + a min(x, 0)``: MAXIMUM and MINIMUM against a zero on ``x``'s own grid
are exact, ``a min(x, 0)`` is a MUL onto a grid spanning what it can reach, and an ADD rounds
the sum onto the output's grid: two roundings, measured within a step of today's kernel
(``PReluUint8Signed``).
"""

from __future__ import annotations

import numpy as np

from edgeport.ops.lowering.base import LoweringRule, requantize
from edgeport.ops.tflite_graph import Graph, Quant, name_key


def _as_max(g: Graph, x: int, slope: int, y: int) -> list:
    """y = max(x, slope * x), both branches on y's grid."""
    x_on_y, ax = g.like(y, "x"), g.like(y, "slope*x")
    return [requantize(g, x, x_on_y), g.new_op("MUL", [x, slope], [ax], "MulOptions"),
            g.new_op("MAXIMUM", [x_on_y, ax], [y], "MaximumMinimumOptions")]


def _top(values) -> float:
    """The slope scale's range: the largest slope (an all-zero one: 1, any scale holds 0 exactly)."""
    return float(np.max(values)) or 1.0


def _slope(g: Graph, values: np.ndarray, name: str) -> int:
    """The slopes as uint8 at scale max/255: the largest exact (255 steps), the others within half a step."""
    q = Quant(_top(values) / 255, 0)
    return g.constant(name, np.clip(np.round(values / q.scale), 0, 255).astype(np.uint8), "uint8", q)


def _fits(g: Graph, x: int, y: int, slopes) -> bool:
    # an old uint8 MUL aborts unless its multiplier s_x * s_slope / s_y is below 1, computed from the
    # file's float32 scales: checked the same way, with a margin for the runtime's own rounding
    qx, qy = g.quant(x), g.quant(y)
    if qx is None or qy is None:
        return False
    multiplier = np.float32(qx.scale) * np.float32(_top(slopes) / 255) / np.float32(qy.scale)
    return float(multiplier) < 1.0 - 1e-6


class LeakyReluUint8(LoweringRule):
    name = "leaky_relu_uint8"
    op = "LEAKY_RELU"
    dtypes = ("uint8",)
    proof = "max(x, a x) is leaky_relu for 0 <= a <= 1; both branches on the output's grid: within a step"

    @staticmethod
    def _alpha(op) -> float:
        # without options the kernel's parameters are zero-initialised: a slope of 0
        return float(op.builtinOptions.alpha) if op.builtinOptions is not None else 0.0

    def applies(self, g: Graph, op) -> bool:
        alpha = self._alpha(op)
        return 0.0 <= alpha <= 1.0 and _fits(g, op.inputs[0], op.outputs[0], alpha)

    def lower(self, g: Graph, op) -> list:
        (x,), (y,) = op.inputs, op.outputs
        return _as_max(g, x, _slope(g, np.full([1], self._alpha(op), np.float32), f"{g.tensor_name(y)}/alpha"), y)


class PReluUint8(LoweringRule):
    name = "prelu_uint8"
    op = "PRELU"
    dtypes = ("uint8",)
    proof = "max(x, a x) is prelu where every slope a is in [0, 1]; both branches on the output's grid: within a step"

    def _slopes(self, g: Graph, op) -> np.ndarray | None:
        alpha, q = g.const(op.inputs[1]), g.quant(op.inputs[1])
        if alpha is None or q is None:
            return None
        return ((alpha.astype(np.float64) - q.zero_point) * q.scale).astype(np.float32)

    def applies(self, g: Graph, op) -> bool:
        slopes = self._slopes(g, op)
        return slopes is not None and bool(((slopes >= 0) & (slopes <= 1)).all()) and \
            _fits(g, op.inputs[0], op.outputs[0], slopes)

    def lower(self, g: Graph, op) -> list:
        x, y = op.inputs[0], op.outputs[0]
        return _as_max(g, x, _slope(g, self._slopes(g, op), f"{g.tensor_name(y)}/slopes"), y)


class PReluUint8Signed(LoweringRule):
    """PRELU on uint8 with any slopes: ``max(x, 0) + a min(x, 0)`` (MAXIMUM, MINIMUM, MUL, ADD)."""

    name = "prelu_uint8_signed"
    op = "PRELU"
    dtypes = ("uint8",)
    proof = "max(x, 0) + a min(x, 0) is prelu for any slope a; the max and min exact on x's grid, then two roundings"

    def _plan(self, g: Graph, op) -> tuple[np.ndarray, Quant, Quant] | None:
        """The slopes, their grid and the grid of ``a min(x, 0)``, where an old uint8 MUL can compute it."""
        slopes = PReluUint8()._slopes(g, op)
        qx = g.quant(op.inputs[0])
        if slopes is None or qx is None or g.quant(op.outputs[0]) is None:
            return None
        lo_a, hi_a = min(float(slopes.min()), 0.0), max(float(slopes.max()), 0.0)
        qa = Quant((hi_a - lo_a) / 255 or 1.0, int(np.clip(np.rint(-lo_a / ((hi_a - lo_a) / 255 or 1.0)), 0, 255)))
        x_min = qx.scale * (0 - qx.zero_point)  # the most negative value x's grid holds (<= 0)
        lo, hi = min(0.0, hi_a * x_min), max(0.0, lo_a * x_min)  # a * min(x, 0) for every slope a
        if hi - lo <= 0:
            return None  # x is never negative, or every slope is 0: nothing for this rule to do
        q_an = Quant((hi - lo) / 255, int(np.clip(np.rint(-lo / ((hi - lo) / 255)), 0, 255)))
        # an old uint8 MUL aborts unless its multiplier s_x * s_a / s_out is below 1
        if not float(np.float32(qx.scale) * np.float32(qa.scale) / np.float32(q_an.scale)) < 1.0 - 1e-6:
            return None
        return slopes, qa, q_an

    def applies(self, g: Graph, op) -> bool:
        return self._plan(g, op) is not None

    def lower(self, g: Graph, op) -> list:
        x, y = op.inputs[0], op.outputs[0]
        slopes, qa, q_an = self._plan(g, op)
        name = name_key(g.tensor_name(y))  # new tensors go under y's, as Graph.like's: op_errors judges them as this op
        qx = g.quant(x)
        zero = g.constant(f"{name}/zero", np.full([1] * len(g.shape(x)), qx.zero_point, np.uint8), "uint8", qx)
        a = g.constant(f"{name}/slopes", np.clip(np.rint(slopes / qa.scale) + qa.zero_point, 0, 255).astype(np.uint8), "uint8", qa)
        positive, negative = (g.add_tensor(f"{name}/{what}", g.shape(x), "uint8", qx) for what in ("max(x,0)", "min(x,0)"))
        scaled = g.like(y, "a*min(x,0)", quant=q_an)
        return [g.new_op("MAXIMUM", [x, zero], [positive], "MaximumMinimumOptions"),
                g.new_op("MINIMUM", [x, zero], [negative], "MaximumMinimumOptions"),
                g.new_op("MUL", [negative, a], [scaled], "MulOptions"),
                g.new_op("ADD", [positive, scaled], [y], "AddOptions")]
