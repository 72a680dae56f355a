from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def small_onnx(tmp_path):
    """A two-convolution ONNX model at 32 px (``tmp_path/model.onnx``, exported and simplified as
    the pipeline does) and eight calibration images for it."""
    import torch

    from edgeport.convert.export_onnx_pass import export_onnx, simplify

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3, stride=2)).eval()
    onnx_path = tmp_path / "model.onnx"
    export_onnx(model, 32, onnx_path, output_names=["y"], opset=17)
    simplify(onnx_path)
    return onnx_path, np.random.default_rng(0).random((8, 3, 32, 32), dtype=np.float32)
