from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from torch import nn

from edgeport.convert.passes.rewrite_pools_pass import CeilPoolExact, RewritePoolsPass, overhang, rewrite_ceil_pools

from .conftest import config, prepared_record


@pytest.mark.parametrize("kernel, stride", [(3, 2), (2, 2), (3, 3), (5, 3), (3, 1), ((3, 2), (2, 1))])
def test_a_ceil_mode_pool_is_a_floor_mode_pool_of_the_input_with_its_edge_repeated(kernel, stride):
    """Every size from 5 to 24, on values all below zero (where a zero pad would win): bit for bit."""
    pool = nn.MaxPool2d(kernel, stride, ceil_mode=True)
    exact = CeilPoolExact(pool)
    for h, w in itertools.product(range(5, 25), (5, 11, 24)):
        x = -torch.rand(2, 3, h, w) - 0.5
        assert torch.equal(exact(x), pool(x)), (h, w)


def test_the_overhang_follows_pytorchs_rule_that_a_last_window_starts_inside():
    assert overhang(46, 3, 2) == 1  # O-Net's first pool: 23 windows where floor-mode gives 22
    assert overhang(21, 3, 2) == 0 and overhang(8, 2, 2) == 0  # its others: no window more
    assert overhang(5, 2, 2) == 1 and overhang(4, 3, 3) == 2


class OnetLike(nn.Module):
    """PReLU before ceil-mode pools (MTCNN's R-Net and O-Net), one nested, one padded (left as it is)."""

    def __init__(self):
        super().__init__()
        self.conv, self.act = nn.Conv2d(3, 4, 3), nn.PReLU(4, init=0.5)
        self.pool = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.block = nn.Sequential(nn.Conv2d(4, 4, 1), nn.MaxPool2d(2, 2, ceil_mode=True))
        self.padded = nn.MaxPool2d(3, 1, padding=1, ceil_mode=True)
        self.dilated = nn.MaxPool2d(2, 1, dilation=2, ceil_mode=True)

    def forward(self, x):
        return self.dilated(self.padded(self.block(self.pool(self.act(self.conv(x) - 1.0)))))


def test_the_pass_rewrites_each_ceil_mode_pool_and_its_check_holds_the_outputs_to_the_bit(tmp_path):
    module = OnetLike().eval()
    calib = np.random.default_rng(0).random((2, 3, 48, 48), dtype=np.float32)
    before = prepared_record(tmp_path, module, calib, output_names=("out",), strides=(0,))
    step = RewritePoolsPass()
    result = step.run(before, config(tmp_path))
    step.check(before, result.value, config(tmp_path))
    assert result.changed and result.summary.startswith("2 ceil-mode max pools") and "pool, block.1" in result.summary
    rewritten = result.value.module
    assert isinstance(rewritten.pool, CeilPoolExact) and isinstance(rewritten.block[1], CeilPoolExact)
    assert isinstance(rewritten.padded, nn.MaxPool2d) and isinstance(rewritten.dilated, nn.MaxPool2d), "padded and dilated pools stay"
    assert isinstance(module.pool, nn.MaxPool2d), "the model given is not changed"
    x = torch.from_numpy(calib)
    with torch.no_grad():
        assert torch.equal(rewritten(x), module(x))
    plain = nn.Sequential(nn.Conv2d(3, 4, 3), nn.MaxPool2d(2)).eval()
    assert rewrite_ceil_pools(plain) == (plain, [])
