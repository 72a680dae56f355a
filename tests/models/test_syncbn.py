"""SyncBN proof: two gloo processes, each with part of a batch, against BatchNorm2d on all of it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from torch import nn

from edgeport.convert.passes.revert_syncbn_pass import revert_sync_batchnorm
from edgeport.models.syncbn import SyncBatchNorm, convert_sync_batchnorm

pytestmark = pytest.mark.one_line  # no converter line changes what these test (pyproject.toml)

WORKER = textwrap.dedent(
    """
    import os, sys
    import numpy as np, torch, torch.distributed as dist
    from edgeport.models.syncbn import SyncBatchNorm

    rank, world, split = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["SPLIT"])
    dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=rank, world_size=world)
    data = np.load(sys.argv[2])
    x_all, w_out = torch.from_numpy(data["x"]), torch.from_numpy(data["w_out"])
    part = slice(0, split) if rank == 0 else slice(split, x_all.shape[0])
    bn = SyncBatchNorm(x_all.shape[1], eps=1e-3, momentum=0.2)
    with torch.no_grad():
        bn.weight.copy_(torch.from_numpy(data["gamma"]))
        bn.bias.copy_(torch.from_numpy(data["beta"]))
    bn.train()
    x = x_all[part].clone().requires_grad_(True)
    for _ in range(2):  # two steps: running statistics accumulate
        y = bn(x)
    (y * w_out[part]).sum().backward()
    np.savez(sys.argv[3], y=y.detach().numpy(), gx=x.grad.numpy(), gw=bn.weight.grad.numpy(), gb=bn.bias.grad.numpy(),
             rm=bn.running_mean.numpy(), rv=bn.running_var.numpy(), nbt=bn.num_batches_tracked.numpy())
    dist.destroy_process_group()
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("split", [4, 3], ids=["even-halves", "uneven-3-5"])
def test_two_gloo_processes_match_batchnorm_on_the_whole_batch(tmp_path, split):
    rng = np.random.default_rng(0)
    n, c = 8, 5
    x = (rng.normal(size=(n, c, 6, 7)) * rng.uniform(0.5, 3, size=(1, c, 1, 1)) + rng.normal(size=(1, c, 1, 1))).astype(np.float32)
    w_out = rng.normal(size=x.shape).astype(np.float32)
    gamma, beta = rng.uniform(0.5, 1.5, c).astype(np.float32), rng.normal(size=c).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x, w_out=w_out, gamma=gamma, beta=beta)
    (tmp_path / "worker.py").write_text(WORKER)
    procs = [
        subprocess.Popen(
            [sys.executable, str(tmp_path / "worker.py"), str(tmp_path / "pg"), str(tmp_path / "in.npz"), str(tmp_path / f"out{r}.npz")],
            env=dict(os.environ, RANK=str(r), WORLD_SIZE="2", SPLIT=str(split)),
        )
        for r in range(2)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    outs = [np.load(tmp_path / f"out{r}.npz") for r in range(2)]

    bn = nn.BatchNorm2d(c, eps=1e-3, momentum=0.2)
    with torch.no_grad():
        bn.weight.copy_(torch.from_numpy(gamma))
        bn.bias.copy_(torch.from_numpy(beta))
    xt = torch.from_numpy(x).requires_grad_(True)
    for _ in range(2):
        y = bn(xt)
    (y * torch.from_numpy(w_out)).sum().backward()

    tol = dict(rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.concatenate([o["y"] for o in outs]), y.detach().numpy(), **tol)
    np.testing.assert_allclose(np.concatenate([o["gx"] for o in outs]), xt.grad.numpy(), **tol)
    # parameter gradients stay local; DDP sums (averages) them across ranks
    np.testing.assert_allclose(outs[0]["gw"] + outs[1]["gw"], bn.weight.grad.numpy(), **tol)
    np.testing.assert_allclose(outs[0]["gb"] + outs[1]["gb"], bn.bias.grad.numpy(), **tol)
    for o in outs:
        np.testing.assert_allclose(o["rm"], bn.running_mean.numpy(), **tol)
        np.testing.assert_allclose(o["rv"], bn.running_var.numpy(), **tol)  # unbiased over the global count
        assert int(o["nbt"]) == int(bn.num_batches_tracked) == 2


def test_single_process_and_eval_fall_back_to_batchnorm():
    torch.manual_seed(0)
    x = torch.randn(4, 3, 5, 5)
    sbn, bn = SyncBatchNorm(3), nn.BatchNorm2d(3)
    torch.testing.assert_close(sbn.train()(x), bn.train()(x))
    torch.testing.assert_close(sbn.running_var, bn.running_var)
    torch.testing.assert_close(sbn.eval()(x), bn.eval()(x))


def test_converter_picks_cpu_syncbn_with_identical_state_dict_keys(make_bn_stats):
    from edgeport.models.registry import build_model

    model = make_bn_stats(build_model("pdet-n")[0])
    keys = list(model.state_dict())
    converted = convert_sync_batchnorm(model, "cpu")
    assert sum(isinstance(m, SyncBatchNorm) for m in converted.modules()) == 23
    assert not any(type(m) is nn.BatchNorm2d for m in converted.modules())
    assert list(converted.state_dict()) == keys
    # and convert's revert pass knows this SyncBN too
    reverted, n = revert_sync_batchnorm(converted)
    assert n == 23 and not any(isinstance(m, SyncBatchNorm) for m in reverted.modules())
    assert all(torch.equal(reverted.state_dict()[k], v) for k, v in converted.state_dict().items())
