"""Bilinear x2 with ``align_corners=False`` for runtimes without half-pixel centres.

Rewritten as the board's own bilinear x2 (no half-pixel centres), the first row and column
repeated, and a fixed 2x2 depthwise average (see ``half_pixel_bilinear.py`` for the proof):
all version-1 ops of TFLite 1.13.1.
"""

from __future__ import annotations

from torch import nn

from edgeport.ops.base import UpsampleRule, UpsampleSpec
from edgeport.ops.half_pixel_bilinear import HalfPixelBilinear2x


class BilinearHalfPixelX2Rule(UpsampleRule):
    name = "bilinear_half_pixel_x2"
    what = "bilinear x2, align_corners=False"
    requires = {"RESIZE_BILINEAR": 1, "STRIDED_SLICE": 1, "CONCATENATION": 1, "DEPTHWISE_CONV_2D": 1}
    note = "exact: see half_pixel_bilinear.py"

    def matches(self, spec: UpsampleSpec) -> bool:
        return spec.mode == "bilinear" and not spec.align_corners and spec.integer_scale == 2 and spec.channels is not None

    def build(self, spec: UpsampleSpec) -> nn.Module:
        return HalfPixelBilinear2x(spec.channels)
