"""The ``edgeport.parity/1`` report: its schema tag and its rows, as typed records.

Every row of ``report.json``'s ``results`` is a ``ResultRow``; the parity run builds them,
the renderers and ``edgeport check`` read their dictionaries. This module imports neither
torch nor numpy, so ``edgeport check`` starts in a fraction of a second.
(Fields documented in ``validate/SCHEMA.md``.)
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from edgeport.errors import ParityGateError

SCHEMA = "edgeport.parity/1"


@dataclass(frozen=True)
class ResultRow:
    """One (variant, runtime) row: how a runtime's outputs compare with the reference's."""

    variant: str  # reference, folded, onnx, float32, int8
    runtime: str  # pytorch, onnxruntime, tflite, tflite-ref, board:NAME
    passed: bool
    ms_per_image: float | None = None
    outputs: tuple[dict, ...] = ()  # per model output: compare.TensorComparison.to_dict()
    detections: dict | None = None  # detections.DetectionAgreement.to_dict()
    map: dict | None = None  # {"map50", "map50_95"} against ground truth
    emulator: dict | None = None  # emulator.EmulatorVerdict.to_dict()
    divergence: dict | None = None  # divergence.Divergence.to_dict()
    error_histogram: dict | None = None  # compare.error_histogram()

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["outputs"] = list(self.outputs)
        return d

    @classmethod
    def not_runnable(cls, variant: str, runtime: str, emulator: dict) -> "ResultRow":
        """A board that cannot run the file: a failed row carrying the emulator's reasons."""
        return cls(variant=variant, runtime=runtime, passed=False, emulator=emulator)


@dataclass(frozen=True)
class Failure:
    """One thing that failed in a report: a row, or a file the board cannot run."""

    what: str
    reasons: tuple[str, ...] = field(default=())

    def __str__(self) -> str:
        return f"{self.what}: {'; '.join(self.reasons)}" if self.reasons else self.what


def failures(report: dict) -> list[Failure]:
    """Every failed row and every file the board cannot run, from a report dictionary.

    The one place the failed rows are listed: the pipeline's summary, the gate's error and
    the renderers all read this.
    """
    out = [Failure(f"{r['variant']}/{r['runtime']}", tuple(_converter_reasons(r))) for r in report["results"] if not r["passed"]]
    board = report.get("board") or {}
    for variant, check in (board.get("checks") or {}).items():
        if not check["runnable"]:
            out.append(Failure(f"{variant} not runnable on {board['name']}", tuple(check["reasons"])))
    return out


def _converter_reasons(row: dict) -> list[str]:
    """Why the converter wrote no file for a row's variant: said where the row is named."""
    verdict = row.get("emulator") or {}
    return list(verdict["reasons"]) if verdict.get("judge") == "converter" else []


def gate(out, report: dict) -> None:
    """Raise ``ParityGateError`` (exit 1) naming what failed, when the report did not pass."""
    if not report["passed"]:
        raise ParityGateError(f"gate failed: {', '.join(map(str, failures(report)))}; artifacts and report are in {out}/")
