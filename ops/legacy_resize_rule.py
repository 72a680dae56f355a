"""``--legacy-resize``: reproduce what older converters emitted, on purpose.

PyTorch's half-pixel bilinear becomes TF 1.13's asymmetric bilinear (RESIZE_BILINEAR v1,
``half_pixel_centers`` off). The model then runs on the old board -- and computes something
other than what was trained. This exists so validation can show that loss; it is never
chosen unless asked for.
"""

from __future__ import annotations

from torch import nn

from edgeport.ops.base import UpsampleRule, UpsampleSpec
from edgeport.ops.board_upsample import BoardUpsample


class LegacyResizeRule(UpsampleRule):
    name = "legacy_resize"
    what = "bilinear, align_corners=False"
    requires = {"RESIZE_BILINEAR": 1}
    note = "without half-pixel centres: inexact, for reproducing the bug"
    exact = False

    def matches(self, spec: UpsampleSpec) -> bool:
        return spec.mode == "bilinear" and not spec.align_corners and spec.integer_scale is not None

    def build(self, spec: UpsampleSpec) -> nn.Module:
        return BoardUpsample(spec.integer_scale, align_corners=False)
