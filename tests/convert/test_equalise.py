"""Cross-layer equalisation and bias correction (convert/equalise.py): the same function, with weight
ranges a per-tensor grid can hold, and biases that take the weights' rounding off the output's mean."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from edgeport.convert.equalise import conv_pairs, correct_biases, equalise, quantise_weights


class Chain(nn.Module):
    def __init__(self, act: nn.Module, pool: bool = True):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.act, self.b = nn.Conv2d(3, 8, 3, padding=1), act, nn.Conv2d(8, 4, 1)
        self.pool = nn.MaxPool2d(2) if pool else nn.Identity()
        with torch.no_grad():  # one output channel of the first 100x the others, its input channel of the second 1/100
            self.a.weight[0].mul_(100)
            self.a.bias[0].mul_(100)
            self.b.weight[:, 0].div_(100)

    def forward(self, x):
        return self.b(self.pool(self.act(self.a(x))))


@pytest.mark.parametrize("act", [nn.ReLU(), nn.LeakyReLU(0.1), nn.PReLU(8), nn.Identity()])
def test_a_pair_through_a_homogeneous_activation_is_equalised_exactly(act):
    model = Chain(act).eval()
    assert conv_pairs(model) == [("a", "b")]
    x = torch.rand(4, 3, 16, 16)
    done = equalise(model, x, per_channel=False, biases=False)
    assert done.pairs == 1 and done.biases == 0
    with torch.no_grad():
        torch.testing.assert_close(done.module(x), model(x), rtol=1e-5, atol=1e-5)
        # a per-tensor grid on the first convolution: its small channels were rounded to nothing
        def grid_error(m):
            w = m.a.weight
            return float(((quantise_weights(w, per_channel=False) - w).abs().amax(dim=(1, 2, 3)) /
                          w.abs().amax(dim=(1, 2, 3))).max())
        assert grid_error(done.module) < 0.1 < grid_error(model)
        r = done.module.a.weight.abs().amax(dim=(1, 2, 3)), done.module.b.weight.abs().amax(dim=(0, 2, 3))
        torch.testing.assert_close(r[0], r[1])  # each channel's range, the same on both sides


@pytest.mark.parametrize("act", [nn.ReLU6(), nn.SiLU()])
def test_an_activation_that_is_not_homogeneous_is_no_pair(act):
    assert conv_pairs(Chain(act).eval()) == []


def test_a_convolution_whose_output_is_read_twice_is_no_pair():
    class Two(Chain):
        def forward(self, x):
            y = self.act(self.a(x))
            return self.b(y) + y[:, :4]

    assert conv_pairs(Two(nn.ReLU()).eval()) == []


def test_bias_correction_takes_the_weights_rounding_off_the_outputs_mean():
    torch.manual_seed(1)
    conv = nn.Conv2d(8, 6, 3).eval()
    with torch.no_grad():
        conv.weight.mul_(torch.linspace(0.05, 3, 6).view(6, 1, 1, 1))  # per-tensor: the small channels round coarsely
    x = torch.rand(16, 8, 12, 12) + 0.5  # inputs with a mean far from 0: the rounding shifts the output's mean
    corrected = nn.Conv2d(8, 6, 3).eval()
    corrected.load_state_dict(conv.state_dict())
    assert correct_biases(corrected, x, per_channel=False) == 1

    def mean_shift(m):  # the quantised weights' output against the float model's, per channel, on average
        q = nn.Conv2d(8, 6, 3).eval()
        q.load_state_dict(m.state_dict())
        with torch.no_grad():
            q.weight.copy_(quantise_weights(m.weight, per_channel=False))
            return float((q(x) - conv(x)).mean(dim=(0, 2, 3)).abs().max())

    assert mean_shift(corrected) < 0.1 * mean_shift(conv)
