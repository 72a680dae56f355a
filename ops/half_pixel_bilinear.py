"""PyTorch's bilinear x2 (``align_corners=False``) from version-1 TFLite builtin ops.

With ``u`` the nearest-neighbour x2 upsample of ``in`` (``u[2i] = u[2i+1] = in[i]``), PyTorch's
half-pixel bilinear output is, per axis,

    out[2i]   = 0.25 in[i-1] + 0.75 in[i]   = 0.25 u[2i-1] + 0.5 u[2i]   + 0.25 u[2i+1]
    out[2i+1] = 0.75 in[i]   + 0.25 in[i+1] = 0.25 u[2i]   + 0.5 u[2i+1] + 0.25 u[2i+2]

with ``in`` clamped at the borders -- which is ``u`` with its edge replicated. So: nearest x2
(RESIZE_NEAREST_NEIGHBOR v1), replicate-pad by one (ONNX ``Pad`` mode ``edge``, which onnx2tf
emits as MIRROR_PAD ``SYMMETRIC`` v1), then a fixed 3x3 depthwise convolution with the
outer product of ``[1/4, 1/2, 1/4]`` (DEPTHWISE_CONV_2D v1). All three ran in TFLite 1.13.1,
and the kernel's weights are powers of two, so the arithmetic is exact up to float32 sums.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SMOOTH_1D = torch.tensor([0.25, 0.5, 0.25])


class HalfPixelBilinear2x(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.channels = int(channels)
        kernel = torch.outer(SMOOTH_1D, SMOOTH_1D).expand(self.channels, 1, 3, 3).clone()
        self.register_buffer("kernel", kernel, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = F.interpolate(x, scale_factor=2, mode="nearest")
        u = F.pad(u, (1, 1, 1, 1), mode="replicate")
        return F.conv2d(u, self.kernel.to(x.dtype), groups=self.channels)

    def extra_repr(self) -> str:
        return f"channels={self.channels}, ops=RESIZE_NEAREST_NEIGHBOR+MIRROR_PAD+DEPTHWISE_CONV_2D"
