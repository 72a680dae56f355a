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


CEIL_NET = '''
import torch
from torch import nn


class CeilNet(nn.Module):
    """O-Net's first blocks: PReLUs, then ceil-mode pools whose last windows hold negative values."""

    def __init__(self):
        super().__init__()
        self.conv1, self.act1, self.pool1 = nn.Conv2d(3, 32, 3), nn.PReLU(32), nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2, self.act2, self.pool2 = nn.Conv2d(32, 64, 3), nn.PReLU(64), nn.MaxPool2d(3, 2, ceil_mode=True)
        self.head = nn.Conv2d(64, 4, 1)

    def forward(self, x):
        x = self.pool1(self.act1(self.conv1((x * 255.0 - 127.5) * 0.0078125)))
        return self.head(self.pool2(self.act2(self.conv2(x))))
'''


@pytest.mark.slow  # a real conversion, onnx2tf and TFLite
def test_a_ceil_mode_pool_after_a_prelu_converts_to_a_file_that_computes_it(tmp_path, cli):
    """For the old board (onnx2tf 1.28, quantised per tensor) a ceil-mode pool's overhang comes out
    padded with zeros, which win over the PReLU's negative values, and even the float32 file
    computes something else (measured: output max |error| 3 % of its range). Rewritten, every file
    computes what PyTorch computes on every row, the real TFLite 1.13.1's included where installed."""
    import json

    (tmp_path / "ceil_net.py").write_text(CEIL_NET)
    ckpt = tmp_path / "ceil.pt"
    import importlib.util

    spec = importlib.util.spec_from_file_location("ceil_net", tmp_path / "ceil_net.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    torch.save({"model": mod.CeilNet().state_dict()}, ckpt)
    out = tmp_path / "out"
    proc = cli("convert", str(ckpt), "--arch", "ceil_net:CeilNet", "--imgsz", "48", "--head", "raw", "--board", "tflite-1.13",
               "--out", str(out),
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "2 ceil-mode max pools as floor-mode pools" in proc.stderr
    rows = [r for r in json.loads((out / "report.json").read_text())["results"] if r["variant"] == "float32"]
    assert rows and all(r["passed"] for r in rows)
