"""Starting the trainer: under torchrun, as N local processes, or as one.

- ``torchrun --nproc-per-node N -m edgeport.train ...``: torchrun sets RANK, WORLD_SIZE,
  LOCAL_RANK, MASTER_ADDR and MASTER_PORT; each process is a worker. Multi-node works as
  torchrun always does.
- ``edgeport train --world-size N``: this process validates the inputs, picks a free port,
  starts N workers with the same variables, and watches them: when one dies, the others
  are stopped at once and the job exits non-zero, so a lost rank never leaves a hang.
- ``--world-size 1``: one worker in this process (still a process group of one, so the
  DDP code path and its checks are the same).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from edgeport.convert.command import next_run_dir
from edgeport.errors import BadInputError, EdgeportError
from edgeport.train.config import TrainConfig, add_train_args, config_from_args

DEFAULT_RUNS = Path("runs/train")
PG_TIMEOUT = _dt.timedelta(seconds=int(os.environ.get("EDGEPORT_PG_TIMEOUT_S", "300")))
STOP_GRACE_S = 5.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or ("RANK" in os.environ and "WORLD_SIZE" in os.environ)


def validate_inputs(cfg: TrainConfig) -> None:
    """Fail fast, once, before any process starts."""
    from edgeport.models.registry import REGISTRY, arch_names
    from edgeport.train.data import load_split

    if cfg.arch not in REGISTRY:
        raise BadInputError(f"unknown architecture {cfg.arch!r}; valid: {', '.join(arch_names())}")
    stride = max(REGISTRY[cfg.arch].config.strides)
    if cfg.imgsz % stride:
        raise BadInputError(f"--imgsz {cfg.imgsz} is not a multiple of the model's stride {stride}")
    if cfg.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise BadInputError("--device cuda but no CUDA device is visible; use --device cpu")
    if cfg.resolved_backend == "mpi":
        import torch.distributed as dist

        if not dist.is_mpi_available():
            raise BadInputError("--backend mpi but this torch build has no MPI support; use gloo (cpu) or nccl (cuda)")
    if cfg.resolved_backend == "nccl" and cfg.device != "cuda":
        raise BadInputError("--backend nccl needs --device cuda; use gloo on cpu")
    for path, flag in ((cfg.weights, "--weights"), (cfg.resume, "--resume")):
        if path is not None and not path.is_file():
            raise BadInputError(f"{flag} {str(path)!r} does not exist")
    load_split(cfg.data, "train", cfg.num_classes)
    load_split(cfg.data, "val", cfg.num_classes)


def worker_main(cfg: TrainConfig, rank: int, world: int, local_rank: int) -> int:
    import torch
    import torch.distributed as dist

    from edgeport.train.trainer import run_worker

    if cfg.device == "cuda":
        torch.cuda.set_device(local_rank)
    dist.init_process_group(cfg.resolved_backend, init_method=cfg.dist_url, timeout=PG_TIMEOUT, rank=rank, world_size=world)
    try:
        if cfg.out is None:
            # every rank must write to the same folder: rank 0 decides
            box = [str(next_run_dir(DEFAULT_RUNS)) if rank == 0 else None]
            dist.broadcast_object_list(box, src=0)
            cfg = TrainConfig.from_dict({**cfg.to_dict(), "out": box[0]})
        run_worker(cfg, rank, world, local_rank)
    except EdgeportError as exc:
        print(f"edgeport train: error (rank {rank}): {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


def spawn(argv: list[str], cfg: TrainConfig) -> int:
    """Start ``cfg.world_size`` workers on this machine and watch them."""
    port = free_port()
    procs: list[subprocess.Popen] = []
    for rank in range(cfg.world_size):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(cfg.world_size),
                   LOCAL_WORLD_SIZE=str(cfg.world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   PYTHONUNBUFFERED="1")
        procs.append(subprocess.Popen([sys.executable, "-m", "edgeport.train", *argv], env=env))

    def stop_all(sig=signal.SIGTERM) -> None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(sig)
        deadline = time.monotonic() + STOP_GRACE_S
        for p in procs:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                rank, code = failed[0]
                stop_all()
                why = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
                print(f"edgeport train: rank {rank} failed ({why}); stopped the other ranks", file=sys.stderr, flush=True)
                return code if code > 0 else 128 - code
            if all(c == 0 for c in codes):
                return 0
            time.sleep(0.2)
    except KeyboardInterrupt:
        stop_all(signal.SIGINT)
        return 130


def build_parser(prog: str = "edgeport train") -> argparse.ArgumentParser:
    from edgeport.cli import _Parser

    p = _Parser(prog=prog, description="Train a detector with DDP (gloo on CPU, NCCL on GPU), SyncBN and gradient accumulation.")
    add_train_args(p)
    return p


def resolve_out(cfg: TrainConfig) -> TrainConfig:
    out = cfg.out or (cfg.resume.parent if cfg.resume else next_run_dir(DEFAULT_RUNS))
    return TrainConfig.from_dict({**cfg.to_dict(), "out": str(out)})


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    cfg = config_from_args(args)
    try:
        if under_torchrun():
            rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
            local_rank = int(os.environ.get("LOCAL_RANK", "0"))
            if "EDGEPORT_SPAWNED" not in os.environ:
                try:
                    validate_inputs(cfg)
                except BadInputError as exc:
                    if rank == 0:
                        print(f"edgeport train: error: {exc}", file=sys.stderr)
                    return exc.exit_code
                if cfg.resume and cfg.out is None:
                    cfg = resolve_out(cfg)
            return worker_main(cfg, rank, world, local_rank)
        validate_inputs(cfg)
        cfg = resolve_out(cfg)
        if cfg.world_size > 1:
            child_argv = list(argv)
            if args.out is None:
                child_argv += ["--out", str(cfg.out)]
            os.environ["EDGEPORT_SPAWNED"] = "1"
            return spawn(child_argv, cfg)
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
        return worker_main(cfg, 0, 1, 0)
    except EdgeportError as exc:
        print(f"edgeport train: error: {exc}", file=sys.stderr)
        return exc.exit_code
