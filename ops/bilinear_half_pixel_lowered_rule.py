"""Bilinear with ``align_corners=False`` on a runtime without half-pixel centres (TFLite 1.x).

Kept as it is here: the converter writes RESIZE_BILINEAR with half-pixel centres, and the board
lowering rewrites that op after conversion into the board's own version-1 resize, shifted
(``ops/lowering/resize_bilinear_half_pixel.py``, with the proof, for any integer factor). Nothing
of the model's modules is replaced, so a forward that reads its modules' attributes (as
Ultralytics' does) runs unchanged.
"""

from __future__ import annotations

from torch import nn

from edgeport.ops.base import UpsampleRule, UpsampleSpec


class BilinearHalfPixelLoweredRule(UpsampleRule):
    name = "bilinear_half_pixel_lowered"
    what = "bilinear, align_corners=False, integer factor"
    requires = {"RESIZE_BILINEAR": 1, "STRIDED_SLICE": 1, "CONCATENATION": 1, "DEPTHWISE_CONV_2D": 1}
    note = "lowered after conversion, exact: ops/lowering/resize_bilinear_half_pixel.py"
    native = True  # the module stays; the file is rewritten

    def matches(self, spec: UpsampleSpec) -> bool:
        return spec.mode == "bilinear" and not spec.align_corners and spec.integer_scale is not None \
            and spec.integer_scale >= 2

    def build(self, spec: UpsampleSpec) -> nn.Module:
        return nn.Upsample(scale_factor=spec.integer_scale, mode="bilinear", align_corners=False)
