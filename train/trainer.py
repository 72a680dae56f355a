"""One training process: DDP over torch.distributed, accumulation with ``no_sync()``.

Within a window of K micro-steps, the first K-1 run forward *and* backward inside
``ddp.no_sync()``, so gradients accumulate locally; the last one runs outside it and DDP
all-reduces once. Each micro-step's loss is the sum of its per-image losses divided by the
number of images in the whole window on this rank (a last, partial window by its real
size), and DDP averages over ranks: the update is that of one step on the joint batch.
The LR schedule counts optimizer steps. A counting communication hook records how many
gradient all-reduce rounds each optimizer step took.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as _dt
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from edgeport._lazy import installed_versions
from edgeport.errors import EdgeportError
from edgeport.folders import record_outputs, write_output
from edgeport.models.registry import build_model
from edgeport.models.syncbn import convert_sync_batchnorm
from edgeport.train.checkpoint import FORMAT, VERSION_PACKAGES, atomic_save, load_initial_weights, load_resume
from edgeport.train.config import DEFAULT_EPOCHS, TrainConfig
from edgeport.train.dataset import DetectionDataset, collate
from edgeport.train.targets import detection_loss
from edgeport.validate.datasets import load_split

GRAD_CLIP = 10.0
METRIC_FIELDS = ["epoch", "step", "lr", "loss", "obj", "cls", "box", "map50", "map50_95", "seconds", "images_per_s",
                 "optimizer_steps", "allreduce_rounds", "allreduce_buckets"]


class TrainingError(EdgeportError):
    """Training cannot go on (a non-finite loss, a broken resume)."""

    exit_code = 1


@dataclass
class CommCounter:
    """State of the counting all-reduce hook."""

    process_group: object = None
    buckets: int = 0
    rounds: int = 0


def counting_allreduce_hook(state: CommCounter, bucket):
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    state.buckets += 1
    if bucket.is_last():
        state.rounds += 1
    return allreduce_hook(state.process_group, bucket)


def cosine_lambda(total_steps: int, lrf: float):
    total = max(total_steps, 1)

    def f(step: int) -> float:
        return lrf + (1.0 - lrf) * 0.5 * (1.0 + math.cos(math.pi * min(step, total) / total))

    return f


def micro_batch_sizes(n_local: int, batch: int) -> list[int]:
    return [min(batch, n_local - i) for i in range(0, n_local, batch)]


def window_sizes(sizes: list[int], k: int) -> list[int]:
    """Images in the accumulation window each micro-step belongs to."""
    out = []
    for start in range(0, len(sizes), k):
        total = sum(sizes[start : start + k])
        out += [total] * len(sizes[start : start + k])
    return out


def log(rank: int, message: str) -> None:
    if rank == 0:
        print(message, file=sys.stderr, flush=True)


def _set_train_mode(model: torch.nn.Module, frozen: bool) -> None:
    model.train()
    if frozen:
        model.backbone.eval()  # frozen layers keep their BatchNorm statistics


def _optimizer(cfg: TrainConfig, model: torch.nn.Module) -> torch.optim.Optimizer:
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() > 1]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() <= 1]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=cfg.lr)
    return torch.optim.SGD(groups, lr=cfg.lr, momentum=0.9, nesterov=True)


def _plot(rows: list[dict], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [r["epoch"] for r in rows]
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.2))
    ax[0].plot(epochs, [r["loss"] for r in rows], marker="o")
    ax[0].set(title="training loss", xlabel="epoch")
    ax[1].plot(epochs, [r["map50"] for r in rows], marker="o", label="mAP@0.5")
    ax[1].plot(epochs, [r["map50_95"] for r in rows], marker="o", label="mAP@0.5:0.95")
    ax[1].set(title="validation mAP", xlabel="epoch", ylim=(0, 1))
    ax[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90, format="png")
    plt.close(fig)


def worker_device(cfg: TrainConfig, local_rank: int) -> torch.device:
    """One GPU per rank; with more ranks than GPUs (gloo only, ``launch.validate_inputs``) ranks
    share them round-robin: two ranks on one GPU check DDP + SyncBN on a one-GPU machine."""
    if cfg.device != "cuda":
        return torch.device("cpu")
    return torch.device("cuda", local_rank % max(torch.cuda.device_count(), 1))


def loader_workers(cfg: TrainConfig, world: int) -> int:
    """Data-loading processes per rank: ``--workers``, else none on the CPU (the ranks' own
    compute uses every core) and, on CUDA, the cores this process may use (its affinity: a
    container's or a scheduler's share) shared among this machine's ranks, one left to each,
    at most 8. The batches do not depend on the count (``dataset`` seeds per image)."""
    from edgeport.process import usable_cores

    if cfg.workers is not None:
        return cfg.workers
    if cfg.device != "cuda":
        return 0
    local = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", world)))
    return max(0, min(8, usable_cores() // max(local, 1) - 1))


def set_determinism() -> None:
    """``--deterministic``'s kernels. torch warns (not fails) where an op has no deterministic CUDA
    kernel (the nearest-upsample backward among them); the loss uses no atomics (``targets.detection_loss``).
    TF32 is off: cuDNN convolutions default to it on Ampere and later, and its 10-bit mantissa depends
    on how the batch is split, so 2 ranks x batch 2 would differ from 1 rank x batch 4 by far more
    than float32 rounding."""
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)


def reduce_totals(totals: torch.Tensor) -> torch.Tensor:
    """Sum ``totals``, held on the group's device (NCCL has no CPU tensors), over ranks; returned on the CPU for logging."""
    dist.all_reduce(totals)
    return totals.cpu()


