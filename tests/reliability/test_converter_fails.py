"""A converter that fails on a model edgeport accepted is exit 3, not bad input: one line with its
reason and its log, and nothing left behind. (A quantised variant it cannot write is a row.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeport.convert.converters.onnx2tf import Onnx2tf, Onnx2tfFailed

from .conftest import assert_kept, assert_one_line, inventory


def test_a_converter_that_crashes_is_exit_3_with_its_log(workspace, run_inproc, monkeypatch):
    def crash(self, exported, work, *, quantised, timeout_s, context, meanwhile=None):
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


def test_a_disk_that_fills_while_the_converter_writes_is_the_users_disk(workspace, run_inproc, monkeypatch):
    """onnx2tf dies of ENOSPC: exit 2 naming the folder and what to do, as any full disk is."""
    from edgeport.convert.converters.onnx2tf import Onnx2tfRun

    def full(self, timeout_s, require=None):
        self.kill()
        raise Onnx2tfFailed(1, "OSError: [Errno 28] No space left on device: 'tf/model_float32.tflite'", [])

    monkeypatch.setattr(Onnx2tfRun, "finish", full)
    before = inventory(workspace)
    r = run_inproc("convert", "model.pt", "--arch", "pdet-n", "--imgsz", "64", "--no-int8", "--out", "out")
    assert_one_line(r, 2, "No space left on device", "onnx2tf", "free some disk space")
    assert not (workspace / "out").exists()
    assert_kept(before, inventory(workspace))


def test_a_model_litert_torch_cannot_capture_is_refused_not_a_crash(tmp_path, monkeypatch):
    from edgeport.convert.context import RunContext
    from edgeport.convert.converters import litert
    from edgeport.convert.converters.base import Conversion
    from edgeport.errors import BadInputError

    why = "torch.export cannot capture the model: UserError: data-dependent control flow"
    monkeypatch.setattr(litert, "convert_variants", lambda *a, **k: Conversion({}, {"float32": why}, {}, 0.1))

    class Exported:
        class prepared:
            module, calib = None, None

    with pytest.raises(BadInputError, match="litert-torch cannot convert this model: torch.export cannot capture .* --converter onnx2tf"):
        litert.LiteRTTorch().convert(Exported(), tmp_path, quantised=None, timeout_s=10, context=RunContext())


# what onnx2tf 1.28 prints where a node's conversion raises (RT-DETR-l's TopK), colours and all
TOPK = ("\x1b[31mERROR:\x1b[0m The trace log is below.\nTraceback (most recent call last):\n"
        "  File \"onnx2tf/ops/TopK.py\", line 120, in make_node\nValueError: Shape must be rank 1 but is rank 0\n"
        "\x1b[31mERROR:\x1b[0m input_onnx_file_path: /tmp/x/model.onnx\n\x1b[31mERROR:\x1b[0m onnx_op_name: wa/model.28/TopK\n"
        "\x1b[31mERROR:\x1b[0m Read this and deal with it. https://github.com/PINTO0309/onnx2tf#parameter-replacement\n")


@pytest.mark.parametrize("generation, other", [(1, "try onnx2tf 2.x (make setup PYTHON=python3.12 VENV=.venv312) or "
                                                  "--converter litert-torch"), (2, "try --converter litert-torch")])
def test_a_node_the_converter_cannot_convert_is_named_with_the_converter_to_try(workspace, run_inproc, monkeypatch,
                                                                                generation, other):
    def crash(self, exported, work, *, quantised, timeout_s, context, meanwhile=None):
        raise Onnx2tfFailed(1, TOPK, [], generation).with_log()

    monkeypatch.setattr(Onnx2tf, "convert", crash)
    r = run_inproc("convert", "model.pt", "--arch", "pdet-n", "--imgsz", "64", "--out", "out")
    line = assert_one_line(r, 3, "onnx2tf failed (exit 1) at the ONNX node /model.28/TopK: ", other, "full log: ")
    assert "ValueError: Shape must be rank 1" in line
    Path(line.split("full log: ")[1].split()[0].rstrip(";")).unlink()
