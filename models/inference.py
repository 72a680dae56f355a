"""Run a PyTorch model on a NumPy batch: the one forward every comparison goes through."""

from __future__ import annotations

import numpy as np


def float32_error(module, inputs: np.ndarray, outputs: list[np.ndarray]) -> list[np.ndarray] | None:
    """Per output, |``outputs`` - the model's own in float64| element by element: float32's own error
    on ``inputs``, where ``outputs`` are the model's float32 outputs on them. None where the model does
    not run in float64 (an op with no float64 kernel, a constant it keeps in float32)."""
    import copy

    import torch

    try:
        wide = copy.deepcopy(module).double()
        with torch.no_grad():
            out = wide(torch.from_numpy(np.ascontiguousarray(inputs, np.float64)))
        exact = [o.detach().cpu().numpy() for o in (out if isinstance(out, (tuple, list)) else (out,))]
    except Exception:  # noqa: BLE001 -- the model's own limits in float64: no measure of float32's error
        return None
    if len(exact) != len(outputs) or any(e.shape != o.shape for e, o in zip(exact, outputs)):
        return None
    return [np.abs(o.astype(np.float64) - e) for o, e in zip(outputs, exact)]


def forward(module, inputs: np.ndarray) -> list[np.ndarray]:
    """``(N, 3, H, W)`` float32 -> the model's outputs as float32 arrays (a tensor output is a list of one)."""
    import torch

    with torch.no_grad():
        out = module(torch.from_numpy(np.ascontiguousarray(inputs)))
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o.detach().float().cpu().numpy() for o in outs]
