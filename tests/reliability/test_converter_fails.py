"""A converter that fails on a model edgeport accepted is exit 3, not bad input: one line with its
reason and its log, and nothing left behind. (A quantised variant it cannot write is a row.)"""

from __future__ import annotations

from pathlib import Path

from edgeport.convert.onnx2tf import Onnx2tf, Onnx2tfFailed

from .conftest import assert_kept, assert_one_line, inventory


def test_a_converter_that_crashes_is_exit_3_with_its_log(workspace, run_inproc, monkeypatch):
    def crash(self, exported, work, *, quantised, timeout_s):
        raise Onnx2tfFailed(1, "Traceback (most recent call last):\nTypeError: only 0-dimensional arrays", []).with_log()

    monkeypatch.setattr(Onnx2tf, "convert", crash)
    before = inventory(workspace)
    r = run_inproc("convert", "model.pt", "--arch", "pdet-n", "--imgsz", "64", "--out", "out")
    line = assert_one_line(r, 3, "to_tflite: onnx2tf failed (exit 1): TypeError: only 0-dimensional arrays", "full log: ")
    assert "internal error" not in line and "please report" not in line  # the converter's failure, not edgeport's bug
    log = Path(line.split("full log: ")[1].split()[0].rstrip(";"))
    assert "TypeError" in log.read_text()
    log.unlink()
    assert not (workspace / "out").exists()
    assert_kept(before, inventory(workspace))
