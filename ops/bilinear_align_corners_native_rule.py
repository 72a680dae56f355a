"""Bilinear with ``align_corners=True``: keep RESIZE_BILINEAR (align_corners) version 1.

Both PyTorch and TFLite (since its first RESIZE_BILINEAR) sample ``x * (in-1) / (out-1)``.
"""

from __future__ import annotations

from torch import nn

from edgeport.ops.base import UpsampleRule, UpsampleSpec


class BilinearAlignCornersNativeRule(UpsampleRule):
    name = "bilinear_align_corners_native"
    what = "bilinear, align_corners=True, integer factor"
    requires = {"RESIZE_BILINEAR": 1}
    note = "align_corners samples like PyTorch"
    native = True

    def matches(self, spec: UpsampleSpec) -> bool:
        return spec.mode == "bilinear" and spec.align_corners and spec.integer_scale is not None

    def build(self, spec: UpsampleSpec) -> nn.Module:
        return nn.Upsample(scale_factor=spec.integer_scale, mode="bilinear", align_corners=True)
