from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from edgeport.convert.base import ConvertConfig, State
from edgeport.convert.fold_bn_pass import FoldBNPass, fold_batchnorm
from edgeport.errors import PassCheckError
from edgeport.models.inference import forward


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


def test_falls_back_to_sequential_scan(make_bn_stats):
    model = make_bn_stats(Untraceable()).eval()
    folded, n, method = fold_batchnorm(model)
    assert (n, method) == (1, "sequential")
    assert _rel_err(model, folded) < 1e-5


def test_check_catches_a_wrong_fold(pdet_n, tmp_path):
    state = State(ConvertConfig(checkpoint=tmp_path / "x", work_dir=tmp_path), module=pdet_n, calib=images_)
    p = FoldBNPass()
    result = p.run(state)
    p.check(state, result.state)
    wrong = result.state.module
    with torch.no_grad():
        wrong.get_submodule("backbone.stem.0").bias.add_(0.1)  # a dropped/shifted bias
    with pytest.raises(PassCheckError, match="changed by"):
        p.check(state, result.state)


def test_check_catches_unfolded_pairs(pdet_n, tmp_path):
    state = State(ConvertConfig(checkpoint=tmp_path / "x", work_dir=tmp_path), module=pdet_n, calib=images_)
    with pytest.raises(PassCheckError, match="were not folded"):
        FoldBNPass().check(state, state)
