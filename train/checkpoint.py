"""Trainer checkpoints: atomic writes, plain types only, DDP key layout.

``last.pt`` holds everything ``--resume`` needs (model, optimizer, scheduler, epoch, step,
metrics); ``best.pt`` holds the weights to deploy (no optimizer state). Both name the
architecture and its config, so ``convert`` needs no ``--arch``, and both load with
``torch.load(weights_only=True)``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from edgeport.cliargs import real_number, whole_number
from edgeport.errors import CheckpointError
from edgeport.folders import writing

VERSION_PACKAGES = ("edgeport", "torch", "numpy")

FORMAT = "edgeport.ckpt/1"


def atomic_save(obj: dict, path: Path) -> None:
    """Serialised in memory first: torch's zip writer reports a full disk as a RuntimeError about
    stream positions, a plain file write as the OSError it is (ENOSPC, named)."""
    import io

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    with writing(path) as f:  # interrupted or disk full: the previous file stays intact
        f.write(buffer.getbuffer())


def load_resume(path: Path) -> dict:
    from edgeport.checkpoints import torch_load

    ckpt = torch_load(path, trust=False)
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise CheckpointError(f"--resume {str(path)!r} is not an edgeport trainer checkpoint; pass the run's last.pt")
    if "optimizer" not in ckpt:
        raise CheckpointError(f"--resume {str(path)!r} has no optimizer state (a best.pt?); pass the run's last.pt")
    def count(key: str) -> bool:
        return whole_number(ckpt.get(key), 0)

    history = ckpt.get("history", [])
    if not (isinstance(history, list) and all(isinstance(r, dict) and all(
            v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in r.values()) for r in history)):
        raise CheckpointError(f"--resume {str(path)!r}: its metrics history is not a list of numbers; pass the run's last.pt")
    best = ckpt.get("best_map50", -1.0)
    if not (isinstance(ckpt.get("args"), dict) and count("epoch") and count("step")
            and real_number(best) and -1.0 <= best <= 1.0):
        raise CheckpointError(f"--resume {str(path)!r} lacks valid saved options, epoch, step or best mAP; pass the run's last.pt")
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
