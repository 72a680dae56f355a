"""Write every ceil-mode max pool as one each converter computes exactly.

``MaxPool2d(ceil_mode=True)`` adds a last window that hangs over the input's edge and takes the
maximum of what lies inside. A converter pads the overhang: with -FLT_MAX (onnx2tf 1.28's PADV2 on
the default board) or, in the old board's conversion (quantised per tensor), with zeros, which win
where the window's values are all negative (after a PReLU: MTCNN's R-Net and O-Net), so that even
the float32 file computes something else. Here the pool becomes a floor-mode pool of
the input with its last row (column) repeated as many times as the last window hangs over: a
repeated value is one the window already holds, so no maximum changes -- exact, the check demands
identical outputs -- and SLICE, CONCATENATION and MAX_POOL_2D are ops every board runs, uint8
included (a replicate PAD is a MIRROR_PAD, which TFLite 1.13 has not on uint8).
"""

from __future__ import annotations

import copy
from dataclasses import replace

import torch
from torch import nn

from edgeport.convert.base import ConvertConfig, Pass, PassResult, Prepared
from edgeport.convert.modelcheck import assert_same_outputs


def _pair(v) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, int) else (int(v[0]), int(v[1]))


def overhang(size: int, kernel: int, stride: int) -> int:
    """How many rows past ``size`` a ceil-mode pool's last window reaches (PyTorch's rule: a last
    window must start inside the input)."""
    windows = -(-(size - kernel) // stride) + 1 if size >= kernel else 1
    if (windows - 1) * stride >= size:
        windows -= 1
    return max((windows - 1) * stride + kernel - size, 0)


class CeilPoolExact(nn.Module):
    """``MaxPool2d(k, s, padding=0, ceil_mode=True)`` as a floor-mode pool of the input with its edge repeated (module docstring)."""

    def __init__(self, pool: nn.MaxPool2d):
        super().__init__()
        self.kernel, self.stride = _pair(pool.kernel_size), _pair(pool.stride or pool.kernel_size)

    def forward(self, x):
        (kh, kw), (sh, sw) = self.kernel, self.stride
        rows, cols = overhang(int(x.shape[-2]), kh, sh), overhang(int(x.shape[-1]), kw, sw)
        if rows:
            x = torch.cat([x, *[x[..., -1:, :]] * rows], dim=-2)
        if cols:
            x = torch.cat([x, *[x[..., :, -1:]] * cols], dim=-1)
        return nn.functional.max_pool2d(x, self.kernel, self.stride)


def _rewritable(m: nn.Module) -> bool:
    # (a dilated window may skip the last row, which a repeat would then add: left as it is)
    return (isinstance(m, nn.MaxPool2d) and m.ceil_mode and not m.return_indices and _pair(m.padding) == (0, 0)
            and _pair(m.dilation) == (1, 1))


def rewrite_ceil_pools(module: nn.Module) -> tuple[nn.Module, list[str]]:
    """A copy of ``module`` with every ceil-mode ``MaxPool2d`` (no padding) made exact, and their names;
    ``module`` itself where it has none."""
    found = [name for name, m in module.named_modules() if _rewritable(m)]
    if not found:
        return module, []
    module = copy.deepcopy(module)
    if _rewritable(module):
        return CeilPoolExact(module), found
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if _rewritable(child):
                setattr(parent, name, CeilPoolExact(child))
    return module, found


class RewritePoolsPass(Pass[Prepared, Prepared]):
    name = "rewrite_pools"

    def run(self, value: Prepared, config: ConvertConfig) -> PassResult[Prepared]:
        module, found = rewrite_ceil_pools(value.module)
        summary = (f"{len(found)} ceil-mode max pools as floor-mode pools of the input with its edge repeated (exact): "
                   f"{', '.join(found[:3])}{', ...' if len(found) > 3 else ''}" if found else "no ceil-mode max pool")
        return PassResult(replace(value, module=module.eval()), changed=bool(found), summary=summary)

    def check(self, before: Prepared, after: Prepared, config: ConvertConfig) -> None:
        if before.module is not after.module:
            assert_same_outputs(self.name, before.module, after.module, after.calib[:2], rel_tol=0.0)
