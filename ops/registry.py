"""The rule registry: a plain list, tried in order; the first rule that matches a site and
whose operators the board runs decides it. Native rules come first, so a board that
computes an upsample exactly keeps its own resize."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from edgeport.ops.base import UnsupportedUpsampleError, UpsampleRule, UpsampleSpec
from edgeport.ops.bilinear_align_corners_native_rule import BilinearAlignCornersNativeRule
from edgeport.ops.bilinear_half_pixel_lowered_rule import BilinearHalfPixelLoweredRule
from edgeport.ops.bilinear_half_pixel_native_rule import BilinearHalfPixelNativeRule
from edgeport.ops.legacy_resize_rule import LegacyResizeRule
from edgeport.ops.nearest_native_rule import NearestNativeRule
from edgeport.ops.tf_legacy_bilinear_native_rule import TFLegacyBilinearNativeRule

RULES: tuple[UpsampleRule, ...] = (
    NearestNativeRule(),
    BilinearAlignCornersNativeRule(),
    BilinearHalfPixelNativeRule(),
    TFLegacyBilinearNativeRule(),
    BilinearHalfPixelLoweredRule(),
)
LEGACY_RULES: tuple[UpsampleRule, ...] = (LegacyResizeRule(),)


@dataclass(frozen=True)
class Decision:
    spec: UpsampleSpec
    rule: UpsampleRule
    module: nn.Module

    @property
    def rewritten(self) -> bool:
        return not self.rule.native


def decide(spec: UpsampleSpec, board, *, legacy_resize: bool = False) -> Decision:
    rules = (LEGACY_RULES if legacy_resize else ()) + RULES
    for rule in rules:
        if rule.matches(spec) and rule.available(board):
            return Decision(spec, rule, rule.build(spec))
    supported = "; ".join(r.description for r in RULES if r.available(board))
    raise UnsupportedUpsampleError(
        f"upsample {spec.describe()} has no exact form on board {board.name}; supported there: {supported}"
    )
