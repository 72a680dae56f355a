from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from edgeport.convert.passes.fold_bn_pass import FoldBNPass, fold_batchnorm
from edgeport.errors import PassCheckError
from edgeport.models.inference import forward

from .conftest import config, prepared_record


def _bn_count(m):
    return sum(isinstance(x, nn.modules.batchnorm._BatchNorm) for x in m.modules())


def _rel_err(a, b):
    return max(float(np.abs(x - y).max() / np.abs(x).max()) for x, y in zip(forward(a, images_), forward(b, images_)))


images_ = np.random.default_rng(1).random((2, 3, 64, 64), dtype=np.float32)


def test_folds_every_bn_of_the_detector_exactly(pdet_n):
    folded, n, method = fold_batchnorm(pdet_n)
    assert (n, method) == (23, "fx")
    assert _bn_count(folded) == 0 and _bn_count(pdet_n) == 23  # original untouched
    assert _rel_err(pdet_n, folded) < 1e-5


class AttrStyle(nn.Module):
    """YOLO-style: conv and bn are attributes called in forward, not a Sequential."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.lone_bn = nn.BatchNorm2d(8)  # follows a ReLU, not a conv: must stay
        self.conv2 = nn.Conv2d(8, 8, 1)
        self.bn2 = nn.BatchNorm2d(8)

    def forward(self, x):
        y = self.bn(self.conv(x))
        z = self.lone_bn(torch.relu(y))
        c = self.conv2(z)
        return self.bn2(c) + c  # conv2 feeds two users: folding would change the sum


def test_attribute_style_and_bn_without_conv(make_bn_stats):
    model = make_bn_stats(AttrStyle()).eval()
    folded, n, _ = fold_batchnorm(model)
    assert n == 1
    assert _bn_count(folded) == 2
    assert _rel_err(model, folded) < 1e-5


class Untraceable(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())

    def forward(self, x):
        if x.sum() > -1e9:  # data-dependent control flow: fx cannot trace it
            return self.body(x)
        return x


def test_an_untraceable_model_is_folded_block_by_block(make_bn_stats):
    model = make_bn_stats(Untraceable()).eval()
    folded, n, method = fold_batchnorm(model)
    assert (n, method) == (1, "fx per block")
    assert _rel_err(model, folded) < 1e-5


class Conv(nn.Module):
    """Ultralytics' block: conv and bn attributes, act(bn(conv(x))); its layer index in ``i``."""

    def __init__(self, c1, c2, i):
        super().__init__()
        self.conv, self.bn, self.act, self.i = nn.Conv2d(c1, c2, 3, padding=1, bias=False), nn.BatchNorm2d(c2), nn.SiLU(), i

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class LayerLoop(nn.Module):
    """Ultralytics' model: a loop over layers reading their attributes, which fx cannot trace."""

    def __init__(self):
        super().__init__()
        self.model = nn.ModuleList([Conv(3, 8, 0), Conv(8, 8, 1)])

    def forward(self, x):
        for m in self.model:
            x = m(x) if x.shape[1] > 0 and m.i < len(self.model) else x  # a tensor in a branch: untraceable
        return x


def test_a_layer_loop_model_keeps_its_classes_and_attributes(make_bn_stats):
    model = make_bn_stats(LayerLoop()).eval()
    folded, n, method = fold_batchnorm(model)
    assert (n, method) == (2, "fx per block") and _bn_count(folded) == 0
    assert all(type(m) is Conv and m.i == i for i, m in enumerate(folded.model))  # folded in place, not replaced
    assert _rel_err(model, folded) < 1e-5


class BatchNormAct(nn.BatchNorm2d):
    """timm's BatchNormAct2d: a BatchNorm with its dropout and activation inside."""

    def __init__(self, c):
        super().__init__(c)
        self.drop, self.act = nn.Identity(), nn.Hardswish()

    def forward(self, x):
        return self.act(self.drop(super().forward(x)))


class Odd(nn.BatchNorm2d):
    def forward(self, x):
        return super().forward(x) * 2.0


def test_norm_act_layers_fold_keeping_their_activation_and_unknown_subclasses_stay(make_bn_stats):
    model = make_bn_stats(nn.Sequential(nn.Conv2d(3, 8, 3), BatchNormAct(8), nn.Conv2d(8, 8, 1), Odd(8))).eval()
    folded, n, _ = fold_batchnorm(model)
    assert n == 1 and isinstance(folded[1], nn.Sequential) and isinstance(folded[1][1], nn.Hardswish)
    assert isinstance(folded[3], Odd)  # a subclass doing something else is left, and stays correct
    assert _rel_err(model, folded) < 1e-5


class SharedConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 3, 1), nn.BatchNorm2d(3)

    def forward(self, x):
        return self.bn(self.conv(x)) + self.conv(x)  # one conv module called twice


def test_a_conv_called_twice_is_not_folded(make_bn_stats):
    model = make_bn_stats(SharedConv()).eval()
    folded, n, _ = fold_batchnorm(model)
    assert n == 0 and _rel_err(model, folded) < 1e-6


def _folded_row(reference, folded, images, tmp_path):
    """The folded model's parity row against ``reference``: where the fold's numbers are judged."""
    from edgeport.validate.parity.run import ParitySubject, run_parity

    subject = ParitySubject(reference_module=reference, folded_module=folded, onnx_path=None, tflite={}, output_names=("p3", "p4", "p5"),
                            strides=(8, 16, 32), inputs=images, inputs_source="test", workdir=tmp_path, head="pdet")
    (row,) = [r for r in run_parity(subject, divergence=False).rows if r.variant == "folded"]
    return row


def test_a_wrong_fold_is_a_failed_row_with_its_numbers_not_a_stop(pdet_n, tmp_path):
    """The pass checks what it must keep (no pair left, the outputs' shapes and NaN); how far the
    numbers moved is the folded row's to judge, against 1e-5 of each output's largest value."""
    prepared, cfg = prepared_record(tmp_path, pdet_n, images_), config(tmp_path)
    p = FoldBNPass()
    result = p.run(prepared, cfg)
    p.check(prepared, result.value, cfg)
    assert _folded_row(pdet_n, result.value.module, images_, tmp_path).passed
    wrong = result.value.module
    with torch.no_grad():
        wrong.get_submodule("backbone.stem.0").bias.add_(0.1)  # a dropped/shifted bias
    p.check(prepared, result.value, cfg)  # no stop
    row = _folded_row(pdet_n, wrong, images_, tmp_path)
    assert not row.passed and any("x max|ref|" in why for o in row.outputs for why in o["reasons"]), row.outputs


class _Rounding(torch.nn.Module):
    """An output float32 itself rounds far from float64 on: 1 + s - 1 for a tiny s."""

    def forward(self, x):
        small = x.mean(dim=(1, 2, 3), keepdim=True) * 1e-6
        return ((1.0 + small) - 1.0).expand(-1, 1, 4, 4).contiguous()


def test_an_exact_rewrite_that_float32_rounds_passes_on_float32s_own_error(tmp_path):
    """A folded model that computes the reference's function exactly, where float32 itself errs by
    more than 1e-5 of the output's largest value on one output group: within float32's own error
    (measured in float64), the row passes; the same error on a model that computes something else fails."""
    from edgeport.validate.parity.compare import FLOAT32_ERROR, FOLDED, Tolerance, compare_tensors

    x = np.random.default_rng(3).random((2, 3, 4, 4), dtype=np.float32)
    with torch.no_grad():
        ref = _Rounding()(torch.from_numpy(x)).numpy()
        exact = (torch.from_numpy(x).double().mean(dim=(1, 2, 3), keepdim=True) * 1e-6).numpy()
    err = np.abs(ref - exact.astype(np.float64))
    assert err.max() > FOLDED.max_abs_rel * np.abs(ref).max(), "float32 rounds this output further than the relative tolerance"
    from edgeport.models.inference import float32_error

    (own,) = float32_error(_Rounding(), x, [ref])
    assert own.max() == pytest.approx(err.max(), rel=1e-3)
    off = ref + err.max()  # as far again as float32 errs: within twice its own error
    within = Tolerance(FOLDED.max_abs_rel, FOLDED.min_cosine, FLOAT32_ERROR * float(own.max()))
    assert compare_tensors("y", ref, off, within).passed and not compare_tensors("y", ref, off, FOLDED).passed
    off = off + 2 * err.max()  # beyond it
    assert not compare_tensors("y", ref, off, within).passed


def test_check_catches_unfolded_pairs(pdet_n, tmp_path):
    prepared = prepared_record(tmp_path, pdet_n, images_)
    with pytest.raises(PassCheckError, match="were not folded"):
        FoldBNPass().check(prepared, prepared, config(tmp_path))


def test_a_fold_that_breaks_is_an_error_not_a_fold_of_nothing(monkeypatch):
    """Only fx's trace may fail into folding block by block: a failure in the fold itself (torch 2.4
    lacking nn.Module.set_submodule was one) is raised, never reported as nothing to fold."""
    from edgeport.convert.passes import fold_bn_pass

    def broken(module, name, new):
        raise AttributeError("set_submodule")

    monkeypatch.setattr(fold_bn_pass, "_set_submodule", broken)
    with pytest.raises(AttributeError, match="set_submodule"):
        fold_batchnorm(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)))