def to_cpu(obj):
    """A copy of a (nested) state dict with every tensor on the CPU: a checkpoint written on a
    GPU must load with ``torch.load(weights_only=True)`` on a machine without one."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return type(obj)((k, to_cpu(v)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(v) for v in obj)
    return obj


def first_non_finite(named_tensors) -> str | None:
    """The name of the first floating tensor holding NaN or Inf, or None."""
    for name, t in named_tensors:
        if torch.is_tensor(t) and t.is_floating_point() and not bool(torch.isfinite(t).all()):
            return name
    return None


def position_schedule(optimizer: torch.optim.Optimizer, scheduler, base_lr: float, lam, position: int) -> None:
    """Put the schedule at ``position`` optimizer steps as configured now (on resume, epochs done x
    steps per epoch): with another world size, batch or accumulation it continues at the same
    fraction of training instead of jumping, and a new ``--lr`` takes effect."""
    groups = optimizer.param_groups
    scheduler.base_lrs = [base_lr] * len(groups)
    scheduler.lr_lambdas = [lam] * len(groups)
    scheduler.last_epoch = position
    for g in groups:
        g["initial_lr"] = base_lr
        g["lr"] = base_lr * lam(position)
    scheduler._last_lr = [g["lr"] for g in groups]  # what get_last_lr() reports


def _non_finite_hint(cfg: TrainConfig, out: Path) -> str:
    last = out / "last.pt"
    if last.is_file():
        return (f"nothing from this epoch was saved; resume from the last good checkpoint with a lower learning rate: "
                f"edgeport train --resume {last} --lr {cfg.lr / 10:g}")
    return f"no checkpoint was written yet: start again with a lower learning rate (--lr {cfg.lr / 10:g}) or check the data"


def run_worker(cfg: TrainConfig, rank: int, world: int, local_rank: int) -> dict:
    """Train on this process; returns the final summary (rank 0's is written to summary.json)."""
    from edgeport.train.evaluate import evaluate_sharded

    device = worker_device(cfg, local_rank)
    if cfg.device == "cuda":
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(world, 1)))
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)

    resume = load_resume(cfg.resume) if cfg.resume else None
    if resume is not None:
        cfg = cfg.resumed(resume["args"], resume["epoch"])
    if cfg.epochs is None:
        cfg = TrainConfig.from_dict({**cfg.to_dict(), "epochs": DEFAULT_EPOCHS})
    if cfg.deterministic:
        set_determinism()

    model, arch_config = build_model(cfg.arch, {"num_classes": cfg.num_classes})
    strides = tuple(arch_config["strides"])
    if cfg.weights and resume is None:
        loaded, skipped = load_initial_weights(model, cfg.weights)
        log(rank, f"--weights: loaded {loaded} tensors" + (f"; skipped {len(skipped)}: {', '.join(skipped[:8])}" if skipped else ""))
    if cfg.freeze_layers:
        model.backbone.requires_grad_(False)
    if cfg.sync_bn:
        model = convert_sync_batchnorm(model, device)
    dtype = torch.float64 if cfg.float64 else torch.float32
    model.to(device, dtype)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    counter = CommCounter(process_group=dist.group.WORLD)
    ddp.register_comm_hook(counter, counting_allreduce_hook)

    train_samples = load_split(cfg.data, "train", cfg.num_classes)
    val_samples = load_split(cfg.data, "val", cfg.num_classes)
    dataset = DetectionDataset(train_samples, cfg.imgsz, strides, augment=not cfg.deterministic, seed=cfg.seed)
    sampler = torch.utils.data.DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=not cfg.deterministic, seed=cfg.seed)
    workers = loader_workers(cfg, world)
    loader = torch.utils.data.DataLoader(dataset, batch_size=cfg.batch_size, sampler=sampler, collate_fn=collate,
                                         num_workers=workers, pin_memory=device.type == "cuda")
    sizes = micro_batch_sizes(len(sampler), cfg.batch_size)
    windows = window_sizes(sizes, cfg.accumulate)
    steps_per_epoch = math.ceil(len(sizes) / cfg.accumulate)

    optimizer = _optimizer(cfg, model)
    lam = cosine_lambda(cfg.epochs * steps_per_epoch, cfg.lrf)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lam)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.amp or "")
    # fp16 needs loss scaling; with accumulation the scaled gradients add up over the window
    # and are unscaled once, before clipping, as torchvision's reference scripts do
    scaler = torch.amp.GradScaler(device.type, enabled=cfg.amp == "fp16")
    start_epoch, step, best, rows = 0, 0, -1.0, []
    if resume is not None:
        ddp.load_state_dict(resume["model"])
        configured = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
        optimizer.load_state_dict(resume["optimizer"])  # moves the state to the parameters' device
        for group, hyper in zip(optimizer.param_groups, configured):
            group.update(hyper)  # --lr, --weight-decay given now win over the saved ones
        if scaler.is_enabled() and resume.get("scaler"):
            scaler.load_state_dict(resume["scaler"])
        start_epoch, step, best = resume["epoch"], int(resume["step"]), float(resume.get("best_map50", -1.0))
        position_schedule(optimizer, scheduler, cfg.lr, lam, start_epoch * steps_per_epoch)
        rows = list(resume.get("history", []))
        changed = f" with {', '.join(f'--{k.replace(chr(95), chr(45))}' for k in cfg.overrides)} from the command line" if cfg.overrides else ""
        log(rank, f"resumed from {cfg.resume} at epoch {start_epoch}, optimizer step {step}{changed}")

    out = cfg.out
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        record = {**cfg.to_dict(), "resumed_from": str(cfg.resume) if cfg.resume else None, "overrides": list(cfg.overrides)}
        write_output(out, "args.json", json.dumps(record, indent=2) + "\n")
    log(rank, f"training {cfg.arch} on {len(train_samples)} images, world size {world} ({cfg.resolved_backend}, {device.type}), "
              f"batch {cfg.batch_size}/process x accumulate {cfg.accumulate} = {cfg.batch_size * cfg.accumulate * world} images/step, "
              f"SyncBN {'on' if cfg.sync_bn else 'off'}, AMP {cfg.amp or 'off'}{', float64' if cfg.float64 else ''}, "
              f"{steps_per_epoch} optimizer steps/epoch, {workers} loader worker{'' if workers == 1 else 's'}/process")

    params = [p for p in ddp.parameters() if p.requires_grad]
    summary: dict = {}
    for epoch in range(start_epoch, cfg.epochs):
        sampler.set_epoch(epoch)
        dataset.set_epoch(epoch)
        _set_train_mode(ddp.module, cfg.freeze_layers)
        t0 = time.perf_counter()
        rounds0, buckets0, steps0 = counter.rounds, counter.buckets, step
        totals = torch.zeros(5, dtype=torch.float64, device=device)  # loss, obj, cls, box, images
        bar = _progress(rank, epoch, cfg.epochs)
        bar_task = bar.add_task("train", total=len(sizes))
        bar.start()
        for m, (images, targets, _) in enumerate(loader):
            last_in_window = (m + 1) % cfg.accumulate == 0 or m + 1 == len(sizes)
            sync_now = last_in_window or cfg.sync_micro_steps
            images = images.to(device, dtype, non_blocking=True)
            targets = [{k: v.to(device, non_blocking=True) for k, v in t.items()} for t in targets]
            with contextlib.nullcontext() if sync_now else ddp.no_sync():
                with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
                    outputs = list(ddp(images))
                per_image, parts = detection_loss(outputs, targets)  # float32 whatever the autocast dtype
                loss = per_image.sum() / windows[m]
                if not torch.isfinite(loss):
                    raise TrainingError(f"non-finite loss ({loss.item()}) at epoch {epoch + 1}, optimizer step {step + 1}, "
                                        f"micro-step {m + 1} on rank {rank}; {_non_finite_hint(cfg, out)}")
                scaler.scale(loss).backward()
            with torch.no_grad():
                totals += torch.stack([per_image.sum(), parts["obj"], parts["cls"], parts["box"],
                                       per_image.new_tensor(float(len(per_image)))]).double()
            if last_in_window:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(params, GRAD_CLIP)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
                scheduler.step()
                step += 1
                bad = first_non_finite(ddp.module.named_parameters())
                if bad is not None:
                    raise TrainingError(f"non-finite weights ({bad}) after epoch {epoch + 1}, optimizer step {step} on rank {rank} "
                                        f"(lr {scheduler.get_last_lr()[0]:g}); {_non_finite_hint(cfg, out)}")
            bar.advance(bar_task)
        bar.stop()
        elapsed = time.perf_counter() - t0
        totals = reduce_totals(totals)
        n_img = max(totals[4].item(), 1.0)
        row = {
            "epoch": epoch + 1, "step": step, "lr": scheduler.get_last_lr()[0],
            "loss": totals[0].item() / n_img, "obj": totals[1].item() / n_img, "cls": totals[2].item() / n_img,
            "box": totals[3].item() / n_img, "map50": float("nan"), "map50_95": float("nan"),
            "seconds": elapsed, "images_per_s": n_img / elapsed,
            "optimizer_steps": step - steps0, "allreduce_rounds": counter.rounds - rounds0,
            "allreduce_buckets": counter.buckets - buckets0,
        }
        is_last_epoch = epoch + 1 == cfg.epochs
        if (epoch + 1) % cfg.eval_every == 0 or is_last_epoch:
            scores = evaluate_sharded(ddp.module, val_samples, cfg.imgsz, strides, rank=rank, world=world)
            if scores is not None:
                row.update(scores)
        rows.append(row)
        if rank == 0:
            state = to_cpu(ddp.state_dict())  # keys prefixed `module.`, as DDP scripts save them
            bad = first_non_finite(state.items())
            if bad is not None:
                raise TrainingError(f"non-finite {bad} at the end of epoch {epoch + 1}; {_non_finite_hint(cfg, out)}")
            improved = row["map50"] > best
            best = max(best, row["map50"]) if not math.isnan(row["map50"]) else best
            ckpt = {
                "format": FORMAT, "arch": cfg.arch, "config": arch_config, "imgsz": cfg.imgsz,
                "model": state, "epoch": epoch + 1, "step": step, "best_map50": best, "metrics": row, "history": rows,
                "args": cfg.to_dict(), "world_size": world, "versions": installed_versions(VERSION_PACKAGES),
                "saved": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            }
            if improved:
                atomic_save(ckpt, out / "best.pt")  # deployable weights: no optimizer state
            atomic_save({**ckpt, "optimizer": to_cpu(optimizer.state_dict()), "scaler": scaler.state_dict()}, out / "last.pt")
            record_outputs(out, "best.pt", "last.pt")
            _write_metrics(rows, out)
            log(rank, f"epoch {epoch + 1}/{cfg.epochs}  loss {row['loss']:.4f}  mAP@0.5 {row['map50']:.3f}  "
                      f"mAP@0.5:0.95 {row['map50_95']:.3f}  {row['images_per_s']:.1f} img/s  "
                      f"all-reduce rounds/step {row['allreduce_rounds'] / max(row['optimizer_steps'], 1):.2f}")
        dist.barrier(device_ids=[device.index]) if cfg.resolved_backend == "nccl" else dist.barrier()
        summary = {"epochs": epoch + 1, "step": step, "best_map50": best, "last": row}
    if rank == 0:
        write_output(out, "summary.json", json.dumps(summary, indent=2, default=float) + "\n")
        best_pt = out / "best.pt"
        if best_pt.is_file():
            log(rank, f"best.pt (mAP@0.5 {best:.3f}) and last.pt are in {out}/: deploy with `edgeport convert {best_pt}`")
        else:
            log(rank, f"last.pt is in {out}/ (no epoch was scored, so no best.pt): `edgeport convert {out / 'last.pt'}`")
    return summary


def _write_metrics(rows: list[dict], out: Path) -> None:
    import io

    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=METRIC_FIELDS)
    writer.writeheader()
    for r in rows:
        writer.writerow({k: r.get(k) for k in METRIC_FIELDS})
    write_output(out, "metrics.csv", text.getvalue())
    png = io.BytesIO()
    _plot(rows, png)
    write_output(out, "metrics.png", png.getvalue())


def _progress(rank: int, epoch: int, epochs: int):
    """A progress bar on rank 0 when stderr is a terminal (rich disables itself otherwise)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(TextColumn(f"epoch {epoch + 1}/{epochs}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                    transient=True, disable=rank != 0 or not sys.stderr.isatty())
