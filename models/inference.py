"""Run a PyTorch model on a NumPy batch: the one forward every comparison goes through."""

from __future__ import annotations

import numpy as np


def forward(module, inputs: np.ndarray) -> list[np.ndarray]:
    """``(N, 3, H, W)`` float32 -> the model's outputs as float32 arrays (a tensor output is a list of one)."""
    import torch

    with torch.no_grad():
        out = module(torch.from_numpy(np.ascontiguousarray(inputs)))
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o.detach().float().cpu().numpy() for o in outs]
