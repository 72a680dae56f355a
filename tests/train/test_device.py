"""Device bugs without a GPU: the trainer's device-side code on torch's fake CUDA device.

With a CUDA build of torch, ``FakeTensorMode`` with ``torch.device("cuda")`` builds modules
and tensors on a fake CUDA device; forward code runs, and any op that mixes a CPU and a
CUDA tensor raises. Backward does not run there (no CUDA context), so the forward side of
the trainer is tested this way: the loss and its targets, the metric totals and their
all-reduce, evaluation, and the checkpoint's state. Every collective the trainer calls is
audited for the device of its tensors.
"""

from __future__ import annotations

import ast
import contextlib
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist

from edgeport.models.registry import build_model
from edgeport.train import evaluate, trainer
from edgeport.train.targets import build_targets, collate_targets, detection_loss

pytestmark = pytest.mark.skipif(not torch.backends.cuda.is_built(), reason="needs a CUDA build of torch for the fake CUDA device")

# the trainer's code: its own folder, and the layers it builds on (SyncBN lives in models/)
TRAINER_DIRS = (Path(trainer.__file__).parent, Path(build_model.__code__.co_filename).parent)
STRIDES = (8, 16, 32)


@contextlib.contextmanager
def fake_cuda():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True), torch.device("cuda"):
        yield


def _targets(imgsz: int = 64):
    boxes = [np.array([[10, 10, 50, 60]], np.float32), np.array([[30, 5, 60, 40], [0, 0, 20, 20]], np.float32)]
    return collate_targets([build_targets(b, np.zeros(len(b), np.int64), imgsz, STRIDES) for b in boxes])


def test_fake_cuda_catches_a_cross_device_op():
    """The harness itself: a CPU buffer combined with CUDA tensors must raise here."""
    with fake_cuda(), pytest.raises(Exception, match="device"):
        cpu = torch.zeros(2, device="cpu")
        cpu.index_add(0, torch.tensor([0]), torch.ones(1))


