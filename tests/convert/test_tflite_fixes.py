"""Corrections to a converter's output: int8 resize outputs take their input's quantisation."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
import torch

from edgeport.convert.base import ConvertConfig
from edgeport.convert.pipeline import PIPELINE, run_pipeline
from edgeport.convert.tflite_fixes import _SCALE, RESIZE_OPS, _quant, share_resize_quantization
from edgeport.ops.tflite_model import operators
from edgeport.validate.board.profiles import load_board

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
    cfg = ConvertConfig(checkpoint=random_checkpoint("pdet-n-bilinear", 2), work_dir=work, imgsz=64, board=load_board("default"))
    converted, _ = run_pipeline(cfg, [p for p in PIPELINE if p.name not in ("board_gate", "parity")])
    return converted.files["int8"]


def test_skewed_resize_quantisation_is_shared_again_and_xnnpack_prepares_it(int8_bilinear, tmp_path):
    from edgeport.ops.tflite_run import load_interpreter

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


def _outputs(path: Path, x) -> list:
    from edgeport.ops.tflite_run import load_interpreter
    from edgeport.validate.parity.tensors import to_model_input

    interp = load_interpreter(path, kernels="reference")
    (inp,) = interp.get_input_details()
    interp.set_tensor(inp["index"], to_model_input(x, inp["shape"], inp["dtype"], inp["quantization"]))
    interp.invoke()
    return [(interp.get_tensor(d["index"]).astype("float32") - d["quantization"][1]) * d["quantization"][0]
            for d in interp.get_output_details()]


class TwoBranches(torch.nn.Module):
    """Two convolutions whose outputs a Concat joins, and a sigmoid: the shapes where onnx2tf
    2.x quantises the pieces apart from the whole, and a LOGISTIC apart from its fixed scale."""

    stride = 4

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.b = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.head = torch.nn.Conv2d(8, 6, 3, stride=2, padding=1)

    def forward(self, x):
        return torch.sigmoid(self.head(torch.cat([torch.relu(self.a(x)), 3.0 * torch.relu(self.b(x))], 1)))


def two_branches():
    return TwoBranches()


@pytest.fixture(scope="module")
def int8_concat(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("concat")
    torch.manual_seed(0)
    torch.save({"model": TwoBranches().state_dict()}, work / "ckpt.pt")
    cfg = ConvertConfig(checkpoint=work / "ckpt.pt", work_dir=work, imgsz=32, arch=f"{__name__}:two_branches",
                        board=load_board("default"))
    converted, _ = run_pipeline(cfg, [p for p in PIPELINE if p.name not in ("board_gate", "parity")])
    return converted.files["int8"]


def _set_scale_then_fix(model: bytes, q, scale: float, tmp_path: Path, refusal: str) -> Path:
    """Write ``model`` with the quantisation ``q`` (a tensor's, as read from ``model``) at ``scale``,
    check the reference kernels refuse it with ``refusal``, fix it with one QUANTIZE op, and
    return the fixed file."""
    from edgeport.convert.tflite_fixes import requantize_int8_constraints
    from edgeport.ops.tflite_run import load_interpreter

    buf = bytearray(model)
    struct.pack_into("<f", buf, q._tab.Vector(q._tab.Offset(_SCALE)), scale)
    (tmp_path / "skewed.tflite").write_bytes(bytes(buf))
    with pytest.raises(RuntimeError, match=refusal):
        load_interpreter(tmp_path / "skewed.tflite", kernels="reference")
    fixed, n = requantize_int8_constraints(bytes(buf))
    assert n == 1
    (tmp_path / "fixed.tflite").write_bytes(fixed)
    load_interpreter(tmp_path / "fixed.tflite", kernels="reference")
    load_interpreter(tmp_path / "fixed.tflite")  # and XNNPACK prepares it
    return tmp_path / "fixed.tflite"


def test_a_concat_input_quantised_apart_from_its_output_gets_a_requantise_op(int8_concat, tmp_path):
    """What onnx2tf 2.x writes: a tensor feeding a CONCATENATION calibrated apart from the
    concat's output. The kernels refuse it (XNNPACK and the reference kernels); a QUANTIZE op
    requantises it, as TensorFlow's converter would have, and the model computes what the
    consistent model computes."""
    import numpy as np

    from edgeport.convert.tflite_fixes import requantize_int8_constraints

    model = int8_concat.read_bytes()
    assert requantize_int8_constraints(model) == (model, 0), "a consistent model is returned byte for byte"
    ((_, sg, op),) = operators(model, ("CONCATENATION",))
    scales = [_quant(sg.Tensors(op.Inputs(i))).Scale(0) for i in range(op.InputsLength())]
    assert len(set(scales)) == 1, "TensorFlow's converter and the fix agree: one scale"
    q = _quant(sg.Tensors(op.Inputs(0)))
    fixed = _set_scale_then_fix(model, q, q.Scale(0) * 0.5, tmp_path, "CONCATENATION")  # calibrated apart
    x = np.random.default_rng(0).random((1, 3, 32, 32), dtype=np.float32)
    for got, want in zip(_outputs(fixed, x), _outputs(int8_concat, x)):
        assert np.abs(got - want).max() <= 0.05 * np.abs(want).max()  # one requantisation's rounding, at most


def test_a_logistic_quantised_apart_from_its_fixed_scale_gets_a_requantise_op(int8_concat, tmp_path):
    """What onnx2tf 2.x writes for YOLOv8's scores: a LOGISTIC whose int8 output has the scale
    of what it feeds, not TFLite's fixed 1/256. The reference kernels refuse it; the op then
    writes at 1/256 and a QUANTIZE takes it to the output's quantisation."""
    import numpy as np

    model = int8_concat.read_bytes()
    ((_, sg, op),) = operators(model, ("LOGISTIC",))
    q = _quant(sg.Tensors(op.Outputs(0)))
    assert (q.Scale(0), q.ZeroPoint(0)) == (1 / 256, -128)
    fixed = _set_scale_then_fix(model, q, 1 / 200, tmp_path, r"1\. / 256")  # the scale of what it feeds
    x = np.random.default_rng(0).random((1, 3, 32, 32), dtype=np.float32)
    for got, want in zip(_outputs(fixed, x), _outputs(int8_concat, x)):
        assert np.abs(got - want).max() <= 2 / 200  # the output's own grid, a step or two
