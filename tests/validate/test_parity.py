"""run_parity with fake runners: rows, verdicts and divergence decided from what runners return."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from edgeport.validate.parity import ParitySubject, run_parity
from edgeport.validate.report import failures
from edgeport.validate.runners import Runner


class Doubler(torch.nn.Module):
    def forward(self, x):
        return x[:, :1] * 2.0


class FakeRunner(Runner):
    def __init__(self, runtime: str, scale: float = 2.0, offset: float = 0.0):
        self.runtime, self.scale, self.offset = runtime, scale, offset

    def _run_one(self, x):
        return [x[:, :1] * self.scale + self.offset]


def _subject(tmp_path: Path, **kw) -> ParitySubject:
    rng = np.random.default_rng(0)
    return ParitySubject(reference_module=Doubler(), folded_module=None, onnx_path=None, tflite={}, output_names=("y",),
                         strides=(), inputs=rng.random((2, 3, 8, 8), dtype=np.float32), inputs_source="test", workdir=tmp_path, **kw)


def test_rows_pass_and_fail_on_what_the_runners_compute(tmp_path):
    rows = lambda subject, shapes: [("float32", FakeRunner("exact"), None, None),  # noqa: E731
                                    ("float32", FakeRunner("off", offset=0.1), None, None),
                                    ("int8", FakeRunner("noisy-int8", scale=2.02), None, None)]
    report = run_parity(_subject(tmp_path), row_runners=rows)
    by = {r["runtime"]: r for r in report["results"]}
    assert list(by) == ["pytorch", "exact", "off", "noisy-int8"]
    assert by["exact"]["passed"] and by["exact"]["outputs"][0]["max_abs"] == 0.0
    assert not by["off"]["passed"] and "max_abs" in by["off"]["outputs"][0]["reasons"][0]
    assert by["noisy-int8"]["passed"], "int8 is judged on cosine only, and a 1% gain keeps the angle"
    assert not report["passed"] and [str(f) for f in failures(report)] == ["float32/off"]
    assert report["inputs"]["count"] == 2 and report["inputs"]["random"] == 2


def test_a_board_that_cannot_run_the_file_is_a_failed_row_with_its_reasons(tmp_path):
    class Board:
        name = "tiny"

    verdict = {"runnable": False, "reasons": ["CONV_2D has no kernel"], "differences": {}, "arena_bytes": None, "model_bytes": 1}
    report = run_parity(_subject(tmp_path, board=Board()), row_runners=lambda s, shapes: [("int8", None, None, verdict)])
    (row,) = [r for r in report["results"] if r["runtime"] == "board:tiny"]
    assert row["passed"] is False and row["emulator"]["reasons"] == ["CONV_2D has no kernel"] and row["outputs"] == []


def test_divergence_is_computed_for_failing_rows_only(tmp_path):
    exported = []
    subject = _subject(tmp_path, export_reference=exported.append)
    report = run_parity(subject, row_runners=lambda s, shapes: [("float32", FakeRunner("exact"), Path("unused.tflite"), None)])
    assert exported == [] and report["results"][1]["divergence"] is None
