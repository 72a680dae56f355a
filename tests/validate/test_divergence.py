from __future__ import annotations

import numpy as np

from edgeport.validate.parity.divergence import Tensor, locate


def _t(name, value, op="Conv"):
    return Tensor(name, op, np.asarray(value, np.float32))


def test_first_unmatched_reference_tensor_is_the_divergence():
    rng = np.random.default_rng(0)
    a, b, c = (rng.normal(size=(1, 2, 3, 3)) for _ in range(3))
    reference = [_t("conv1", a), _t("up", b, "Resize"), _t("conv2", c)]
    # candidates in another order, names lost; the resize computed differently, conv2 broken downstream
    candidates = [_t("x/conv2", c + 1.0), _t("x/resize", b + 0.05, "RESIZE_BILINEAR"), _t("x/conv1", a)]
    d = locate(reference, candidates, max_abs_rel=1e-4, min_cosine=None)
    assert d.found and d.first.reference == "up" and d.first.candidate == "x/resize"
    assert [e.ok for e in d.curve] == [True, False, False]


def test_no_divergence_when_every_tensor_is_reproduced_and_unmatched_shapes_are_skipped():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(1, 2, 4, 4))
    reference = [_t("a", a), _t("only_in_reference", rng.normal(size=(1, 5, 5, 5)))]
    d = locate(reference, [_t("pad", rng.normal(size=(1, 2, 6, 6))), _t("a2", a + 1e-9)], max_abs_rel=1e-4, min_cosine=None)
    assert not d.found and len(d.curve) == 1


def test_int8_criterion_uses_cosine():
    rng = np.random.default_rng(2)
    a = rng.normal(size=(1, 4, 4, 4))
    noisy = a + rng.normal(scale=0.02, size=a.shape)
    assert not locate([_t("a", a)], [_t("q", noisy)], max_abs_rel=None, min_cosine=0.99).found
    assert locate([_t("a", a)], [_t("q", rng.normal(size=a.shape))], max_abs_rel=None, min_cosine=0.99).found


def test_intermediates_of_every_dtype_are_handled(tmp_path):
    """A graph with Shape (int64) and a float path: ONNX Runtime runs it, only floats come back."""
    import torch

    from edgeport.validate.parity.divergence import onnx_intermediates

    class WithShape(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x):
            y = torch.sigmoid(self.conv(x))
            return y.reshape(x.shape[0], 4, x.shape[2], -1) * 2.0  # Shape, Gather, Concat: int64 intermediates

    path = tmp_path / "m.onnx"
    torch.onnx.export(WithShape().eval(), torch.zeros(1, 3, 8, 8), str(path), opset_version=17, dynamo=False,
                      input_names=["images"], dynamic_axes={"images": {0: "n"}})
    import onnx

    assert "Shape" in {n.op_type for n in onnx.load(str(path)).graph.node}
    tensors = onnx_intermediates(path, np.zeros((1, 3, 8, 8), np.float32))
    assert tensors and all(t.value.dtype == np.float32 and t.value.ndim == 4 for t in tensors)
    assert {t.op_type for t in tensors} >= {"Conv", "Sigmoid"}
