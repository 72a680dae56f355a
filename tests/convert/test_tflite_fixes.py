"""Corrections to a converter's output: int8 resize outputs take their input's quantisation."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from edgeport.convert.base import ConvertConfig
from edgeport.convert.pipeline import PIPELINE, run_pipeline
from edgeport.convert.tflite_fixes import _SCALE, RESIZE_OPS, _quant, share_resize_quantization
from edgeport.validate.tflite_model import operators

pytestmark = pytest.mark.slow


def _resize_quant(model: bytes) -> list[tuple[float, float]]:
    """(input scale, output scale) of every int8 resize."""
    return [(_quant(sg.Tensors(op.Inputs(0))).Scale(0), _quant(sg.Tensors(op.Outputs(0))).Scale(0))
            for _, sg, op in operators(model, RESIZE_OPS)]


def _skew(model: bytes) -> bytes:
    """What onnx2tf 2.x writes: each resize output calibrated apart from its input (scale x 0.99)."""
    buf = bytearray(model)
    for _, sg, op in operators(model, RESIZE_OPS):
        q = _quant(sg.Tensors(op.Outputs(0)))
        struct.pack_into("<f", buf, q._tab.Vector(q._tab.Offset(_SCALE)), q.Scale(0) * 0.99)
    return bytes(buf)


@pytest.fixture(scope="module")
def int8_bilinear(tmp_path_factory, random_checkpoint) -> Path:
    work = tmp_path_factory.mktemp("fix")
    cfg = ConvertConfig(checkpoint=random_checkpoint("pdet-n-bilinear", 2), work_dir=work, imgsz=64)
    state, _ = run_pipeline(cfg, [p for p in PIPELINE if p.name not in ("board_gate", "parity")])
    return state.tflite["int8"]


def test_skewed_resize_quantisation_is_shared_again_and_xnnpack_prepares_it(int8_bilinear, tmp_path):
    from edgeport.validate.tflite_runner import load_interpreter

    model = int8_bilinear.read_bytes()
    assert _resize_quant(model) and all(a == b for a, b in _resize_quant(model)), "edgeport ships resize quantisation shared"
    skewed = _skew(model)
    assert all(a != b for a, b in _resize_quant(skewed))
    (tmp_path / "skewed.tflite").write_bytes(skewed)
    with pytest.raises(RuntimeError, match="RESIZE_BILINEAR"):
        load_interpreter(tmp_path / "skewed.tflite")  # XNNPACK refuses, as it does onnx2tf 2.x's file
    fixed, n = share_resize_quantization(skewed)
    assert n == 2 and fixed == model, "the edit restores exactly what a shared quantisation writes"
    assert share_resize_quantization(model) == (model, 0)
    (tmp_path / "fixed.tflite").write_bytes(fixed)
    load_interpreter(tmp_path / "fixed.tflite")