def test_loss_and_targets_run_on_the_outputs_device():
    targets = _targets()
    with fake_cuda():
        outs = [torch.randn(2, 6, 64 // s, 64 // s) for s in STRIDES]
        assert outs[0].device.type == "cuda"
        on_device = [{k: v.to("cuda") for k, v in t.items()} for t in targets]  # as the trainer moves them
        per_image, parts = detection_loss(outs, on_device)
        assert per_image.device.type == "cuda" and per_image.shape == (2,)
        assert all(p.device.type == "cuda" for p in parts.values())


def test_loss_under_bf16_autocast_outputs_is_float32():
    targets = _targets()
    with fake_cuda():
        outs = [torch.randn(2, 6, 64 // s, 64 // s, dtype=torch.bfloat16) for s in STRIDES]
        per_image, _ = detection_loss(outs, [{k: v.to("cuda") for k, v in t.items()} for t in targets])
        assert per_image.dtype == torch.float32


class CollectiveAudit:
    """Stands in for torch.distributed's collectives; records the device of every tensor."""

    NAMES = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce", "gather", "scatter")

    def __init__(self, expected: str):
        self.expected = expected
        self.calls: list[tuple[str, str]] = []

    def install(self, monkeypatch) -> "CollectiveAudit":
        for name in self.NAMES:
            monkeypatch.setattr(dist, name, self._recorder(name))
        return self

    def _recorder(self, name):
        def record(tensor, *args, **kwargs):
            tensors = tensor if isinstance(tensor, (list, tuple)) else [tensor]
            for t in tensors:
                self.calls.append((name, t.device.type))
                assert t.device.type == self.expected, (
                    f"dist.{name} got a {t.device.type} tensor; the process group (NCCL) needs {self.expected} tensors"
                )
        return record


def test_metric_totals_are_reduced_on_the_group_device(monkeypatch):
    audit = CollectiveAudit("cuda").install(monkeypatch)
    with fake_cuda():
        totals = torch.zeros(5, dtype=torch.float64, device=trainer.worker_device(_cuda_cfg(), 0))
        assert totals.device.type == "cuda"
        reduced = trainer.reduce_totals(totals)
    assert audit.calls == [("all_reduce", "cuda")]
    assert reduced.device.type == "cpu"


def _cuda_cfg():
    from edgeport.train.config import TrainConfig

    return TrainConfig(data=Path("unused"), device="cuda")


def test_evaluation_runs_on_the_models_device():
    with fake_cuda():
        model, _ = build_model("pdet-n")
        assert next(model.parameters()).device.type == "cuda"
        x = torch.from_numpy(np.zeros((1, 3, 64, 64), np.float32))  # what predict() feeds: a CPU batch
        outs = evaluate.model_outputs(model.eval(), x)
    assert [o.device.type for o in outs] == ["cpu"] * 3
    assert [tuple(o.shape) for o in outs] == [(1, 6, 8, 8), (1, 6, 4, 4), (1, 6, 2, 2)]


def test_checkpoint_state_is_moved_to_the_cpu():
    with fake_cuda():
        model, _ = build_model("pdet-n")
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for p in model.parameters():
            opt.state[p]["momentum_buffer"] = torch.zeros_like(p)
        state = trainer.to_cpu({"model": model.state_dict(), "optimizer": opt.state_dict()})
    tensors = list(state["model"].values()) + [t for s in state["optimizer"]["state"].values() for t in s.values()]
    assert tensors and all(t.device.type == "cpu" for t in tensors)


# Every call of a torch.distributed collective in train/ and models/, by the function it is in, and the
# test above (or the reason) that covers the device of its tensors. A new call site fails
# test_every_collective_call_is_audited until it is listed here with its proof.
AUDITED = {
    ("trainer.py", "reduce_totals", "all_reduce"): "test_metric_totals_are_reduced_on_the_group_device",
    ("trainer.py", "run_worker", "barrier"): "no tensor; NCCL is given the rank's device_ids",
    ("evaluate.py", "evaluate_sharded", "gather_object"): "objects: torch moves them to the current CUDA device",
    ("launch.py", "worker_main", "broadcast_object_list"): "objects: torch moves them to the current CUDA device",
    ("syncbn.py", "forward", "all_reduce"): "edgeport's SyncBN runs on CPU only (convert_sync_batchnorm picks torch's on CUDA)",
    ("syncbn.py", "backward", "all_reduce"): "edgeport's SyncBN runs on CPU only (convert_sync_batchnorm picks torch's on CUDA)",
}
COLLECTIVES = {"all_reduce", "broadcast", "all_gather", "all_gather_object", "all_gather_into_tensor", "reduce_scatter",
               "reduce", "gather", "gather_object", "scatter", "broadcast_object_list", "barrier", "all_to_all"}


def _collective_calls() -> set[tuple[str, str, str]]:
    found = set()
    for path in (p for d in TRAINER_DIRS for p in d.glob("*.py")):
        tree = ast.parse(path.read_text())
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in COLLECTIVES
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == "dist"):
                    found.add((path.name, func.name, node.func.attr))
    return found


def test_every_collective_call_is_audited():
    calls = _collective_calls()
    unaudited = sorted(calls - set(AUDITED))
    assert not unaudited, f"collective calls with no device audit: {unaudited}"
    stale = sorted(set(AUDITED) - calls)
    assert not stale, f"audit entries for calls that no longer exist: {stale}"


def test_cpu_syncbn_is_never_used_on_cuda():
    from edgeport.models.syncbn import SyncBatchNorm, convert_sync_batchnorm

    with fake_cuda():
        model, _ = build_model("pdet-n")
        converted = convert_sync_batchnorm(model, torch.device("cuda"))
    kinds = {type(m) for m in converted.modules()}
    assert torch.nn.SyncBatchNorm in kinds and SyncBatchNorm not in kinds
