"""A uint8 LOGISTIC or TANH on an input grid finer than 2^-12, with its input requantised onto
2^-12 first.

TFLite 1.13.1's uint8 LOGISTIC and TANH return 0 for every value when their input's scale is
under 2^-12 (measured on the runtime over scales from 1e-5 to 64: wrong below 2.3e-4, exact
from 2.6e-4 up; its kernels rescale the input into a 4-integer-bit fixed-point number, and
on a finer grid that rescaling breaks down). A pose head's visibility logits came out at
2.1e-4 (``validate/board/uint8_probe.py`` probes the case on each runtime, as
``LOGISTIC.fine_input``).

The input is written on a grid of step ``S = 2^-12`` with the zero point moved to keep its
range (``round(z s / S)``), by a one-input CONCATENATION (``requantize.py``): each value moves
by at most ``S / 2``. LOGISTIC's slope is at most 1/4 and TANH's at most 1, so an output moves by
at most ``S / 8`` (LOGISTIC, whose output step is 1/256: 1/128 of a step) or ``S / 2`` (TANH,
step 1/128: 1/64 of a step): the same output step, but for a value within that distance of a
rounding tie (measured: within 1 step of today's kernels on the original file, on the real
runtime: tests/ops/test_lowering.py).
"""

from __future__ import annotations

from edgeport.ops.lowering.base import LoweringRule, requantize
from edgeport.ops.tflite_graph import Graph, Quant
from edgeport.ops.tflite_model import FINE_INPUT_SCALE


class _FineInput(LoweringRule):
    dtypes = ("uint8",)
    proof = "the input requantised onto 2^-12 moves an output by at most 1/64 of its step (TANH; LOGISTIC 1/128)"

    def applies(self, g: Graph, op) -> bool:
        q = g.quant(op.inputs[0])
        return q is not None and q.scale < FINE_INPUT_SCALE

    def lower(self, g: Graph, op) -> list:
        x = op.inputs[0]
        q = g.quant(x)
        coarse = g.like(x, "on_grid_2^-12", quant=Quant(FINE_INPUT_SCALE, int(min(255, max(0, round(q.zero_point * q.scale
                                                                                                  / FINE_INPUT_SCALE))))))
        requantised = requantize(g, x, coarse)
        again = g.new_op(self.op, [coarse], list(op.outputs))
        return [requantised, again]


class LogisticFineInput(_FineInput):
    name = "logistic_fine_input"
    op = "LOGISTIC"


class TanhFineInput(_FineInput):
    name = "tanh_fine_input"
    op = "TANH"
