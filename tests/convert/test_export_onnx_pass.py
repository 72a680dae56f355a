from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from torch import nn

from edgeport.convert.passes.export_onnx_pass import ExportOnnxPass, op_counts, run_onnxruntime
from edgeport.convert.passes.fold_bn_pass import fold_batchnorm
from edgeport.errors import PassCheckError
from edgeport.models.inference import forward

from .conftest import config, prepared_record


def _run(tmp_path, module, images, names=("p3", "p4", "p5")):
    prepared, cfg = prepared_record(tmp_path, module, images, output_names=names), config(tmp_path, opset=17)
    return prepared, cfg, ExportOnnxPass().run(prepared, cfg)


def test_folded_detector_exports_without_batchnorm(tmp_path, pdet_n, images):
    folded, _, _ = fold_batchnorm(pdet_n)
    prepared, cfg, result = _run(tmp_path, folded, images)
    ExportOnnxPass().check(prepared, result.value, cfg)
    counts = op_counts(result.value.onnx)
    assert "BatchNormalization" not in counts and counts["Conv"] == 26
    import onnx

    graph = onnx.load(str(result.value.onnx)).graph
    assert [i.name for i in graph.input] == ["images"]
    assert [d.dim_value for d in graph.input[0].type.tensor_type.shape.dim] == [1, 3, 64, 64]
    assert [o.name for o in graph.output] == ["p3", "p4", "p5"]
    for ref, got in zip(forward(folded, images[:1]), run_onnxruntime(result.value.onnx, images[:1])):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_check_flags_batchnorm_left_in_folded_model(tmp_path, images, make_bn_stats):
    # a BN that follows a ReLU cannot be folded and is exported as BatchNormalization;
    # a state that claims a BN-free module must then fail the check
    lone = make_bn_stats(nn.Sequential(nn.ReLU(), nn.BatchNorm2d(3))).eval()
    prepared, cfg, result = _run(tmp_path, lone, images, names=("out",))
    assert op_counts(result.value.onnx).get("BatchNormalization") == 1
    ExportOnnxPass().check(prepared, result.value, cfg)
    with pytest.raises(PassCheckError, match="1 BatchNormalization nodes in a folded model"):
        ExportOnnxPass().check(replace(prepared, module=nn.Sequential(nn.ReLU())), result.value, cfg)


def test_check_flags_onnx_that_computes_something_else(tmp_path, pdet_n, images):
    folded, _, _ = fold_batchnorm(pdet_n)
    prepared, cfg, result = _run(tmp_path, folded, images)
    other, _, _ = fold_batchnorm(pdet_n)
    last = other.get_submodule("head.preds.0")
    nn.init.constant_(last.bias, 3.0)
    with pytest.raises(PassCheckError, match="differs from PyTorch"):
        ExportOnnxPass().check(replace(prepared, module=other), result.value, cfg)


def test_onnx_runtime_may_lie_from_pytorch_by_what_float32_itself_errs_by_there(tmp_path, pdet_n, images, monkeypatch):
    """A model whose float32 outputs float32 itself cannot settle (RT-DETR's query top-k among near-ties:
    float64 keeps another query): ONNX Runtime's within twice float32's own error there passes, as a
    float row does; beyond it, it fails, naming that error."""
    import edgeport.convert.passes.export_onnx_pass as export
    import edgeport.models.inference as inference

    folded, _, _ = fold_batchnorm(pdet_n)
    prepared, cfg, result = _run(tmp_path, folded, images)
    moved = 0.01 * max(float(np.abs(r).max()) for r in forward(folded, images[:1]))
    monkeypatch.setattr(export, "run_onnxruntime", lambda path, x: [r + moved for r in forward(folded, x)])
    monkeypatch.setattr(inference, "float32_error", lambda module, x, outs: [np.full(o.shape, moved / 1.5) for o in outs])
    ExportOnnxPass().check(prepared, result.value, cfg)
    monkeypatch.setattr(inference, "float32_error", lambda module, x, outs: [np.full(o.shape, moved / 3) for o in outs])
    with pytest.raises(PassCheckError, match="differs from PyTorch by .* float32's own error"):
        ExportOnnxPass().check(prepared, result.value, cfg)
    monkeypatch.setattr(inference, "float32_error", lambda module, x, outs: None)  # the model does not run in float64
    with pytest.raises(PassCheckError, match="differs from PyTorch"):
        ExportOnnxPass().check(prepared, result.value, cfg)
