"""Bilinear with ``align_corners=False`` on a runtime that has half-pixel centres.

RESIZE_BILINEAR version 3 (``half_pixel_centers``, runtime 2.2.0 and later) samples
``(x + 0.5) * in / out - 0.5`` like PyTorch; there the native op is kept.
"""

from __future__ import annotations

from torch import nn

from edgeport.ops.base import UpsampleRule, UpsampleSpec


class BilinearHalfPixelNativeRule(UpsampleRule):
    name = "bilinear_half_pixel_native"
    what = "bilinear, align_corners=False, integer factor"
    requires = {"RESIZE_BILINEAR": 3}
    note = "half_pixel_centers, runtime >= 2.2.0"
    native = True

    def matches(self, spec: UpsampleSpec) -> bool:
        return spec.mode == "bilinear" and not spec.align_corners and spec.integer_scale is not None

    def build(self, spec: UpsampleSpec) -> nn.Module:
        return nn.Upsample(scale_factor=spec.integer_scale, mode="bilinear", align_corners=False)
