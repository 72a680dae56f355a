"""onnx2tf 1.28 through ``onnx2tf_lean``: the shipped files byte for byte as plain onnx2tf writes
them, without the TensorFlow conversions of the files edgeport never ships.

TensorFlow is imported in child processes only: in the test process it breaks torch.compile's
later import of triton (a segfault: the two bring conflicting native libraries)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from edgeport.convert.to_tflite_pass import ONNX2TF_OUTPUTS, installed_backend, offline_env, onnx2tf_command, write_calibration

pytestmark = pytest.mark.skipif(installed_backend().generation >= 2, reason="the 2.x line writes without TensorFlow")

UNSHIPPED = ("dynamic_range_quant", "integer_quant_with_int16_act", "full_integer_quant_with_int16_act")


@pytest.mark.slow
def test_the_shipped_files_are_plain_onnx2tfs_byte_for_byte(tmp_path):
    from edgeport.convert.export_onnx_pass import export_onnx, simplify

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3, stride=2)).eval()
    onnx_path = tmp_path / "model.onnx"
    export_onnx(model, 32, onnx_path, output_names=["y"], opset=17)
    simplify(onnx_path)
    write_calibration(tmp_path, np.random.default_rng(0).random((8, 3, 32, 32), dtype=np.float32))
    written = {}
    for lean in (True, False):
        out = tmp_path / ("lean" if lean else "plain")
        cmd = onnx2tf_command(onnx_path, out, int8=True, input_name="images", lean=lean)
        proc = subprocess.run(cmd, cwd=tmp_path, env=offline_env(), capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        written[lean] = {p.name: p.read_bytes() for p in Path(out).glob("*.tflite")}
    for name in ONNX2TF_OUTPUTS.values():
        assert written[True][name] == written[False][name], f"{name} differs from plain onnx2tf's"
    for variant in UNSHIPPED:
        assert f"model_{variant}.tflite" in written[False], "plain onnx2tf writes it"
        assert f"model_{variant}.tflite" not in written[True], "declined: nothing reads it"
    for variant in ("float16", "integer_quant"):  # no way out in onnx2tf's code: they must still be written
        assert f"model_{variant}.tflite" in written[True], f"{variant} was declined"
