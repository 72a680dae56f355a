from __future__ import annotations

import numpy as np
import pytest
from torch import nn

from edgeport.convert.base import ConvertConfig, State
from edgeport.convert.export_onnx_pass import ExportOnnxPass, op_counts, run_onnxruntime
from edgeport.convert.fold_bn_pass import fold_batchnorm
from edgeport.errors import PassCheckError
from edgeport.models.inference import forward


def _state(tmp_path, module, images):
    cfg = ConvertConfig(checkpoint=tmp_path / "x", work_dir=tmp_path, opset=17)
    return State(cfg, module=module, imgsz=64, calib=images, output_names=("p3", "p4", "p5"))


def test_folded_detector_exports_without_batchnorm(tmp_path, pdet_n, images):
    folded, _, _ = fold_batchnorm(pdet_n)
    state = _state(tmp_path, folded, images)
    p = ExportOnnxPass()
    result = p.run(state)
    p.check(state, result.state)
    counts = op_counts(result.state.onnx_path)
    assert "BatchNormalization" not in counts and counts["Conv"] == 26
    import onnx

    graph = onnx.load(str(result.state.onnx_path)).graph
    assert [i.name for i in graph.input] == ["images"]
    assert [d.dim_value for d in graph.input[0].type.tensor_type.shape.dim] == [1, 3, 64, 64]
    assert [o.name for o in graph.output] == ["p3", "p4", "p5"]
    for ref, got in zip(forward(folded, images[:1]), run_onnxruntime(result.state.onnx_path, images[:1])):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_check_flags_batchnorm_left_in_folded_model(tmp_path, images, make_bn_stats):
    # a BN that follows a ReLU cannot be folded and is exported as BatchNormalization;
    # a state that claims a BN-free module must then fail the check
    lone = make_bn_stats(nn.Sequential(nn.ReLU(), nn.BatchNorm2d(3))).eval()
    state = _state(tmp_path, lone, images).evolve(output_names=("out",))
    result = ExportOnnxPass().run(state)
    assert op_counts(result.state.onnx_path).get("BatchNormalization") == 1
    ExportOnnxPass().check(state, result.state)
    with pytest.raises(PassCheckError, match="1 BatchNormalization nodes in a folded model"):
        ExportOnnxPass().check(state, result.state.evolve(module=nn.Sequential(nn.ReLU())))


def test_check_flags_onnx_that_computes_something_else(tmp_path, pdet_n, images):
    folded, _, _ = fold_batchnorm(pdet_n)
    state = _state(tmp_path, folded, images)
    result = ExportOnnxPass().run(state)
    other, _, _ = fold_batchnorm(pdet_n)
    last = other.get_submodule("head.preds.0")
    nn.init.constant_(last.bias, 3.0)
    with pytest.raises(PassCheckError, match="differs from PyTorch"):
        ExportOnnxPass().check(state, result.state.evolve(module=other))
