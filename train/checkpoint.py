"""Trainer checkpoints: atomic writes, plain types only, DDP key layout.

``last.pt`` holds everything ``--resume`` needs (model, optimizer, scheduler, epoch, step,
metrics); ``best.pt`` holds the weights to deploy (no optimizer state). Both name the
architecture and its config, so ``convert`` needs no ``--arch``, and both load with
``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from edgeport.errors import CheckpointError

VERSION_PACKAGES = ("edgeport", "torch", "numpy")

FORMAT = "edgeport.ckpt/1"


def atomic_save(obj: dict, path: Path) -> None:
    """Write to a temporary file in the same folder, flush to disk, then rename over ``path``."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # interrupted or disk full: the previous file stays intact
        raise


def load_resume(path: Path) -> dict:
    from edgeport.checkpoints import torch_load

    ckpt = torch_load(path, trust=False)
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise CheckpointError(f"--resume {str(path)!r} is not an edgeport trainer checkpoint; pass the run's last.pt")
    if "optimizer" not in ckpt:
        raise CheckpointError(f"--resume {str(path)!r} has no optimizer state (a best.pt?); pass the run's last.pt")
    return ckpt


def load_initial_weights(model: torch.nn.Module, path: Path) -> tuple[int, list[str]]:
    """``--weights``: copy every tensor whose name and shape fit; return (loaded, skipped names)."""
    from edgeport.checkpoints import find_weights, strip_state_dict, torch_load

    _, sd, module, _, _ = find_weights(torch_load(path, trust=False))
    if sd is None:
        sd = module.state_dict()
    sd, _ = strip_state_dict(sd)
    own = model.state_dict()
    fit = {k: v for k, v in sd.items() if k in own and own[k].shape == v.shape}
    skipped = sorted(set(sd) - set(fit)) + sorted(k for k in own if k not in sd)
    model.load_state_dict(fit, strict=False)
    return len(fit), skipped
