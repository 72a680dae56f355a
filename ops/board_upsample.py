"""A board-semantics upsample: TensorFlow Lite 1.13's bilinear resize, as a PyTorch module.

The write-up's own fix was to train with the board's upsample. TF 1.13's RESIZE_BILINEAR
(no half-pixel centres) samples input position ``x * in / out`` -- for an integer factor
``s``, ``x / s`` -- with the lower neighbour ``floor`` and the upper ``min(ceil, in - 1)``,
and interpolates as ``top + (bottom - top) * lerp`` per axis. PyTorch's bilinear upsample
with ``align_corners=False`` samples ``(x + 0.5) / s - 0.5`` instead: a quarter-pixel shift
at ``s = 2``. ``BoardUpsample`` computes the board's values, is differentiable, and exports
to ONNX as ``Resize(mode=linear, coordinate_transformation_mode=asymmetric)``, which onnx2tf
turns into RESIZE_BILINEAR version 1 -- the op the board runs natively, with the same values.
``align_corners=True`` is the same in TF 1.13 and PyTorch, so that variant is plain PyTorch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _axis(in_size: int, scale: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    in_size, out = int(in_size), int(in_size) * scale
    # float32 like the kernel: in_y = y * (in / out)
    src = torch.arange(out, device=device, dtype=torch.float32) * (float(in_size) / float(out))
    lo = torch.floor(src)
    hi = torch.clamp(torch.ceil(src), max=in_size - 1)
    return lo.long(), hi.long(), src - lo


def asymmetric_bilinear(x: torch.Tensor, scale: int) -> torch.Tensor:
    """TF 1.13 RESIZE_BILINEAR (align_corners=False, half_pixel_centers=False) by an integer factor."""
    h, w = x.shape[-2:]
    y0, y1, ly = _axis(h, scale, x.device)
    x0, x1, lx = _axis(w, scale, x.device)
    top_l, top_r = x[..., y0, :][..., x0], x[..., y0, :][..., x1]
    bot_l, bot_r = x[..., y1, :][..., x0], x[..., y1, :][..., x1]
    lx = lx.to(x.dtype)
    ly = ly.to(x.dtype).view(-1, 1)
    top = top_l + (top_r - top_l) * lx
    bottom = bot_l + (bot_r - bot_l) * lx
    return top + (bottom - top) * ly


class _AsymmetricResize(torch.autograd.Function):
    """Used only while exporting: emits one ONNX Resize node instead of gathers."""

    @staticmethod
    def forward(ctx, x, scale: int):
        return asymmetric_bilinear(x, scale)

    @staticmethod
    def symbolic(g, x, scale: int):
        roi = g.op("Constant", value_t=torch.tensor([], dtype=torch.float32))
        scales = g.op("Constant", value_t=torch.tensor([1.0, 1.0, float(scale), float(scale)], dtype=torch.float32))
        return g.op("Resize", x, roi, scales, coordinate_transformation_mode_s="asymmetric", mode_s="linear")


class BoardUpsample(nn.Module):
    """Bilinear upsampling by an integer factor with TFLite 1.13's semantics."""

    def __init__(self, scale_factor: int = 2, align_corners: bool = False):
        super().__init__()
        if int(scale_factor) != scale_factor or scale_factor < 1:
            raise ValueError(f"BoardUpsample needs a positive integer scale_factor, got {scale_factor}")
        self.scale_factor = int(scale_factor)
        self.align_corners = bool(align_corners)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.align_corners:
            # TF's align_corners=True maps x to x * (in - 1) / (out - 1), exactly like PyTorch
            return F.interpolate(x, scale_factor=self.scale_factor, mode="bilinear", align_corners=True)
        if torch.onnx.is_in_onnx_export():
            return _AsymmetricResize.apply(x, self.scale_factor)
        return asymmetric_bilinear(x, self.scale_factor)

    def extra_repr(self) -> str:
        return f"scale_factor={self.scale_factor}, align_corners={self.align_corners}, semantics=tflite-1.13"
