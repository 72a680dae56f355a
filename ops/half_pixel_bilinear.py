"""PyTorch's bilinear x2 (``align_corners=False``) from version-1 TFLite builtin ops.

Let ``a`` be TF 1.13's own bilinear x2 (RESIZE_BILINEAR v1, no half-pixel centres; see
``board_upsample.py``): ``a[2i] = in[i]``, ``a[2i+1] = (in[i] + in[min(i+1, n-1)]) / 2``.
Averaging each sample with the one before it, ``out[x] = (a[x-1] + a[x]) / 2`` with
``a[-1] = a[0]``, gives, per axis,

    out[2i]   = ((in[i-1] + in[i]) / 2 + in[i]) / 2 = 0.25 in[i-1] + 0.75 in[i]
    out[2i+1] = (in[i] + (in[i] + in[i+1]) / 2) / 2 = 0.75 in[i]   + 0.25 in[i+1]

which is PyTorch's half-pixel bilinear, borders included (``out[0] = in[0]``,
``out[2n-1] = in[n-1]``, as PyTorch clamps). In 2-D: the board's resize, the first row
and column repeated (STRIDED_SLICE v1 + CONCATENATION v1), then a 2x2 depthwise average
(DEPTHWISE_CONV_2D v1, weights 1/4: exact in binary). Every op ran in TFLite 1.13.1, and
XNNPACK runs them all, so the rewrite stays fast on modern runtimes too.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from edgeport.ops.board_upsample import BoardUpsample


class HalfPixelBilinear2x(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.channels = int(channels)
        self.board_resize = BoardUpsample(2, align_corners=False)
        self.register_buffer("kernel", torch.full((self.channels, 1, 2, 2), 0.25), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.board_resize(x)
        a = torch.cat([a[:, :, :1], a], dim=2)  # a[-1] = a[0], rows
        a = torch.cat([a[:, :, :, :1], a], dim=3)  # and columns
        return F.conv2d(a, self.kernel.to(x.dtype), groups=self.channels)

    def extra_repr(self) -> str:
        return f"channels={self.channels}, ops=RESIZE_BILINEAR(v1)+STRIDED_SLICE+CONCATENATION+DEPTHWISE_CONV_2D"
