"""The reference board emulator: what the board would compute, or why it cannot run.

- a ``tflite`` board: the profile's op-version gate, then its kernels (``BoardProfile.kernels``)
  on the model as the board would see it (its named differences applied);
- a ``tflm`` board: the gate, then TensorFlow Lite Micro with the arena sized to the
  board's RAM; arena bytes used are reported against RAM and model bytes against flash.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from edgeport.validate.board.differences import get_difference
from edgeport.validate.board.profiles import BoardProfile, board_verdict
from edgeport.validate.board.verdict import BoardCheck
from edgeport.validate.parity.result import Verdict
from edgeport.validate.parity.runners import Runner


def emulator_label(board: BoardProfile) -> str:
    """``board:NAME``, marked emulated where the board's real runtime (``has_real_runtime``) could say otherwise."""
    return f"board:{board.name} (emulated)" if board.has_real_runtime else f"board:{board.name}"


@dataclass(frozen=True)
class Emulation:
    runner: Runner | None  # None: the board cannot run the file (``verdict`` says why)
    verdict: Verdict
    file: Path  # the model as the board runs it (for the divergence analysis)


def emulate(path: Path, board: BoardProfile, expected_nchw, workdir: Path, gate: BoardCheck | None = None) -> Emulation:
    """What ``board`` computes on the file at ``path``, or the reasons it cannot run it. ``gate``:
    the board gate's verdict on the file (``profiles.board_verdict``), where it ran already."""
    gate = gate if gate is not None else board_verdict(path, board)
    reasons = list(gate.reasons)
    label = emulator_label(board)
    if board.runtime == "tflm":
        from edgeport.validate.parity.tflm_runner import ArenaTooSmall, TFLMRunner, measure_arena

        arena = None
        try:
            arena = measure_arena(path).total_bytes
        except ArenaTooSmall as exc:
            reasons.append(f"TFLite Micro cannot allocate this model at all ({exc})")
        if arena is not None and arena > board.ram_bytes:
            reasons.append(f"tensor arena needs {arena:,} bytes; {board.name} has {board.ram_bytes:,} bytes of RAM")
        verdict = Verdict("emulator", not reasons, tuple(reasons), arena_bytes=arena, model_bytes=gate.size_bytes)
        runner = None if reasons else TFLMRunner(path, expected_nchw, arena_bytes=board.ram_bytes, runtime=label)
        return Emulation(runner, verdict, Path(path))
    if reasons:
        return Emulation(None, Verdict("emulator", False, tuple(reasons), model_bytes=gate.size_bytes), Path(path))
    from edgeport.validate.parity.tflite_runner import TFLiteRunner

    model = Path(path).read_bytes()
    differences = {}
    for name in board.differences:
        model, affected = get_difference(name).apply(model)
        differences[name] = affected
    fd, name = tempfile.mkstemp(suffix=".tflite", dir=workdir)
    os.close(fd)
    emulated = Path(name)
    emulated.write_bytes(model)
    verdict = Verdict("emulator", True, (), differences=differences, model_bytes=gate.size_bytes)
    return Emulation(TFLiteRunner(emulated, expected_nchw, kernels=board.kernels, runtime=label), verdict, emulated)
