"""Write the demo checkpoint the way DDP + SyncBN training scripts save theirs.

The model is the default detector (pdet-n), converted with
``torch.nn.SyncBatchNorm.convert_sync_batchnorm`` as DDP scripts do, with non-trivial
BatchNorm statistics (a few train-mode passes over synthetic scenes, and perturbed affine
parameters), then saved as ``{"model": ddp.state_dict(), ...}`` -- every key prefixed
``module.`` -- in plain types that ``torch.load(weights_only=True)`` reads.

These weights are untrained: the trainer (issue #3) replaces them with trained ones.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from edgeport.models.preprocess import preprocess
from edgeport.models.registry import build_model
from edgeport.train.synth import sample_images


def make(out: Path, *, seed: int = 0, imgsz: int = 160) -> None:
    torch.manual_seed(seed)
    model, config = build_model("pdet-n")
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    # gather real running statistics in train mode (momentum None = cumulative average)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.momentum = None
    images = np.stack([preprocess(im, imgsz) for im in sample_images(16, imgsz, seed=seed)])
    model.train()
    with torch.no_grad():
        for i in range(0, len(images), 4):
            model(torch.from_numpy(images[i : i + 4]))
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.momentum = 0.1
    sync = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    # What `DistributedDataParallel(sync).state_dict()` yields, without a process group.
    state = {f"module.{k}": v.clone() for k, v in sync.state_dict().items()}
    torch.save({"epoch": 0, "model": state, "imgsz": imgsz, "note": "untrained pdet-n, DDP + SyncBN layout"}, out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    make(args.out, seed=args.seed)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
