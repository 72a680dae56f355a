"""Shared fixtures: small models and checkpoints in every layout the loader accepts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from edgeport.models.registry import build_model

REPO = Path(__file__).resolve().parents[1]
# board runtimes (`make setup-boards`) live in the checkout, never in the user's home
os.environ.setdefault("EDGEPORT_HOME", str(REPO / ".edgeport"))
DEMO_CKPT = REPO / "models" / "weights" / "pdet_n_person.pt"


def perturb_bn(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Give every BatchNorm non-trivial statistics and affine parameters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                n = m.num_features
                m.running_mean.copy_(torch.randn(n, generator=g) * 0.5)
                m.running_var.copy_(torch.rand(n, generator=g) * 2 + 0.1)
                m.weight.copy_(torch.rand(n, generator=g) + 0.5)
                m.bias.copy_(torch.randn(n, generator=g) * 0.2)
                m.num_batches_tracked.fill_(7)
    return model


@pytest.fixture
def pdet_n() -> torch.nn.Module:
    torch.manual_seed(0)
    model, _ = build_model("pdet-n")
    return perturb_bn(model).eval()


@pytest.fixture
def images() -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.random((2, 3, 64, 64), dtype=np.float32)


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the installed console entry point in a fresh process, as a user would."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("EDGEPORT_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "edgeport.cli", *args],
        cwd=cwd or REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def save_random_checkpoint(path: Path, arch: str, seed: int) -> Path:
    """An untrained ``arch`` with non-trivial BatchNorm, saved as the trainer saves (names its arch)."""
    torch.manual_seed(seed)
    model, config = build_model(arch)
    perturb_bn(model, seed)
    torch.save({"arch": arch, "config": config, "model": model.state_dict()}, path)
    return path


@pytest.fixture(scope="session")
def random_checkpoint(tmp_path_factory):
    """``random_checkpoint(arch, seed)`` -> path of a saved untrained detector."""
    root = tmp_path_factory.mktemp("checkpoints")
    return lambda arch, seed=0: save_random_checkpoint(root / f"{arch}-{seed}.pt", arch, seed)


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture
def make_bn_stats():
    return perturb_bn


@pytest.fixture(scope="session")
def demo_ckpt() -> Path:
    return DEMO_CKPT


@pytest.fixture(scope="session")
def cli_session():
    return run_cli


@pytest.fixture
def run_inproc(capsys, monkeypatch):
    """``edgeport ARGS`` in this process, returning (code, stdout, stderr): fast, for every case
    a fresh process adds nothing to (a few tests run the real console script as a smoke test)."""
    from types import SimpleNamespace

    from edgeport import cli

    def run(*argv):
        capsys.readouterr()
        monkeypatch.delenv("EDGEPORT_DEBUG", raising=False)
        try:
            code = cli.main([str(a) for a in argv])
        except SystemExit as exc:  # argparse usage errors
            code = exc.code
        cap = capsys.readouterr()
        return SimpleNamespace(code=int(code), out=cap.out, err=cap.err, returncode=int(code), stdout=cap.out, stderr=cap.err)

    return run
