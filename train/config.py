"""The trainer's options, parsed once into a frozen config.

The option names are those of the DDP training scripts this product comes from
(``--num-classes --epochs --batch-size --lr --lrf --syncBN --weights --freeze-layers
--device --world-size --dist-url``), plus accumulation, data and reproducibility options.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field
from pathlib import Path

from edgeport.cliargs import SEED_RANGE, int_range, non_negative_float, positive_float, positive_int, real_number, seed, whole_number
from edgeport.errors import BadInputError
from edgeport.models.registry import DEFAULT_ARCH
from edgeport.text import shown
from edgeport.train.rendezvous import dist_url

DEFAULT_EPOCHS = 30
AMP_DTYPES = ("bf16", "fp16")
OPTIMIZERS = ("sgd", "adamw")
DEVICES = ("cpu", "cuda")
BACKENDS = ("gloo", "nccl", "mpi")
# bounds for what a file (a resumed run's saved options) may ask for
MAX_CLASSES = 10_000
MAX_EPOCHS = 100_000
MAX_BATCH = 65_536
MAX_IMGSZ = 8192
MAX_WORKERS = 64
# where the run happens, not what the run is: on --resume these come from the command line
ENVIRONMENT = ("device", "world_size", "dist_url", "backend", "data", "out", "resume", "workers")
# what shapes the model and its optimizer state: a resumed run cannot change them
FIXED_ON_RESUME = ("arch", "num_classes", "optimizer", "freeze_layers", "float64")


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
    amp: str | None = None  # None, "bf16" or "fp16"
    workers: int | None = None  # data-loading processes per rank; None: loader_workers() decides
    float64: bool = False  # weights, activations and loss in float64 (checks; not for deployment speed)
    # options given on the command line (what --resume takes over the saved run's)
    explicit: tuple[str, ...] = field(default=(), compare=False)

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
        known["explicit"] = tuple(known.get("explicit", ()))
        return cls(**known)

    def problem(self) -> str | None:
        """What is out of range or of the wrong type, as the command line would have refused it;
        None when every field is valid. (A resumed run's saved options come from a file.)"""
        from edgeport.models.registry import REGISTRY

        whole = whole_number

        def number(value, lo: float, hi: float, *, open_lo: bool = False) -> bool:
            return real_number(value) and (value > lo if open_lo else value >= lo) and value <= hi

        checks = (
            ("arch", self.arch in REGISTRY, f"one of {', '.join(sorted(REGISTRY))}"),
            ("num_classes", whole(self.num_classes, 1, MAX_CLASSES), f"a whole number in 1..{MAX_CLASSES}"),
            ("epochs", self.epochs is None or whole(self.epochs, 1, MAX_EPOCHS), f"a whole number in 1..{MAX_EPOCHS}"),
            ("batch_size", whole(self.batch_size, 1, MAX_BATCH), f"a whole number in 1..{MAX_BATCH}"),
            ("accumulate", whole(self.accumulate, 1, MAX_BATCH), f"a whole number in 1..{MAX_BATCH}"),
            ("lr", number(self.lr, 0.0, 10.0, open_lo=True), "a number in (0, 10]"),
            ("lrf", number(self.lrf, 0.0, 1.0), "a number in [0, 1]"),
            ("optimizer", self.optimizer in OPTIMIZERS, f"one of {', '.join(OPTIMIZERS)}"),
            ("weight_decay", number(self.weight_decay, 0.0, 1.0), "a number in [0, 1]"),
            ("sync_bn", isinstance(self.sync_bn, bool), "true or false"),
            ("freeze_layers", isinstance(self.freeze_layers, bool), "true or false"),
            ("deterministic", isinstance(self.deterministic, bool), "true or false"),
            ("sync_micro_steps", isinstance(self.sync_micro_steps, bool), "true or false"),
            ("float64", isinstance(self.float64, bool), "true or false"),
            ("workers", self.workers is None or whole(self.workers, 0, MAX_WORKERS), f"a whole number in 0..{MAX_WORKERS} or none"),
            ("imgsz", whole(self.imgsz, 32, MAX_IMGSZ), f"a whole number in 32..{MAX_IMGSZ}"),
            ("seed", whole(self.seed, *SEED_RANGE), f"a whole number in {SEED_RANGE[0]}..{SEED_RANGE[1]}"),
            ("eval_every", whole(self.eval_every, 1, MAX_EPOCHS), f"a whole number in 1..{MAX_EPOCHS}"),
            ("amp", self.amp is None or self.amp in AMP_DTYPES, f"one of {', '.join(AMP_DTYPES)} or none"),
            ("device", self.device in DEVICES, f"one of {', '.join(DEVICES)}"),
            ("backend", self.backend is None or self.backend in BACKENDS, f"one of {', '.join(BACKENDS)} or none"),
        )
        for name, ok, valid in checks:
            if not ok:
                return f"{name}={shown(getattr(self, name))} (valid: {valid})"
        return None

    def resumed(self, saved: dict, start_epoch: int) -> "TrainConfig":
        """The saved run's configuration, with ``ENVIRONMENT`` and every explicit option taken from this
        command line. The saved options come from a file: they may name only what the command line could
        (a registry architecture, bounded numbers), never code to import."""
        if not isinstance(saved, dict) or not all(isinstance(k, str) for k in saved):
            raise BadInputError(f"--resume {self.resume}: its saved options are not a dict of names; pass a last.pt edgeport wrote")
        try:
            saved_cfg = TrainConfig.from_dict({**saved, "data": self.data, "out": self.out, "resume": self.resume, "explicit": ()})
        except (TypeError, ValueError) as exc:
            raise BadInputError(f"--resume {self.resume}: its saved options are unreadable ({exc}); pass a last.pt edgeport wrote") from exc
        problem = saved_cfg.problem()
        if problem:
            raise BadInputError(f"--resume {self.resume}: its saved options hold {problem}; a checkpoint may only name what "
                                f"the command line can: pass a last.pt edgeport wrote")
        if not whole_number(start_epoch, 0):
            raise BadInputError(f"--resume {self.resume}: its epoch {start_epoch!r} is not a whole number >= 0")
        mine = self.to_dict()
        for key in FIXED_ON_RESUME:
            if key in self.explicit and mine[key] != saved_cfg.to_dict()[key]:
                raise BadInputError(f"--resume: the run was trained with {key}={saved_cfg.to_dict()[key]!r}; a resumed run "
                                    f"keeps it (got {mine[key]!r}): drop the option, or start a new run with --weights")
        merged = saved_cfg.to_dict()
        merged.update({k: mine[k] for k in ENVIRONMENT})
        merged.update({k: mine[k] for k in self.explicit if k in mine})
        merged["explicit"] = list(self.explicit)
        cfg = TrainConfig.from_dict(merged)
        if cfg.epochs is not None and cfg.epochs <= start_epoch:
            raise BadInputError(f"--resume: the run has already trained {start_epoch} of {cfg.epochs} epochs; "
                                f"pass --epochs N with N > {start_epoch} to train further")
        return cfg

    @property
    def overrides(self) -> tuple[str, ...]:
        """Options given on the command line that change the saved run (for args.json)."""
        return tuple(k for k in self.explicit if k not in ENVIRONMENT)


def add_train_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, required=True, help="dataset folder (YOLO layout or COCO JSON); see `edgeport data synth`")
    p.add_argument("--out", type=Path, help="run folder (default: a new numbered folder under runs/train/)")
    p.add_argument("--arch", default=DEFAULT_ARCH, help="architecture: a name from edgeport's registry (default pdet-n)")
    p.add_argument("--num-classes", type=positive_int, default=1, help="classes the detector predicts (default 1: person)")
    p.add_argument("--epochs", type=positive_int, help=f"total epochs (default {DEFAULT_EPOCHS}; on --resume, the run's own unless raised)")
    p.add_argument("--batch-size", type=positive_int, default=16, help="images per process per micro-step (default 16)")
    p.add_argument("--accumulate", type=positive_int, default=1, metavar="K", help="micro-steps per optimizer step (DDP no_sync for the first K-1; default 1)")
    p.add_argument("--lr", type=positive_float, default=0.01, help="initial learning rate (> 0; default 0.01)")
    p.add_argument("--lrf", type=non_negative_float, default=0.01, help="final learning rate as a fraction of --lr (cosine schedule; default 0.01)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="sgd", help="sgd (momentum 0.9, Nesterov) or adamw (default sgd)")
    p.add_argument("--weight-decay", type=non_negative_float, default=5e-4, help="L2 weight decay on weights, not on biases or "
                   "BatchNorm (default 5e-4)")
    p.add_argument("--syncBN", dest="sync_bn", action=argparse.BooleanOptionalAction, default=True,
                   help="synchronise BatchNorm statistics across processes (torch's on CUDA, edgeport's on CPU; default on). "
                        "Checkpoints hold plain BatchNorm keys either way: convert reverts nothing there")
    p.add_argument("--weights", type=Path, help="initialise from a checkpoint (shape-filtered; skipped keys are listed)")
    p.add_argument("--freeze-layers", action="store_true", help="freeze the backbone (weights and BatchNorm statistics)")
    p.add_argument("--device", choices=DEVICES, default="cpu", help="cpu (gloo) or cuda (NCCL, one process per GPU; default cpu)")
    p.add_argument("--world-size", type=positive_int, default=1,
                   help="processes to start on this machine, one per GPU with --device cuda (ignored under torchrun and mpirun; "
                        "default 1)")
    p.add_argument("--dist-url", type=dist_url, default="env://",
                   help="process-group rendezvous for the ranks of this machine: env:// (MASTER_ADDR/PORT), tcp://127.0.0.1:PORT "
                        "(1-65535) or file:///path/to/a/new/file in an existing folder (default env://); the ranks wait for each "
                        "other at most 5 minutes. Several machines: launch with torchrun --nnodes (docs/training.md, "
                        "'Several machines')")
    p.add_argument("--backend", choices=BACKENDS, help="default: nccl on cuda, gloo on cpu")
    p.add_argument("--imgsz", type=int_range(32, MAX_IMGSZ), default=160, help="square training size in pixels, recorded in the "
                   "checkpoint: convert uses it unless told otherwise (default 160)")
    p.add_argument("--seed", type=seed, default=0, help=f"seed for initialisation, shuffling and augmentation "
                   f"({SEED_RANGE[0]}-{SEED_RANGE[1]}; default 0)")
    p.add_argument("--deterministic", action="store_true", help="no shuffling, no augmentation, fixed seeds")
    p.add_argument("--resume", type=Path, help="continue from a last.pt where it stopped; options given with it (--lr, --epochs, "
                   "--device, --world-size ...) override the saved run's and are recorded in args.json")
    p.add_argument("--sync-micro-steps", action="store_true", help="all-reduce on every micro-step instead of using no_sync (for comparison)")
    p.add_argument("--eval-every", type=positive_int, default=1, help="evaluate mAP every N epochs (and always after the last; default 1)")
    p.add_argument("--workers", type=int_range(0, MAX_WORKERS), metavar="N",
                   help="data-loading processes per rank (default: 0 on cpu, where the ranks use every core; on cuda "
                        "this machine's cores shared among its ranks, at most 8). The images do not depend on it")
    p.add_argument("--float64", action="store_true",
                   help="train in float64 (slow): with --deterministic, 2 ranks x batch B equal 1 rank x batch 2B to float64 "
                        "rounding, where float32's rounding can flip a ReLU (docs/training.md)")
    p.add_argument("--amp", choices=AMP_DTYPES, help="mixed precision: bf16 (cpu or cuda) or fp16 with a gradient scaler (cuda)")
    p.add_argument("--force", action="store_true", help="replace an earlier edgeport training run in --out (never other files)")


def config_from_args(args: argparse.Namespace, explicit: set[str]) -> TrainConfig:
    fields = TrainConfig.__dataclass_fields__
    values = {k: v for k, v in vars(args).items() if k in fields}
    return TrainConfig(**values, explicit=tuple(sorted(k for k in explicit if k in fields)))
