"""No network at run time: convert, validate and train work with none, and open no socket beyond loopback."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

from edgeport.models.synth import make_scene
from edgeport.validate.datasets import write_dataset

from .conftest import run_cli

pytestmark = pytest.mark.slow


# A new network namespace with only its loopback up: what an air-gapped machine has. The
# trainer's process group rendezvous on 127.0.0.1 needs that loopback.
NO_NETWORK = ("unshare", "-rn", "sh", "-c", 'ip link set lo up && exec "$@"', "sh")


def _can_unshare() -> bool:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    return subprocess.run([*NO_NETWORK, "true"], capture_output=True).returncode == 0


def test_convert_validate_and_train_work_with_no_network_at_all(workspace):
    if not _can_unshare():
        pytest.skip("unshare -rn (a network namespace) or ip is not available here")
    rng = np.random.default_rng(0)
    write_dataset(workspace / "data", {"train": [make_scene(rng, 64) for _ in range(4)], "val": [make_scene(rng, 64) for _ in range(2)]},
                  size=64)
    no_net = NO_NETWORK
    r = run_cli("convert", "model.pt", "--arch", "pdet-n", "--imgsz", "64", "--out", "conv", cwd=workspace, prefix=no_net)
    assert r.code == 0, r.err[-3000:]
    r = run_cli("validate", "model.pt", "--arch", "pdet-n", "--tflite", "conv/model_int8.tflite", "--data", "data", "--out", "val",
                cwd=workspace, prefix=no_net)
    assert r.code == 0, r.err[-3000:]
    r = run_cli("train", "--data", "data", "--imgsz", "64", "--epochs", "1", "--batch-size", "2", "--out", "tr", cwd=workspace,
                prefix=no_net)
    assert r.code == 0, r.err[-3000:]


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_convert_opens_no_socket_beyond_loopback(workspace):
    trace = workspace.parent / "connect.trace"
    # --seccomp-bpf (strace 5.3+): only the traced calls stop the process, not its every system call
    # (TensorFlow's threads make many): the convert took 41 s under strace on Python 3.11 without it
    fast = ("--seccomp-bpf",) if "--seccomp-bpf" in subprocess.run(["strace", "-h"], capture_output=True, text=True).stdout else ()
    r = run_cli("convert", "model.pt", "--arch", "pdet-n", "--imgsz", "64", "--out", "conv", cwd=workspace,
                prefix=("strace", "-f", *fast, "-qq", "-e", "trace=connect,sendto", "-o", str(trace)))
    assert r.code == 0, r.err[-3000:]
    text = trace.read_text()
    inet = [line for line in text.splitlines() if re.search(r"AF_INET6?\b", line)]
    beyond = [line for line in inet if not re.search(r'inet_addr\("127\.|inet_pton\(AF_INET6, "::1"', line)]
    assert not beyond, "network access at run time:\n" + "\n".join(beyond[:5])
