"""Nearest, integer factor: keep RESIZE_NEAREST_NEIGHBOR.

PyTorch's nearest takes input index ``floor(x * in / out)``; TFLite's version-1 nearest
resize (no align_corners, no half-pixel centres) computes the same ``floor``.
"""

from __future__ import annotations

from torch import nn

from edgeport.ops.base import UpsampleRule, UpsampleSpec


class NearestNativeRule(UpsampleRule):
    name = "nearest_native"
    what = "nearest, integer factor"
    requires = {"RESIZE_NEAREST_NEIGHBOR": 1}
    note = "floors like PyTorch"
    native = True

    def matches(self, spec: UpsampleSpec) -> bool:
        return spec.mode == "nearest" and spec.integer_scale is not None

    def build(self, spec: UpsampleSpec) -> nn.Module:
        return nn.Upsample(scale_factor=spec.integer_scale, mode="nearest")
