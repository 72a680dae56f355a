"""Shared fixtures: small models and checkpoints in every layout the loader accepts."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

# Before torch starts its threads: the suite runs as two workers on two cores (`make test`: -n 2),
# each worker and every process it starts on one core's worth of OpenMP threads. With torch's
# default (a thread per core in each process) they spin beside each other: the 3.12 slow suite took
# 239 s (463 s of CPU) against 167 s (319 s) with one. Ultralytics sets the same on import, so the
# zoo ran so already. A value the caller set is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from edgeport.models.registry import build_model  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# board runtimes and converters are found where the CLI finds them (`make setup-boards` installs
# there): $EDGEPORT_HOME, else ~/.local/share/edgeport. A test that installs or breaks one points
# EDGEPORT_HOME at a folder of its own.
DEMO_CKPT = REPO / "models" / "weights" / "pdet_n_person.pt"


def fc_model():
    """float32 x[1,4] -> FULLY_CONNECTED(w[3,4], b[3]) -> y[1,3], as a ``Graph``: weights a runtime reads."""
    from edgeport.ops.tflite_graph import Graph

    g = Graph.empty()
    x = g.add_tensor("x", (1, 4), "float32")
    w = g.constant("w", np.arange(12, dtype=np.float32).reshape(3, 4))
    bias = g.constant("b", np.ones(3, np.float32))
    y = g.add_tensor("y", (1, 3), "float32")
    g.add(g.new_op("FULLY_CONNECTED", [x, w, bias], [y], "FullyConnectedOptions"))
    g.set_io([x], [y])
    return g


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


def make_report(cos=0.999999, rel=1e-6, passed=True, recall=1.0, map50=0.8, extra=0) -> dict:
    """The smallest ``edgeport.parity/2`` report the gate accepts: the PyTorch row and one float32
    row with one output, boxes and mAP; its own tolerance that of float32."""
    tol = {"max_abs_rel": 1e-4, "min_cosine": 0.99999}
    out = {"name": "p3", "cosine": cos, "max_abs_rel": rel, "max_abs": rel * 10, "mean_abs": rel, "rmse": rel, "p99_abs": rel,
           "ref_max_abs": 10.0, "snr_db": "inf", "passed": passed, "tolerance": tol}
    row = {"variant": "float32", "runtime": "tflite", "passed": passed, "outputs": [out],
           "detections": {"recall": recall, "matched": round(36 * recall), "reference_boxes": 36, "extra": extra},
           "map": {"map50": map50, "map50_95": 0.4}}
    return {"schema": "edgeport.parity/2", "passed": passed,
            "model": {"arch": "pdet-n", "weights_sha256": "ab" * 32, "outputs": ["p3"]}, "inputs": {"shape": [3, 64, 64]},
            "results": [{"variant": "reference", "runtime": "pytorch", "passed": True, "outputs": []}, row]}


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


# -- an OpenSSH server on 127.0.0.1, the "board" of the SSH runner's tests --------------------------

SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    if SSHD is None or shutil.which("ssh") is None:
        pytest.skip("no OpenSSH server/client: apt install openssh-server openssh-client (.ci/run does)")
    root = tmp_path_factory.mktemp("sshd")
    host_key, client_key, stranger = _keygen(root / "host"), _keygen(root / "client"), _keygen(root / "stranger")
    (root / "authorized_keys").write_text((root / "client.pub").read_text())
    port = free_port()
    (root / "sshd_config").write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {host_key}", f"AuthorizedKeysFile {root / 'authorized_keys'}",
        f"PidFile {root / 'sshd.pid'}", "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no",
        "PermitRootLogin prohibit-password", "StrictModes no", "LogLevel ERROR",
    ]) + "\n")
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege-separation folder
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(root / "sshd_config")], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.skip(f"sshd did not start: {proc.stderr.read().strip()[-300:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    yield {"port": port, "key": client_key, "stranger": stranger, "root": root}
    proc.terminate()
    proc.wait(timeout=10)
