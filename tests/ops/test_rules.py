"""What each upsample becomes per board, the one rewrite (--legacy-resize), and the sites found:
structural (which modules remain) and equivalence over a table of variants."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from edgeport.convert.passes.rewrite_upsample_pass import rewrite_graph
from edgeport.ops.board_upsample import BoardUpsample
from edgeport.ops.upsample import UnsupportedUpsampleError, UpsampleSpec, decide
from edgeport.validate.board.profiles import load_board

OLD, MODERN, MCU = load_board("tflite-1.13"), load_board("default"), load_board("tflm-m4-256k")


def spec(mode, scale, align_corners=False, channels=4):
    return UpsampleSpec("m.up", mode, (float(scale), float(scale)), align_corners, channels)


@pytest.mark.parametrize(
    "s, board, rule, rewritten",
    [
        (spec("nearest", 2), OLD, "nearest_native", False),
        (spec("nearest", 3), OLD, "nearest_native", False),
        (spec("bilinear", 2, True), OLD, "bilinear_align_corners_native", False),
        (spec("bilinear", 3, True), OLD, "bilinear_align_corners_native", False),
        # kept in PyTorch, lowered after conversion (ops/lowering/resize_bilinear_half_pixel.py)
        (spec("bilinear", 2), OLD, "bilinear_half_pixel_lowered", False),
        (spec("bilinear", 3), OLD, "bilinear_half_pixel_lowered", False),
        (spec("bilinear", 2), MODERN, "bilinear_half_pixel_native", False),
        (spec("bilinear", 4), MODERN, "bilinear_half_pixel_native", False),
        (spec("bilinear", 2), MCU, "bilinear_half_pixel_native", False),
        (spec("tf_legacy_bilinear", 2), OLD, "tf_legacy_bilinear_native", False),
    ],
)
def test_decisions_per_board(s, board, rule, rewritten):
    d = decide(s, board)
    assert (d.rule, d.rewritten, d.exact) == (rule, rewritten, True)


def test_legacy_resize_is_chosen_only_when_asked():
    legacy = decide(spec("bilinear", 2), OLD, legacy_resize=True)
    assert (legacy.rule, legacy.rewritten, legacy.exact) == ("legacy_resize", True, False)
    assert isinstance(legacy.module, BoardUpsample)
    assert decide(spec("nearest", 2), OLD, legacy_resize=True).rule == "nearest_native"
    assert decide(spec("bilinear", 2, True), OLD, legacy_resize=True).rule == "bilinear_align_corners_native"


@pytest.mark.parametrize(
    "s, needle",
    [
        (spec("bilinear", 1.5), "bilinear x1.5x1.5, align_corners=False has no exact form in TFLite"),
        (spec("bicubic", 2), "bicubic x2x2"),
        (spec("nearest", 1.5), "nearest x1.5x1.5"),
    ],
)
def test_unsupported_upsample_names_site_mode_factor_and_choices(s, needle):
    with pytest.raises(UnsupportedUpsampleError) as info:
        decide(s, OLD)
    msg = str(info.value)
    assert needle in msg and "m.up" in msg and "by an integer factor" in msg and "BoardUpsample" in msg


def test_a_half_pixel_x1_on_a_board_without_half_pixel_centres_is_refused():
    """The lowering rewrites a factor of 2 or more; a modern runtime keeps any integer factor."""
    with pytest.raises(UnsupportedUpsampleError, match="no half-pixel centres"):
        decide(spec("bilinear", 1), OLD)
    assert decide(spec("bilinear", 1), MODERN).rule == "bilinear_half_pixel_native"


class Functional(nn.Module):
    """Upsampling written as F.interpolate calls, one with size=, none as modules."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.inner = nn.Sequential(nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False))

    def forward(self, x):
        y = self.conv(x)
        a = F.interpolate(y, scale_factor=2, mode="bilinear", align_corners=False)
        b = F.interpolate(y, size=(y.shape[2] * 2, y.shape[3] * 2), mode="nearest")
        c = self.inner(y)
        d = F.interpolate(y, scale_factor=2, mode="bilinear", align_corners=True)
        return a + b + c + d


def _rel(a, b):
    return float((a - b).abs().max() / a.abs().max())


@pytest.mark.parametrize("hw", [(6, 6), (5, 7)])
def test_rewrite_finds_functional_and_nested_sites(hw):
    torch.manual_seed(0)
    model = Functional().eval()
    x = torch.randn(2, 3, *hw)
    new, decisions, how = rewrite_graph(model, x[:1], OLD, legacy_resize=False)
    assert how == "fx graph"
    assert sorted(d.rule for d in decisions) == [
        "bilinear_align_corners_native", "bilinear_half_pixel_lowered", "bilinear_half_pixel_lowered", "nearest_native"]
    assert not any(d.rewritten for d in decisions)  # the board lowering rewrites the converted file instead
    with torch.no_grad():
        assert _rel(model(x), new(x)) == 0.0
    legacy, decisions, _ = rewrite_graph(model, x[:1], OLD, legacy_resize=True)
    assert sum(isinstance(m, BoardUpsample) for m in legacy.modules()) == 2  # --legacy-resize: the bug, on purpose
    # on a modern runtime nothing needs rewriting
    same, decisions, _ = rewrite_graph(model, x[:1], MODERN, legacy_resize=False)
    assert not any(d.rewritten for d in decisions)


class Untraceable(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Upsample(scale_factor=2, mode="bilinear")

    def forward(self, x):
        if x.mean() > -1e9:  # data-dependent: fx cannot trace it
            return self.up(x)
        return x


def test_untraceable_model_still_has_its_modules_found():
    model = Untraceable().eval()
    x = torch.randn(1, 4, 5, 5)
    new, decisions, how = rewrite_graph(model, x, OLD, legacy_resize=False)
    assert how.startswith("modules") and [d.rule for d in decisions] == ["bilinear_half_pixel_lowered"]
    legacy, _, _ = rewrite_graph(model, x, OLD, legacy_resize=True)
    assert isinstance(legacy.up, BoardUpsample)


class ReadsItsModules(nn.Module):
    """A forward that reads attributes of its upsample module, as Ultralytics' does (``m.f``, ``m.i``):
    a rule that swapped the module for another would break it."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.up = nn.Upsample(scale_factor=2, mode="bilinear")
        self.up.f, self.up.i = -1, 7

    def forward(self, x):
        y = self.conv(x)
        assert self.up.f == -1 and self.up.i == 7
        return self.up(y)


def test_a_forward_that_reads_its_upsample_modules_attributes_still_runs():
    model = ReadsItsModules().eval()
    x = torch.randn(1, 3, 6, 6)
    new, decisions, _ = rewrite_graph(model, x, OLD, legacy_resize=False)
    with torch.no_grad():
        assert _rel(model(x), new(x)) == 0.0
