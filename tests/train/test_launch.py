"""Launch and resume rules: ranks from torchrun or mpirun, what a resumed run keeps, the schedule."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from edgeport.errors import BadInputError
from edgeport.train.config import TrainConfig
from edgeport.train.launch import _check_spawn_url, launched_rank, validate_inputs
from edgeport.train.trainer import cosine_lambda, position_schedule

pytestmark = pytest.mark.one_line  # no converter line changes what these test (pyproject.toml)


@pytest.mark.parametrize("env, expected", [
    ({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}, (3, 8, 1, "torchrun")),
    ({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "6", "OMPI_COMM_WORLD_LOCAL_RANK": "2"}, (5, 6, 2, "Open MPI")),
    ({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1"}, (1, 2, 1, "MPICH")),
    ({}, None),
])
def test_ranks_come_from_the_launcher(env, expected):
    assert launched_rank(env) == expected


def test_resume_takes_the_environment_from_the_command_line_and_explicit_overrides():
    saved = TrainConfig(data=Path("old"), device="cuda", backend="nccl", world_size=8, lr=0.01, epochs=10, batch_size=32).to_dict()
    now = TrainConfig(data=Path("new"), device="cpu", world_size=1, lr=0.001, batch_size=16, epochs=None,
                      resume=Path("run/last.pt"), explicit=("data", "device", "lr", "resume"))
    cfg = now.resumed(saved, start_epoch=4)
    assert (cfg.device, cfg.backend, cfg.world_size, str(cfg.data)) == ("cpu", None, 1, "new")
    assert cfg.lr == 0.001 and cfg.batch_size == 32 and cfg.epochs == 10  # not given now: the saved run's
    assert cfg.overrides == ("lr",)


def test_resume_refuses_what_it_cannot_change_and_epochs_already_done():
    saved = TrainConfig(data=Path("d"), arch="pdet-n", epochs=5).to_dict()
    with pytest.raises(BadInputError, match="arch='pdet-n'"):
        TrainConfig(data=Path("d"), arch="pdet-s", explicit=("arch",)).resumed(saved, 2)
    with pytest.raises(BadInputError, match="already trained 5 of 5"):
        TrainConfig(data=Path("d")).resumed(saved, 5)
    # a float64 run stays float64; a float32 run does not become one
    f64 = TrainConfig(data=Path("d"), epochs=5, float64=True).to_dict()
    assert TrainConfig(data=Path("d")).resumed(f64, 2).float64
    with pytest.raises(BadInputError, match="float64=False"):
        TrainConfig(data=Path("d"), float64=True, explicit=("float64",)).resumed(saved, 2)


@pytest.mark.parametrize("saved, now, says", [
    ({"float64": True}, {"amp": "bf16"}, "--amp bf16 and --float64 ask for two precisions"),
    ({"amp": "fp16", "device": "cuda"}, {"device": "cpu"}, "--amp fp16 needs --device cuda"),
])
def test_a_resumed_run_is_checked_as_it_will_go_on(tmp_path, monkeypatch, saved, now, says):
    """The saved options merged with this command line's are what is checked: a float64 run given
    --amp, an fp16 run moved to the CPU -- each one line, exit 2, before any process starts."""
    from edgeport.train import checkpoint

    last = tmp_path / "last.pt"
    last.write_bytes(b"read by the stand-in below")
    args = TrainConfig(data=Path("d"), epochs=5, **saved).to_dict()
    monkeypatch.setattr(checkpoint, "load_resume", lambda path: {"args": args, "epoch": 1})
    cfg = TrainConfig(data=tmp_path, resume=last, **now, explicit=("data", "resume", *now))
    with pytest.raises(BadInputError, match=says):
        validate_inputs(cfg, preflight=False)


def test_loader_workers_by_default(monkeypatch):
    from edgeport import process
    from edgeport.train.trainer import loader_workers

    monkeypatch.setattr(process, "usable_cores", lambda: 16)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.delenv("OMPI_COMM_WORLD_LOCAL_SIZE", raising=False)
    assert loader_workers(TrainConfig(data=Path("d")), 1) == 0, "on the CPU the ranks use every core"
    cuda = TrainConfig(data=Path("d"), device="cuda")
    assert loader_workers(cuda, 1) == 8, "capped at 8"
    assert loader_workers(cuda, 4) == 3, "16 cores among 4 ranks, one left to each"
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # 2 of the 4 ranks on this machine
    assert loader_workers(cuda, 4) == 7
    assert loader_workers(TrainConfig(data=Path("d"), device="cuda", workers=2), 4) == 2, "--workers wins"


def test_schedule_continues_at_the_same_fraction_on_another_world_size():
    model = torch.nn.Linear(2, 2)
    # 10 epochs of 8 steps on 1 GPU; stopped after 4 epochs; resumed on 2 GPUs: 4 steps an epoch
    lam_before = cosine_lambda(10 * 8, 0.01)
    lam_after = cosine_lambda(10 * 4, 0.01)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lam_after)
    position_schedule(opt, sched, 0.1, lam_after, 4 * 4)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1 * lam_before(4 * 8))
    opt.step()
    sched.step()
    assert sched.last_epoch == 17 and opt.param_groups[0]["lr"] == pytest.approx(0.1 * lam_after(17))
    # a new --lr takes effect from where the schedule stands
    position_schedule(opt, sched, 0.02, lam_after, 16)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.02 * lam_after(16)) and sched.get_last_lr() == [opt.param_groups[0]["lr"]]


def test_spawning_refuses_a_remote_rendezvous():
    _check_spawn_url(TrainConfig(data=Path("d"), world_size=2, dist_url="tcp://127.0.0.1:29500"))
    with pytest.raises(BadInputError, match="torchrun --nnodes"):
        _check_spawn_url(TrainConfig(data=Path("d"), world_size=2, dist_url="tcp://10.1.2.3:29500"))


def test_fp16_needs_cuda_and_ranks_need_gpus(monkeypatch, tmp_path):
    with pytest.raises(BadInputError, match="--amp fp16 needs --device cuda"):
        validate_inputs(TrainConfig(data=tmp_path, amp="fp16"), preflight=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(BadInputError, match="4 ranks on this machine but 2 CUDA device.*--backend gloo"):
        validate_inputs(TrainConfig(data=tmp_path, device="cuda", world_size=4), preflight=False)


def test_gloo_ranks_share_gpus_round_robin(monkeypatch, tmp_path):
    """A one-GPU machine still checks DDP + SyncBN: NCCL refuses two ranks on one device, gloo
    carries CUDA tensors, so with gloo the ranks share the GPUs."""
    from edgeport.train.trainer import worker_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    cfg = TrainConfig(data=tmp_path, device="cuda", backend="gloo", world_size=2)
    with pytest.raises(BadInputError) as err:  # gets past the GPU count, to the (empty) data folder
        validate_inputs(cfg, preflight=False)
    assert "CUDA device" not in str(err.value)
    assert [worker_device(cfg, r) for r in (0, 1)] == [torch.device("cuda", 0)] * 2
    assert worker_device(TrainConfig(data=tmp_path), 1) == torch.device("cpu")
    # and the device each rank makes current before any CUDA call is that one, not cuda:RANK
    from edgeport.train.launch import bind_device

    current = []
    monkeypatch.setattr(torch.cuda, "set_device", current.append)
    for rank in (0, 1):
        bind_device(cfg, rank)
    bind_device(TrainConfig(data=tmp_path), 1)  # CPU: no CUDA call
    assert current == [torch.device("cuda", 0)] * 2


_END = """
import atexit, sys
from edgeport.train import launch
atexit.register(lambda: print("teardown", flush=True))
launch._mpi_started = {mpi}
print("trained", end="")  # left in the buffer: exit_process flushes it
launch.exit_process(3)
"""


@pytest.mark.parametrize("mpi, teardown", [(False, False), (True, True)])
@pytest.mark.slow  # a process
def test_a_training_process_ends_without_the_interpreter_teardown_unless_it_started_mpi(mpi, teardown):
    # teardown races gloo's threads releasing the last collectives (SIGABRT at exit); MPI finalises in it
    p = subprocess.run([sys.executable, "-c", _END.format(mpi=mpi)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 3, p.stderr
    assert p.stdout.startswith("trained") and ("teardown" in p.stdout) == teardown
