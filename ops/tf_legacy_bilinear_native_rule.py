"""edgeport's ``BoardUpsample`` (TF 1.13 semantics): keep RESIZE_BILINEAR version 1.

A model trained with the board's upsample exports it as an asymmetric ``Resize``; the
board's own version-1 resize computes exactly those values.
"""

from __future__ import annotations

from torch import nn

from edgeport.ops.base import UpsampleRule, UpsampleSpec
from edgeport.ops.board_upsample import BoardUpsample


class TFLegacyBilinearNativeRule(UpsampleRule):
    name = "tf_legacy_bilinear_native"
    what = "BoardUpsample (TF 1.13 bilinear), integer factor"
    requires = {"RESIZE_BILINEAR": 1}
    native = True

    def matches(self, spec: UpsampleSpec) -> bool:
        return spec.mode == "tf_legacy_bilinear" and spec.integer_scale is not None

    def build(self, spec: UpsampleSpec) -> nn.Module:
        return BoardUpsample(spec.integer_scale, align_corners=False)
