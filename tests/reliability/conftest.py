"""The red-team suite's tools: a user's workspace, a byte-level inventory, one-line checks.

Every case asserts three things: the exit code, that stderr ends in exactly one error line
(progress lines before it are allowed, a traceback never), and that no file the user had
was lost or changed -- compared byte for byte, by SHA-256 of every file under the workspace.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


def inventory(root: Path, *, by_stat: tuple[Path, ...] = ()) -> dict[str, str]:
    """Relative path -> SHA-256 of every file (and symlink target) under ``root``. A file in
    ``by_stat`` (a sparse file of gigabytes, too large to hash in a test) by its size, blocks on
    disk and modification time instead: any write changes them."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            out[rel] = "link:" + os.readlink(path)
        elif path in by_stat:
            st = path.stat()
            out[rel] = f"stat:{st.st_size}:{st.st_blocks}:{st.st_mtime_ns}"
        elif path.is_file():
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def assert_kept(before: dict[str, str], after: dict[str, str]) -> None:
    """Every file the user had is still there, byte for byte."""
    lost = sorted(k for k in before if k not in after)
    changed = sorted(k for k in before if k in after and after[k] != before[k])
    assert not lost and not changed, f"user files lost: {lost}; changed: {changed}"


def assert_one_line(result: Result, code: int, *needles: str) -> str:
    """Exit ``code``; stderr's last line is the only error line; no traceback; it says ``needles``."""
    assert result.code == code, f"exit {result.code}, expected {code}; stderr:\n{result.err}"
    assert "Traceback" not in result.err, result.err
    lines = [line for line in result.err.splitlines() if line.strip()]
    errors = [line for line in lines if "error:" in line]
    assert len(errors) == 1 and lines[-1] == errors[0], f"expected one error line, last; stderr:\n{result.err}"
    for needle in needles:
        assert needle in errors[0], f"{needle!r} not in {errors[0]!r}"
    return errors[0]


@contextmanager
def within(seconds: int):
    """Fail (instead of hanging the suite) if the block runs longer than ``seconds``."""
    def expired(*_):
        raise TimeoutError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def run_cli(*argv: str, cwd: Path, timeout: float = 600, env: dict | None = None, prefix: tuple[str, ...] = ()) -> Result:
    """``edgeport ARGS`` in a fresh process, as a user runs it."""
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    full_env.pop("EDGEPORT_DEBUG", None)
    proc = subprocess.run([*prefix, sys.executable, "-m", "edgeport.cli", *map(str, argv)], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)
    return Result(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def save_pdet(make_bn_stats):
    """``save_pdet(path, seed, tamper=fn)``: a random pdet-n with non-trivial BatchNorm, saved
    as a DDP script saves it (``module.`` keys under ``model``)."""
    from edgeport.models.registry import build_model

    def save(path: Path, seed: int = 0, *, tamper=None) -> Path:
        torch.manual_seed(seed)
        model, _ = build_model("pdet-n")
        make_bn_stats(model, seed)
        sd = {"module." + k: v for k, v in model.state_dict().items()}
        if tamper:
            tamper(sd)
        torch.save({"model": sd, "epoch": 3}, path)
        return path

    return save


def write_png(path: Path, size: int = 64, seed: int = 0) -> Path:
    from PIL import Image

    Image.fromarray(np.random.default_rng(seed).integers(0, 255, (size, size, 3), dtype=np.uint8)).save(path)
    return path


@pytest.fixture
def workspace(tmp_path, monkeypatch, save_pdet) -> Path:
    """A user's folder: a checkpoint, calibration images, their own notes. The cwd of the test."""
    ws = tmp_path / "ws"
    ws.mkdir()
    save_pdet(ws / "model.pt")
    (ws / "calib").mkdir()
    for i in range(3):
        write_png(ws / "calib" / f"img{i}.png", seed=i)
    (ws / "notes.txt").write_text("the user's own file\n")
    monkeypatch.chdir(ws)
    return ws


@pytest.fixture
def data(workspace) -> Path:
    """A small dataset (8 train, 2 val scenes at 64 px) for ``train``'s and ``validate``'s runs."""
    from edgeport.models.synth import make_scene
    from edgeport.validate.datasets import write_dataset

    rng = np.random.default_rng(0)
    root = workspace / "data"
    write_dataset(root, {"train": [make_scene(rng, 64) for _ in range(8)], "val": [make_scene(rng, 64) for _ in range(2)]}, size=64)
    return root
