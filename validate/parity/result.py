"""Parity's typed results: a row per (variant, runtime), and the verdict on whether a file runs.

Imports neither torch nor numpy: ``edgeport check`` and the renderers read reports without them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

JUDGES = ("emulator", "runtime", "converter")


@dataclass(frozen=True)
class Verdict:
    """Whether a file runs, and who says so: the board ``emulator`` (its op gate; TFLite Micro's
    arena), the board's own ``runtime``, or the ``converter`` that wrote no file at all."""

    judge: str
    runnable: bool
    reasons: tuple[str, ...] = ()
    differences: dict = field(default_factory=dict)  # emulator: named board differences -> ops affected
    arena_bytes: int | None = None  # TFLite Micro: what the model needs
    model_bytes: int | None = None

    def to_dict(self) -> dict:
        return {"judge": self.judge, "runnable": self.runnable, "reasons": list(self.reasons), "differences": dict(self.differences),
                "arena_bytes": self.arena_bytes, "model_bytes": self.model_bytes}


@dataclass(frozen=True)
class ResultRow:
    """One (variant, runtime) row: how a runtime's outputs compare with the reference's."""

    variant: str  # reference, folded, onnx, float32, int8, uint8
    runtime: str  # pytorch, onnxruntime, tflite, tflite-ref, board:NAME ..., converter
    passed: bool
    ms_per_image: float | None = None
    outputs: tuple[dict, ...] = ()  # per model output (and channel group): compare.TensorComparison.to_dict()
    detections: dict | None = None  # detections.DetectionAgreement.to_dict()
    map: dict | None = None  # {"map50", "map50_95"} against ground truth
    verdict: Verdict | None = None  # whether the file runs there, and who says so
    divergence: dict | None = None  # divergence.Divergence.to_dict()
    error_histogram: dict | None = None  # compare.error_histogram()
    repeat: dict | None = None  # {"max_abs", "passed"}: each image invoked twice
    reasons: tuple[str, ...] = ()  # why the row failed beyond its outputs (boxes, a second invoke that differs)
    reported_runtime: str | None = None  # what a board's runtime called itself, when its label says otherwise
    # quantised rows: runs it must match step for step, each {"against", "max_steps", "allowed", "passed"}
    # (a board's kernels against the reference kernels on the same file; uint8 against its int8 twin)
    steps: tuple[dict, ...] = ()
    same_run_as: str | None = None  # the runtime of an earlier row whose run this row reuses

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["outputs"] = list(self.outputs)
        d["reasons"] = list(self.reasons)
        d["steps"] = [dict(c) for c in self.steps]
        d["verdict"] = self.verdict.to_dict() if self.verdict else None
        return d

    @classmethod
    def not_runnable(cls, variant: str, runtime: str, verdict: Verdict) -> "ResultRow":
        """A file that does not run there (or was never written): a failed row carrying the reasons."""
        return cls(variant=variant, runtime=runtime, passed=False, verdict=verdict)
