"""Starting the trainer: under torchrun or mpirun, as N local processes, or as one.

- ``torchrun --nproc-per-node N [--nnodes M --node-rank K --rdzv-endpoint HOST:PORT] -m
  edgeport.train ...``: torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
  MASTER_PORT; each process is a worker. This is the way to train on several machines.
- ``mpirun -np N ... python -m edgeport.train ...``: ranks come from Open MPI's
  ``OMPI_COMM_WORLD_*`` or MPICH's ``PMI_*`` variables; ``--backend mpi`` (a torch built
  with MPI) or gloo/NCCL with MASTER_ADDR/MASTER_PORT exported to every rank.
- ``edgeport train --world-size N``: this process checks the inputs, claims the run folder,
  picks a free port, starts N workers on this machine (ranks 0..N-1) and watches them: when
  one dies, the others are stopped at once and the job exits non-zero.
- ``--world-size 1``: one worker in this process (a process group of one, so the DDP code
  path and its checks are the same).
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
from typing import NoReturn
from urllib.parse import urlparse

from edgeport.cliargs import Parser, explicit_options
from edgeport.errors import BadInputError, EdgeportError, error_line, report
from edgeport.folders import (
    MARKER,
    OUTPUTS,
    FolderLock,
    check_out,
    claim_run_dir,
    clear_owned,
    creating,
    discard_run,
    lock_folder,
    make_parents,
    owned,
    read_marker,
    record_outputs,
    release_claim,
    remove_empty,
    remove_transient,
    write_marker,
)
from edgeport.process import Terminated, die_with, exit_now, handle_sigterm
from edgeport.text import shown
from edgeport.train.config import TrainConfig, add_train_args, config_from_args
from edgeport.train.rendezvous import RendezvousError, check_store_folder, env_seconds, join, new_store_file, remove_store_file

DEFAULT_RUNS = Path("runs/train")
PG_TIMEOUT = _dt.timedelta(seconds=env_seconds("EDGEPORT_PG_TIMEOUT_S", 300.0))
STOP_GRACE_S = 5.0
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", ""}
# (rank, world size, local rank) variables of the launchers edgeport runs under
LAUNCHER_ENV = (
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
    ("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("MPICH", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
)
# whether this process started MPI (``--backend mpi``): see exit_process
_mpi_started = False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launched_rank(env=None) -> tuple[int, int, int, str] | None:
    """(rank, world size, local rank, launcher) when started by torchrun or mpirun, else None."""
    env = os.environ if env is None else env
    for name, rank, world, local in LAUNCHER_ENV:
        if rank in env and world in env:
            try:
                got = int(env[rank]), int(env[world]), int(env.get(local, "0")), name
            except ValueError:
                raise BadInputError(f"{name} variables {rank}={shown(env[rank])} {world}={shown(env[world])} "
                                    f"{local}={shown(env.get(local, '0'))} are not whole numbers") from None
            if not (got[1] >= 1 and 0 <= got[0] < got[1] and got[2] >= 0):
                raise BadInputError(f"{name} variables {rank}={got[0]} {world}={got[1]}: a rank is 0..{world}-1 and "
                                    f"{world} at least 1")
            return got
    return None


def validate_inputs(cfg: TrainConfig, *, local_world: int | None = None, preflight: bool = True) -> None:
    """Fail fast, once, before any process starts: on the run as it will go on (a resumed run's
    saved options merged with this command line's, as each rank merges them)."""
    from edgeport.models.registry import REGISTRY, arch_names
    from edgeport.validate.datasets import load_split
    from edgeport.validate.datasets import preflight as scan_images

    for path, flag in ((cfg.weights, "--weights"), (cfg.resume, "--resume")):
        if path is not None and not path.is_file():
            raise BadInputError(f"{flag} {str(path)!r} does not exist")
    if cfg.resume is not None:
        from edgeport.train.checkpoint import load_resume

        saved = load_resume(cfg.resume)
        cfg = cfg.resumed(saved["args"], saved["epoch"])  # refuses what a resumed run cannot change
    if cfg.arch not in REGISTRY:
        raise BadInputError(f"unknown architecture {shown(cfg.arch)}; valid: {', '.join(arch_names())}")
    check_store_folder(cfg.dist_url)  # before any rank waits on it
    stride = max(REGISTRY[cfg.arch].config.strides)
    if cfg.imgsz % stride:
        raise BadInputError(f"--imgsz {cfg.imgsz} is not a multiple of the model's stride {stride}")
    local_world = cfg.world_size if local_world is None else local_world
    if cfg.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise BadInputError("--device cuda but no CUDA device is visible; use --device cpu")
        # NCCL refuses two ranks on one device; gloo carries CUDA tensors, so ranks may share GPUs
        if local_world > torch.cuda.device_count() and cfg.resolved_backend != "gloo":
            raise BadInputError(f"{local_world} ranks on this machine but {torch.cuda.device_count()} CUDA device(s) visible; "
                                f"{cfg.resolved_backend} runs one rank per GPU: pass --world-size {torch.cuda.device_count()} "
                                f"or fewer, or --backend gloo to let ranks share GPUs")
    if cfg.amp == "fp16" and cfg.device != "cuda":
        raise BadInputError("--amp fp16 needs --device cuda; use --amp bf16 on the CPU")
    if cfg.amp and cfg.float64:
        raise BadInputError(f"--amp {cfg.amp} and --float64 ask for two precisions; pass one of them "
                            f"(a resumed run keeps the one it was trained in)")
    if cfg.resolved_backend == "mpi":
        import torch.distributed as dist

        if not dist.is_mpi_available():
            raise BadInputError("--backend mpi but this torch build has no MPI support; use gloo (cpu) or nccl (cuda)")
    if cfg.resolved_backend == "nccl" and cfg.device != "cuda":
        raise BadInputError("--backend nccl needs --device cuda; use gloo on cpu")
    train = load_split(cfg.data, "train", cfg.num_classes)
    val = load_split(cfg.data, "val", cfg.num_classes)
    if preflight:
        scan_images(train + val)


def _check_spawn_url(cfg: TrainConfig) -> Path | None:
    """Where the ranks this process starts will meet, checked before any starts; returns the file
    store the run makes (None for a TCP store), to be removed when it ends."""
    store_file = new_store_file(cfg.dist_url)
    url = urlparse(cfg.dist_url)
    if cfg.world_size > 1 and url.scheme == "tcp" and (url.hostname or "") not in LOCAL_HOSTS:
        raise BadInputError(f"--dist-url {shown(cfg.dist_url, 120)}: `edgeport train --world-size N` starts ranks 0..N-1 on "
                            f"this machine only; to train on several machines launch every node with torchrun --nnodes "
                            f"(docs/training.md, 'Several machines')")
    return store_file


def prepare_out(cfg: TrainConfig, *, force: bool) -> tuple[TrainConfig, bool, FolderLock]:
    """Claim or check the run folder and lock it for this run's life (release it when the run ends);
    returns the config with ``out`` set, whether the folder was claimed, and the lock. A folder is reused only with
    ``--resume`` (its own) or ``--force`` (an earlier edgeport run's, whose files are deleted),
    never while another run holds it; a resumed one is cleaned of what a killed run left half-written.
    """
    inputs = (cfg.data, cfg.weights)
    claimed = False
    if cfg.out is None and cfg.resume is None:
        with creating(DEFAULT_RUNS, "the default run folder"):
            target = claim_run_dir(DEFAULT_RUNS, "train")
            try:
                lock = lock_folder(target, "train")
            except BaseException:
                release_claim(target)
                raise
        claimed = True
    elif cfg.resume is not None and (cfg.out is None or Path(cfg.out).resolve() == cfg.resume.resolve().parent):
        target = cfg.resume.resolve().parent  # continuing the run in its own folder
        marker = read_marker(target)
        if marker is not None and marker.command != "train":
            raise BadInputError(f"--resume {str(cfg.resume)!r}: its folder was made by edgeport {marker.command}, not train; "
                                f"pass the last.pt of a training run")
        if marker is None:
            write_marker(target, "train")
        lock = lock_folder(target, "train", "--resume's run folder")
        remove_transient(target)
        # the run's own files, as they are: resuming adopts them (they are written over from now on)
        record_outputs(target, *[n for n in OUTPUTS["train"] if (target / n).is_file()])
    else:
        target = check_out(cfg.out, command="train", force=force, inputs=inputs)
        existed = target.is_dir()
        created: list[Path] = []
        lock = None
        try:
            with creating(cfg.out):  # /proc, a read-only or full disk: the --out given, exit 2
                created = make_parents(target)
                target.mkdir(exist_ok=True)
                if not (target / MARKER).exists():
                    write_marker(target, "train")
                lock = lock_folder(target, "train")
            if force and existed and owned(target, "train"):
                remove_transient(target)
                clear_owned(target, "train")
        except BaseException:
            if lock is not None:
                lock.release()
            if not existed:
                release_claim(target)
                remove_empty(created)
            raise
        claimed = not existed
    return TrainConfig.from_dict({**cfg.to_dict(), "out": str(target)}), claimed, lock


def bind_device(cfg: TrainConfig, local_rank: int) -> None:
    """Make this rank's GPU current before any CUDA call (round-robin when gloo ranks share GPUs:
    ``trainer.worker_device``)."""
    if cfg.device != "cuda":
        return
    import torch

    from edgeport.train.trainer import worker_device

    if cfg.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before cuBLAS starts
    torch.cuda.set_device(worker_device(cfg, local_rank))


def worker_main(cfg: TrainConfig, rank: int, world: int, local_rank: int, *, prepare: bool = False, force: bool = False) -> int:
    import torch.distributed as dist

    from edgeport.train.trainer import run_worker

    global _mpi_started
    bind_device(cfg, local_rank)
    claimed, lock, ok = False, None, False
    try:
        if cfg.resolved_backend == "mpi":
            _mpi_started = True
            dist.init_process_group("mpi", timeout=PG_TIMEOUT)  # MPI itself knows rank and size
            rank, world = dist.get_rank(), dist.get_world_size()
        else:
            # join first: torch's own rendezvous waits inside C++, deaf to signals (``rendezvous``)
            store = join(cfg.dist_url, rank, world)
            store.set_timeout(PG_TIMEOUT)
            dist.init_process_group(cfg.resolved_backend, store=dist.PrefixStore("default_pg", store), timeout=PG_TIMEOUT,
                                    rank=rank, world_size=world)
        if prepare:
            # under torchrun/mpirun: rank 0 claims or checks the folder and holds its lock; every rank learns the verdict
            box: list = [None, None]
            if rank == 0:
                try:
                    prepared, claimed, lock = prepare_out(cfg, force=force)
                    box = [str(prepared.out), None]
                except BadInputError as exc:
                    box = [None, str(exc)]
            dist.broadcast_object_list(box, src=0)
            if box[1] is not None:
                raise BadInputError(box[1])
            cfg = TrainConfig.from_dict({**cfg.to_dict(), "out": box[0]})
        run_worker(cfg, rank, world, local_rank)
        ok = True
    except EdgeportError as exc:
        # bad input is the same on every rank: rank 0 says it; a rendezvous each rank waited out alone
        if rank == 0 or not isinstance(exc, BadInputError) or isinstance(exc, RendezvousError):
            where = f" (rank {rank} of {world})" if world > 1 else ""
            print(error_line("edgeport train", exc, tail=where), file=sys.stderr, flush=True)
        return exc.exit_code
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        if lock is not None:
            lock.release()
        if claimed and not ok:
            discard_failed(Path(cfg.out))
    return 0


def discard_failed(out: Path) -> None:
    """A run that failed in a folder it made, before writing a checkpoint, leaves nothing behind
    (not even the marker); one with a checkpoint keeps it, to resume from."""
    if not (out / "last.pt").is_file():
        discard_run(out, "train")


def die_with_launcher() -> None:
    """In a worker ``edgeport train --world-size N`` started: die when the launcher dies, however it
    dies (``process.die_with``), so no rank goes on training and writing the run folder alone."""
    launcher = os.environ.get("EDGEPORT_SPAWNED", "")
    if launcher.isdigit():
        die_with(int(launcher))


def spawn(argv: list[str], cfg: TrainConfig) -> int:
    """Start ``cfg.world_size`` workers on this machine and watch them; they die with this process."""
    port = free_port()
    procs: list[subprocess.Popen] = []
    for rank in range(cfg.world_size):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(cfg.world_size),
                   LOCAL_WORLD_SIZE=str(cfg.world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   PYTHONUNBUFFERED="1", EDGEPORT_SPAWNED=str(os.getpid()))
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
    except (KeyboardInterrupt, Terminated):
        stop_all(signal.SIGINT)
        raise


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="edgeport train", description="Train a detector with DDP (gloo on CPU, NCCL on GPU), SyncBN and gradient accumulation.")
    add_train_args(p)
    return p


