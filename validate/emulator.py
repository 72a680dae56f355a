"""The reference board emulator: what the board would compute, or why it cannot run.

- a ``tflite`` board: the profile's op-version gate, then TFLite's reference kernels
  (BUILTIN_REF) on the model as the board would see it (its named differences applied);
- a ``tflm`` board: the gate, then TensorFlow Lite Micro with the arena sized to the
  board's RAM; arena bytes used are reported against RAM and model bytes against flash.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from edgeport.validate.boards import BoardProfile, check_model
from edgeport.validate.differences import get_difference
from edgeport.validate.runners import Runner
from edgeport.validate.tflite_model import read_tflite


@dataclass
class EmulatorVerdict:
    runnable: bool
    reasons: list[str] = field(default_factory=list)
    differences: dict[str, int] = field(default_factory=dict)  # name -> ops affected
    arena_bytes: int | None = None
    model_bytes: int = 0

    def to_dict(self) -> dict:
        return {"runnable": self.runnable, "reasons": self.reasons, "differences": self.differences,
                "arena_bytes": self.arena_bytes, "model_bytes": self.model_bytes}


def build_emulator(path: Path, board: BoardProfile, expected_nchw, workdir: Path) -> tuple[Runner | None, EmulatorVerdict, Path]:
    """A runner that computes what ``board`` computes (or None, with the reasons it cannot run),
    its verdict, and the model file as the board runs it (for the divergence analysis)."""
    summary = read_tflite(path)
    verdict = EmulatorVerdict(runnable=True, model_bytes=summary.size_bytes)
    verdict.reasons = check_model(summary, board)
    if board.runtime == "tflm":
        from edgeport.validate.tflm_runner import ArenaTooSmall, TFLMRunner, measure_arena

        try:
            verdict.arena_bytes = measure_arena(path).total_bytes
        except ArenaTooSmall as exc:
            verdict.reasons.append(f"TFLite Micro cannot allocate this model at all ({exc})")
        if verdict.arena_bytes is not None and verdict.arena_bytes > board.ram_bytes:
            verdict.reasons.append(f"tensor arena needs {verdict.arena_bytes:,} bytes; {board.name} has {board.ram_bytes:,} bytes of RAM")
        if verdict.reasons:
            verdict.runnable = False
            return None, verdict, path
        runner = TFLMRunner(path, expected_nchw, arena_bytes=board.ram_bytes)
        runner.runtime = f"board:{board.name}"
        return runner, verdict, path
    if verdict.reasons:
        verdict.runnable = False
        return None, verdict, path
    from edgeport.validate.tflite_runner import TFLiteRunner

    model = Path(path).read_bytes()
    for name in board.differences:
        model, affected = get_difference(name).apply(model)
        verdict.differences[name] = affected
    fd, name = tempfile.mkstemp(suffix=".tflite", dir=workdir)
    os.close(fd)
    emulated = Path(name)
    emulated.write_bytes(model)
    runner = TFLiteRunner(emulated, expected_nchw, kernels="reference")
    runner.runtime = f"board:{board.name}"
    return runner, verdict, emulated
