"""Run every runtime on the same inputs and compare each against PyTorch as loaded.

The reference is the model exactly as loaded (before SyncBN revert and BN fold), so an
error introduced by folding shows up in the ``folded`` row and nowhere else first.
Builds the ``edgeport.parity/1`` report dictionary; rendering lives in ``render.py``.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata as md
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgeport.models.decode import decode
from edgeport.validate.compare import TOLERANCES, compare_tensors
from edgeport.validate.detections import compare_detections
from edgeport.validate.runners import OnnxRuntimeRunner, Runner, TorchRunner

SCHEMA = "edgeport.parity/1"
VERSION_PACKAGES = ("edgeport", "torch", "onnx", "onnxruntime", "onnxslim", "onnx2tf", "tensorflow", "ai-edge-litert", "numpy")


@dataclass(frozen=True)
class ParitySubject:
    """What is being validated."""

    reference_module: object
    folded_module: object | None
    onnx_path: Path | None
    tflite: dict[str, Path]
    output_names: tuple[str, ...]
    strides: tuple[int, ...]
    inputs: np.ndarray
    inputs_source: str
    model_info: dict = field(default_factory=dict)


def package_versions() -> dict[str, str]:
    out = {}
    for name in VERSION_PACKAGES:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = "not installed"
    return out


def _runners(subject: ParitySubject, expected_shapes) -> list[tuple[str, Runner]]:
    from edgeport.validate.tflite_runner import TFLiteRunner

    runners: list[tuple[str, Runner]] = []
    if subject.folded_module is not None:
        runners.append(("folded", TorchRunner(subject.folded_module)))
    if subject.onnx_path is not None:
        runners.append(("onnx", OnnxRuntimeRunner(subject.onnx_path)))
    for variant, path in subject.tflite.items():
        runners.append((variant, TFLiteRunner(path, expected_shapes)))
    return runners


def _detections(outputs: list[np.ndarray], strides: tuple[int, ...]):
    if not strides or len(strides) != len(outputs) or any(o.ndim != 4 or o.shape[1] < 6 for o in outputs):
        return None  # not a PDet-style detector head: tensor parity only
    return decode(outputs, strides)


def run_parity(subject: ParitySubject) -> dict:
    ref_run = TorchRunner(subject.reference_module).run(subject.inputs)
    ref_out = ref_run.outputs
    ref_dets = _detections(ref_out, subject.strides)
    expected_shapes = [(1, *o.shape[1:]) for o in ref_out]
    results = [
        {
            "variant": "reference",
            "runtime": "pytorch",
            "passed": True,
            "ms_per_image": ref_run.ms_per_image,
            "outputs": [],
            "detections": None,
        }
    ]
    for variant, runner in _runners(subject, expected_shapes):
        run = runner.run(subject.inputs)
        tol = TOLERANCES[variant]
        comparisons = [
            compare_tensors(name, r, g, tol) for name, r, g in zip(subject.output_names, ref_out, run.outputs, strict=True)
        ]
        dets = _detections(run.outputs, subject.strides)
        agreement = compare_detections(ref_dets, dets).to_dict() if ref_dets is not None and dets is not None else None
        results.append(
            {
                "variant": variant,
                "runtime": runner.runtime,
                "passed": all(c.passed for c in comparisons),
                "ms_per_image": run.ms_per_image,
                "outputs": [c.to_dict() for c in comparisons],
                "detections": agreement,
            }
        )
    artifacts = {}
    for label, path in [("model.onnx", subject.onnx_path), *[(f"model_{v}.tflite", p) for v, p in subject.tflite.items()]]:
        if path is not None:
            artifacts[label] = {"bytes": Path(path).stat().st_size}
    return {
        "schema": SCHEMA,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "passed": all(r["passed"] for r in results),
        "model": dict(subject.model_info, outputs=list(subject.output_names), strides=list(subject.strides)),
        "inputs": {"source": subject.inputs_source, "count": int(subject.inputs.shape[0]), "shape": list(subject.inputs.shape[1:])},
        "reference": {"runtime": "pytorch", "what": "the checkpoint's model as loaded, before SyncBN revert and BN fold"},
        "tolerances": {v: {"max_abs_rel": t.max_abs_rel, "min_cosine": t.min_cosine} for v, t in TOLERANCES.items()},
        "versions": package_versions(),
        "artifacts": artifacts,
        "results": results,
    }
