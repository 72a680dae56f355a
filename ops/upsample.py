"""Upsampling sites, what each becomes, and the one rewrite of them there is.

Every upsample a TFLite runtime computes exactly stays as the converter writes it; where a board
lacks the resize (TFLite 1.13 has no half-pixel centres) the board lowering rewrites the file
(``ops/lowering/``). So no user module is replaced (a forward that reads its modules' attributes,
as Ultralytics' does, runs unchanged), and the board gate names what the lowering leaves.
Exact, by an integer factor:

- ``nearest``: RESIZE_NEAREST_NEIGHBOR floors ``x * in / out`` like PyTorch (a converter's
  half-pixel version is lowered: ``ops/lowering/resize_nearest_half_pixel.py``);
- ``bilinear``, ``align_corners=True``: RESIZE_BILINEAR samples ``x * (in-1) / (out-1)`` like
  PyTorch, in every version;
- ``bilinear``, ``align_corners=False``: RESIZE_BILINEAR v3's half-pixel centres (runtime 2.2.0
  and later; lowered, with the proof: ``ops/lowering/resize_bilinear_half_pixel.py``);
- ``BoardUpsample`` (``tf_legacy_bilinear``, TF 1.13's own bilinear): RESIZE_BILINEAR v1.

Any other upsample has no exact form and stops the conversion, naming it. The one rewrite is
``--legacy-resize``: half-pixel bilinear becomes ``BoardUpsample``, which is what older
converters wrote, so that validation can show the write-up's loss, on purpose.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from edgeport.errors import BadInputError
from edgeport.ops.board_upsample import BoardUpsample

EXACT = "nearest, bilinear (align_corners either way) or edgeport's BoardUpsample, by an integer factor"


class UnsupportedUpsampleError(BadInputError):
    """An upsample TFLite cannot compute exactly."""


@dataclass(frozen=True)
class UpsampleSpec:
    where: str  # module path or graph node name
    mode: str  # "nearest", "bilinear", "tf_legacy_bilinear"
    scale: tuple[float, float]  # output / input, per spatial axis
    align_corners: bool
    channels: int | None = None

    @property
    def integer_scale(self) -> int | None:
        sh, sw = self.scale
        return int(sh) if sh == sw and float(sh).is_integer() and sh >= 1 else None

    def describe(self) -> str:
        s = "x".join(f"{v:g}" for v in self.scale)
        ac = f", align_corners={self.align_corners}" if self.mode != "nearest" else ""
        return f"{self.where}: {self.mode} x{s}{ac}"


@dataclass(frozen=True)
class Decision:
    spec: UpsampleSpec
    rule: str  # how the site reaches the board, as the report names it (``upsample.sites[].rule``)
    module: nn.Module | None = None  # what replaces the site (``--legacy-resize`` only)

    @property
    def rewritten(self) -> bool:
        return self.module is not None

    @property
    def exact(self) -> bool:
        return self.rule != "legacy_resize"


def decide(spec: UpsampleSpec, board, *, legacy_resize: bool = False) -> Decision:
    """What ``spec`` becomes on ``board`` (whose ``max_op_version`` says whether it has
    half-pixel centres); ``UnsupportedUpsampleError`` where nothing computes it exactly."""
    factor = spec.integer_scale
    if factor is not None and spec.mode in ("nearest", "tf_legacy_bilinear"):
        return Decision(spec, f"{spec.mode}_native")
    if factor is not None and spec.mode == "bilinear":
        if spec.align_corners:
            return Decision(spec, "bilinear_align_corners_native")
        if legacy_resize:
            return Decision(spec, "legacy_resize", BoardUpsample(factor, align_corners=False))
        if board.max_op_version("RESIZE_BILINEAR") >= 3:
            return Decision(spec, "bilinear_half_pixel_native")
        if factor >= 2:  # what ops/lowering/resize_bilinear_half_pixel.py applies to
            return Decision(spec, "bilinear_half_pixel_lowered")
        raise UnsupportedUpsampleError(f"upsample {spec.describe()} has no exact form on board {board.name}, whose "
                                       f"RESIZE_BILINEAR has no half-pixel centres (lowered for a factor of 2 or more); "
                                       f"remove the x1 resize, or choose a board with RESIZE_BILINEAR v3")
    raise UnsupportedUpsampleError(f"upsample {spec.describe()} has no exact form in TFLite, which computes exactly "
                                   f"{EXACT}; export the model with one of those")
