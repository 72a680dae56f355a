"""The one place a report is assembled: parity's result and what the other phases found."""

from __future__ import annotations

from edgeport._lazy import installed_versions
from edgeport.validate.parity.compare import CHANNEL, DETECTION_TOLERANCES, NOISE_BOUNDS, TOLERANCES
from edgeport.validate.parity.run import ParityResult
from edgeport.validate.report.schema import Report, read_sections
from edgeport.validate.report.sections import Board, Dataset, Repair

VERSION_PACKAGES = ("edgeport", "torch", "onnx", "onnxruntime", "onnxslim", "onnx2tf", "tensorflow", "ai-edge-litert",
                    "tflite-micro", "numpy")


def tolerances() -> dict:
    out = {v: {"max_abs_rel": t.max_abs_rel, "min_cosine": t.min_cosine,
               "boxes": {"fraction": DETECTION_TOLERANCES[v].fraction, "slack": DETECTION_TOLERANCES[v].slack,
                         "noise": NOISE_BOUNDS[v].describe()}}
           for v, t in TOLERANCES.items()}
    out["channels"] = {"min_cosine": CHANNEL.min_cosine, "applies_to": "quantised files, each channel"}
    return out


def build_report(parity: ParityResult, *, model: dict, board: Board | None, artifacts: dict, stages=(),
                 upsample: dict | None = None, int8_normalised: list | None = None, converter: dict | None = None,
                 repairs: dict[str, Repair] | None = None, dataset: Dataset | None = None) -> Report:
    """``model``: ``sections.ModelSection``'s fields, joined by the head parity resolved. What the phases
    hand it as dicts (stage records' ``to_dict`` too) is read into the report's types by the reader a
    report file is read by (``schema.read_sections``); the board gate's ``Board`` is one already."""
    given = {"model": dict(model, head=parity.head.name, head_detail=parity.head.describe()), "inputs": parity.inputs,
             "tolerances": tolerances(), "versions": installed_versions(VERSION_PACKAGES), "artifacts": artifacts,
             "board_runtime": parity.board_runtime,
             "sample": parity.sample, "upsample": upsample, "int8_normalised": int8_normalised, "converter": converter,
             "stages": list(stages)}
    return Report(parity.rows, board=board, repairs=repairs, dataset=dataset, **read_sections(given))
