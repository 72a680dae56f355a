"""The upsamples through the real back ends: ONNX Runtime, onnx2tf, the board lowering and TFLite's
reference kernels (and the real TFLite 1.13.1 where it is installed)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from edgeport.convert.converters.onnx2tf import run_onnx2tf
from edgeport.convert.passes.export_onnx_pass import run_onnxruntime, simplify
from edgeport.convert.passes.rewrite_upsample_pass import rewrite_graph
from edgeport.ops.tflite_model import read_tflite
from edgeport.validate.board.profiles import check_model, load_board
from edgeport.validate.parity.tflite_runner import TFLiteRunner

pytestmark = pytest.mark.slow
OLD = load_board("tflite-1.13")


class Table(nn.Module):
    """Every supported variant on one input: the x2 results concatenated, the x3 results, the x4."""

    def forward(self, x):
        x2 = [
            F.interpolate(x, scale_factor=2, mode="nearest"),
            F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True),
            F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False),
        ]
        x3 = [
            F.interpolate(x, scale_factor=3, mode="nearest"),
            F.interpolate(x, scale_factor=3, mode="bilinear", align_corners=True),
            F.interpolate(x, scale_factor=3, mode="bilinear", align_corners=False),
        ]
        return torch.cat(x2, 1), torch.cat(x3, 1), F.interpolate(x, scale_factor=4, mode="bilinear", align_corners=False)


@pytest.mark.parametrize("shape", [(1, 3, 5, 7), (1, 4, 5, 7), (1, 8, 6, 6)], ids=["odd-3ch", "odd-4ch", "even-8ch"])
def test_the_upsample_table_lowered_for_tflite_113_matches_pytorch(tmp_path, shape):
    from edgeport.ops.lowering.registry import lower_for_board

    x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    original = Table().eval()
    kept, decisions, _ = rewrite_graph(original, torch.from_numpy(x), OLD, legacy_resize=False)
    assert not any(d.rewritten for d in decisions)  # nothing of the model replaced: lowered after conversion
    with torch.no_grad():
        ref = [o.numpy() for o in original(torch.from_numpy(x))]

    onnx_path = tmp_path / "model.onnx"
    _export_rect(kept, shape, onnx_path)
    for r, o in zip(ref, run_onnxruntime(onnx_path, x)):
        np.testing.assert_allclose(o, r, rtol=1e-5, atol=1e-5 * np.abs(r).max())

    calib = np.random.default_rng(1).random((4, *shape[1:]), dtype=np.float32)
    files, _ = run_onnx2tf(onnx_path, calib, tmp_path / "w", int8=False, input_name="images", timeout_s=600)
    assert check_model(read_tflite(files["float32"]), OLD), "as converted, TFLite 1.13 cannot compute half-pixel bilinear"
    lowered = lower_for_board(files["float32"].read_bytes(), OLD.lacks)
    assert lowered.rules == {"resize_bilinear_half_pixel": 3} and not lowered.left, lowered.describe()
    (tmp_path / "lowered.tflite").write_bytes(lowered.model)
    summary = read_tflite(tmp_path / "lowered.tflite")
    assert check_model(summary, OLD) == [], "the lowered model must run on TFLite 1.13"
    assert not any("half_pixel_centers" in o.notes for o in summary.ops)
    assert all(o.version == 1 for o in summary.ops)
    expected = [tuple(r.shape) for r in ref]
    runner = TFLiteRunner(tmp_path / "lowered.tflite", expected, kernels="reference")
    for r, t in zip(ref, runner.run(x).outputs):
        np.testing.assert_allclose(t, r, rtol=1e-5, atol=1e-5 * np.abs(r).max())
    real = _real_runtime()
    if real is not None:  # and the board's own runtime computes the same
        for r, t in zip(ref, real(tmp_path / "lowered.tflite", expected, tmp_path).run(x).outputs):
            np.testing.assert_allclose(t, r, rtol=1e-5, atol=1e-5 * np.abs(r).max())


def _real_runtime():
    """A runner factory on the installed TFLite 1.13.1, or None."""
    from edgeport.validate.board.runtime import LocalPython, installed_python
    from edgeport.validate.parity.board_runner import BoardRunner

    python = installed_python(OLD)
    if python is None:
        return None
    return lambda path, expected, work: BoardRunner(LocalPython(python, what="TFLite 1.13.1"), path, expected,
                                                    runtime="board:tflite-1.13", workdir=work)


def _export_rect(module, shape, path):
    # as the pipeline does: export, then simplify (folds the computed Pad amounts into constants)
    torch.onnx.export(module, (torch.zeros(*shape),), str(path), input_names=["images"], output_names=["x2", "x3", "x4"],
                      opset_version=17, dynamo=False)
    simplify(path)


def test_board_upsample_runs_as_native_v1_resize_with_the_board_values(tmp_path):
    from edgeport.ops.board_upsample import BoardUpsample

    shape = (1, 4, 5, 6)
    model = nn.Sequential(BoardUpsample(2)).eval()
    x = np.random.default_rng(2).normal(size=shape).astype(np.float32)
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).numpy()
    path = tmp_path / "model.onnx"
    torch.onnx.export(model, (torch.zeros(*shape),), str(path), input_names=["images"], output_names=["y"], opset_version=17, dynamo=False)
    files, _ = run_onnx2tf(path, np.random.default_rng(3).random((2, *shape[1:]), dtype=np.float32), tmp_path / "w",
                           int8=False, input_name="images", timeout_s=600)
    summary = read_tflite(files["float32"])
    assert [(o.name, o.version, o.notes) for o in summary.ops] == [("RESIZE_BILINEAR", 1, ())]
    assert check_model(summary, OLD) == []
    (got,) = TFLiteRunner(files["float32"], [ref.shape], kernels="reference").run(x).outputs
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
