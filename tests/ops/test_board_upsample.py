"""BoardUpsample against a direct NumPy port of TF 1.13's RESIZE_BILINEAR kernel."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from edgeport.ops.board_upsample import BoardUpsample


def tf113_resize_bilinear(x: np.ndarray, out_h: int, out_w: int, align_corners: bool = False) -> np.ndarray:
    """tensorflow/lite/kernels/internal/reference ResizeBilinear, TF 1.13 (NCHW here)."""
    n, c, h, w = x.shape
    sy = (h - 1) / (out_h - 1) if align_corners and out_h > 1 else h / out_h
    sx = (w - 1) / (out_w - 1) if align_corners and out_w > 1 else w / out_w
    out = np.zeros((n, c, out_h, out_w), np.float32)
    for y in range(out_h):
        in_y = np.float32(y * np.float32(sy))
        y0 = int(np.floor(in_y))
        y1 = min(int(np.ceil(in_y)), h - 1)
        for xx in range(out_w):
            in_x = np.float32(xx * np.float32(sx))
            x0 = int(np.floor(in_x))
            x1 = min(int(np.ceil(in_x)), w - 1)
            out[:, :, y, xx] = (
                x[:, :, y0, x0] * (1 - (in_y - y0)) * (1 - (in_x - x0))
                + x[:, :, y1, x0] * (in_y - y0) * (1 - (in_x - x0))
                + x[:, :, y0, x1] * (1 - (in_y - y0)) * (in_x - x0)
                + x[:, :, y1, x1] * (in_y - y0) * (in_x - x0)
            )
    return out


@pytest.mark.parametrize("scale", [2, 3, 4])
@pytest.mark.parametrize("shape", [(1, 1, 4, 4), (2, 3, 5, 7), (1, 2, 1, 3)])
@pytest.mark.parametrize("align_corners", [False, True])
def test_matches_tf113_kernel(scale, shape, align_corners):
    x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    got = BoardUpsample(scale, align_corners=align_corners)(torch.from_numpy(x)).numpy()
    ref = tf113_resize_bilinear(x, shape[2] * scale, shape[3] * scale, align_corners)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_differs_from_pytorch_half_pixel_by_a_quarter_pixel():
    x = torch.arange(4.0).view(1, 1, 1, 4)
    board = BoardUpsample(2)(x)[0, 0, 0]
    torch_hp = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)[0, 0, 0]
    # board samples x/2; PyTorch samples x/2 - 0.25 (clamped): a ramp shifted by a quarter
    assert board.tolist() == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.0]
    assert torch_hp.tolist() == [0.0, 0.25, 0.75, 1.25, 1.75, 2.25, 2.75, 3.0]


def test_is_differentiable():
    x = torch.randn(1, 2, 3, 3, requires_grad=True)
    BoardUpsample(2)(x).sum().backward()
    # every input pixel contributes; weights over the output sum to scale^2 per pixel on average
    assert x.grad is not None and torch.isclose(x.grad.sum(), torch.tensor(2 * 36.0))


def test_exports_as_one_asymmetric_linear_resize(tmp_path):
    import onnx

    path = tmp_path / "board.onnx"
    torch.onnx.export(BoardUpsample(2), (torch.randn(1, 3, 4, 5),), str(path), opset_version=17, dynamo=False)
    nodes = onnx.load(str(path)).graph.node
    (resize,) = [n for n in nodes if n.op_type == "Resize"]
    attrs = {a.name: a.s.decode() for a in resize.attribute if a.s}
    assert attrs == {"coordinate_transformation_mode": "asymmetric", "mode": "linear"}
    import onnxruntime as ort

    x = np.random.default_rng(1).normal(size=(1, 3, 4, 5)).astype(np.float32)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, {sess.get_inputs()[0].name: x})
    np.testing.assert_allclose(got, tf113_resize_bilinear(x, 8, 10), rtol=1e-5, atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(h=st.integers(1, 9), w=st.integers(1, 9), c=st.integers(1, 4), scale=st.integers(1, 4))
def test_property_any_shape(h, w, c, scale):
    x = np.random.default_rng(h * 100 + w).normal(size=(1, c, h, w)).astype(np.float32)
    np.testing.assert_allclose(BoardUpsample(scale)(torch.from_numpy(x)).numpy(), tf113_resize_bilinear(x, h * scale, w * scale), rtol=1e-5, atol=1e-5)