def _run(argv: list[str], args: argparse.Namespace, cfg: TrainConfig) -> int:
    launched = launched_rank()
    if launched is not None:
        rank, world, local_rank, _ = launched
        spawned = "EDGEPORT_SPAWNED" in os.environ
        if not spawned:
            local_world = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", "1")))
            try:
                validate_inputs(cfg, local_world=local_world, preflight=rank == 0)
            except BadInputError as exc:
                if rank == 0:
                    print(error_line("edgeport train", exc), file=sys.stderr)
                return exc.exit_code
        return worker_main(cfg, rank, world, local_rank, prepare=not spawned, force=args.force)
    validate_inputs(cfg)
    store_file = _check_spawn_url(cfg)
    cfg, claimed, lock = prepare_out(cfg, force=args.force)
    code = None
    try:
        with lock:  # held while the run lasts: no other run replaces or resumes this folder
            if cfg.world_size > 1:
                code = spawn([*argv, "--out", str(cfg.out)], cfg)
            else:
                os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
                code = worker_main(cfg, 0, 1, 0)
        return code
    finally:
        remove_store_file(store_file)  # every rank has ended
        if claimed and code != 0:
            discard_failed(Path(cfg.out))


def exit_process(code: int) -> NoReturn:
    """End a training process (a worker or their launcher) with ``code``, skipping the interpreter's teardown.

    When teardown begins, gloo's worker threads may still be releasing the last collectives' work:
    the final barrier holds the evaluation's ``gather_object``, whose tensors Python also saw, and
    releasing them needs the GIL. CPython ends a thread that asks for the GIL during finalisation
    with ``pthread_exit``, whose unwinding through a noexcept destructor is ``std::terminate``:
    SIGABRT, "terminate called without an active exception", a finished run reported as a failed
    rank (docs/measured.md).
    By now the process group is destroyed and every file closed, so skipping teardown
    loses nothing, as multiprocessing's children skip it. After MPI the interpreter exits normally:
    torch calls ``MPI_Finalize`` from an atexit handler, and mpirun reports a rank that skips it as
    failed."""
    if _mpi_started:
        sys.exit(code)
    exit_now(code)


def main(argv: list[str] | None = None) -> int:
    handle_sigterm()
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    cfg = config_from_args(args, explicit_options(parser, argv))
    try:
        return _run(argv, args, cfg)
    except KeyboardInterrupt:
        print("edgeport train: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print("edgeport train: terminated", file=sys.stderr)
        return 143
    except Exception as exc:  # one line and an honest exit code, never a traceback
        if os.environ.get("EDGEPORT_DEBUG"):
            raise
        return report("edgeport train", exc)
