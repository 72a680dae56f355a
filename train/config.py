"""The trainer's options, parsed once into a frozen config.

The option names are those of the DDP training scripts this product comes from
(``--num-classes --epochs --batch-size --lr --lrf --syncBN --weights --freeze-layers
--device --world-size --dist-url``), plus accumulation, data and reproducibility options.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from pathlib import Path

from edgeport.models.registry import DEFAULT_ARCH, arch_names

DEFAULT_EPOCHS = 30


@dataclass(frozen=True)
class TrainConfig:
    data: Path
    out: Path | None = None
    arch: str = DEFAULT_ARCH
    num_classes: int = 1
    epochs: int | None = None  # None: DEFAULT_EPOCHS, or on --resume the run's own
    batch_size: int = 16  # per process
    accumulate: int = 1
    lr: float = 0.01
    lrf: float = 0.01
    optimizer: str = "sgd"
    weight_decay: float = 5e-4
    sync_bn: bool = True
    weights: Path | None = None
    freeze_layers: bool = False
    device: str = "cpu"
    world_size: int = 1
    dist_url: str = "env://"
    backend: str | None = None
    imgsz: int = 160
    seed: int = 0
    deterministic: bool = False
    resume: Path | None = None
    sync_micro_steps: bool = False
    eval_every: int = 1

    @property
    def resolved_backend(self) -> str:
        return self.backend or ("nccl" if self.device == "cuda" else "gloo")

    def to_dict(self) -> dict:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        for key in ("data", "out", "weights", "resume"):
            if known.get(key) is not None:
                known[key] = Path(known[key])
        return cls(**known)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def add_train_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, required=True, help="dataset folder (YOLO layout or COCO JSON); see `edgeport data synth`")
    p.add_argument("--out", type=Path, help="run folder (default: a new numbered folder under runs/train/)")
    p.add_argument("--arch", default=DEFAULT_ARCH, help=f"architecture: {', '.join(arch_names())}")
    p.add_argument("--num-classes", type=_positive_int, default=1)
    p.add_argument("--epochs", type=_positive_int, help=f"total epochs (default {DEFAULT_EPOCHS}; on --resume, the run's own unless raised)")
    p.add_argument("--batch-size", type=_positive_int, default=16, help="images per process per micro-step")
    p.add_argument("--accumulate", type=_positive_int, default=1, metavar="K", help="micro-steps per optimizer step (DDP no_sync for the first K-1)")
    p.add_argument("--lr", type=float, default=0.01, help="initial learning rate")
    p.add_argument("--lrf", type=float, default=0.01, help="final learning rate as a fraction of --lr (cosine schedule)")
    p.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd")
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--syncBN", dest="sync_bn", action=argparse.BooleanOptionalAction, default=True,
                   help="synchronise BatchNorm statistics across processes (torch's on CUDA, edgeport's on CPU)")
    p.add_argument("--weights", type=Path, help="initialise from a checkpoint (shape-filtered; skipped keys are listed)")
    p.add_argument("--freeze-layers", action="store_true", help="freeze the backbone (weights and BatchNorm statistics)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--world-size", type=_positive_int, default=1, help="processes to start on this machine (ignored under torchrun)")
    p.add_argument("--dist-url", default="env://", help="process-group init method: env:// (MASTER_ADDR/PORT), tcp://host:port or file://path")
    p.add_argument("--backend", choices=("gloo", "nccl", "mpi"), help="default: nccl on cuda, gloo on cpu")
    p.add_argument("--imgsz", type=_positive_int, default=160)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--deterministic", action="store_true", help="no shuffling, no augmentation, fixed seeds")
    p.add_argument("--resume", type=Path, help="continue from a last.pt exactly where it stopped")
    p.add_argument("--sync-micro-steps", action="store_true", help="all-reduce on every micro-step instead of using no_sync (for comparison)")
    p.add_argument("--eval-every", type=_positive_int, default=1, help="evaluate mAP every N epochs (and always after the last)")


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    fields = TrainConfig.__dataclass_fields__
    return TrainConfig(**{k: v for k, v in vars(args).items() if k in fields})
