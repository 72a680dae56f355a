"""The TensorFlow Lite Micro runner: the microcontroller's interpreter, on the host.

The arena is sized to the board's RAM, exactly as firmware would size it; how much of it
the model really needs is read from TFLM's recording allocator. TFLM rejects float16 and
hybrid (dynamic-range) models: only float32 and full-integer models are run here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgeport._lazy import require
from edgeport.process import caught_stderr
from edgeport.validate.parity.runners import Runner
from edgeport.validate.parity.tensors import from_model_output, match_outputs, to_model_input

# large enough for any model this product targets: used only to measure what is needed
MEASURE_ARENA = 64 * 1024 * 1024


class ArenaTooSmall(Exception):
    """The model does not fit the given arena."""


@dataclass(frozen=True)
class ArenaUse:
    total_bytes: int  # what the model needs: head (activations) + tail (persistent)


def _interpreter(path: Path, arena: int):
    runtime = require("tflite_micro.python.tflite_micro.runtime", package="tflite-micro", purpose="the TFLite Micro emulator")
    try:
        return runtime.Interpreter.from_file(str(path), arena_size=int(arena))
    except RuntimeError as exc:
        raise ArenaTooSmall(str(exc)) from exc


def measure_arena(path: Path) -> ArenaUse:
    interp = _interpreter(path, MEASURE_ARENA)
    details = interp.get_input_details(0)
    interp.set_input(np.zeros(details["shape"], details["dtype"]), 0)
    interp.invoke()
    with caught_stderr() as said:  # TFLM prints its allocation report from C++ to fd 2
        interp.print_allocations()
    report = said[0].decode(errors="replace")
    match = re.search(r"Arena allocation total (\d+) bytes", report)
    if not match:
        raise RuntimeError(f"TFLM printed no arena total: {report[:200]!r}")
    return ArenaUse(int(match.group(1)))


class TFLMRunner(Runner):
    def __init__(self, path: Path, expected_nchw: list[tuple[int, ...]], *, arena_bytes: int, runtime: str = "tflm"):
        self.runtime = runtime
        self.interp = _interpreter(path, arena_bytes)
        self.inp = self.interp.get_input_details(0)
        from edgeport.ops.tflite_model import read_tflite

        outs = [self.interp.get_output_details(i) for i in range(read_tflite(path).num_outputs)]
        self.outs = outs
        self.mapping = match_outputs(expected_nchw, [tuple(o["shape"]) for o in outs])

    @staticmethod
    def _qparams(details) -> tuple[float, int]:
        q = details.get("quantization_parameters") or {}
        scales, zps = q.get("scales"), q.get("zero_points")
        if scales is None or len(scales) == 0:
            return 0.0, 0
        return float(scales[0]), int(zps[0])

    def _run_one(self, x):
        inp = self.inp
        self.interp.set_input(to_model_input(x, inp["shape"], inp["dtype"], self._qparams(inp)), 0)
        self.interp.invoke()
        return [
            from_model_output(self.interp.get_output(i), self.outs[i]["dtype"], self._qparams(self.outs[i]), is_nhwc)
            for i, is_nhwc in self.mapping
        ]
