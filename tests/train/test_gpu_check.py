"""scripts/gpu_check.sh, before GPU minutes are spent on it: its CPU smoke mode, run in an
environment like the lent GPU machine's (its Python, torch, numpy, pillow, rich, matplotlib and
the few others it has; edgeport not installed; the wheels of scripts/gpu_wheels.txt), so that a
missing import fails here. The GPU-only figures (NCCL, images/s per GPU) come from the machine.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
# what the lent machine's python3 has (issue 24; scripts/gpu_wheels.txt), where installed here
MACHINE = ("torch", "torchvision", "numpy", "pillow", "rich", "matplotlib", "onnx", "onnxruntime", "timm", "pytest",
           "hypothesis", "mpi4py", "scipy")


def _closure(names) -> list[md.Distribution]:
    """The installed distributions ``names`` need, with what they require (markers evaluated)."""
    seen: dict[str, md.Distribution] = {}
    todo = [(n, frozenset()) for n in names]
    while todo:
        name, extras = todo.pop()
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in seen and not extras:
            continue
        seen[key] = dist
        for req in map(Requirement, dist.requires or ()):
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in (extras or {""})):
                todo.append((req.name, frozenset(req.extras)))
    return list(seen.values())


def machine_like_env(root: Path, extra: list[str]) -> Path:
    """A venv of this Python whose site-packages sees only the machine's packages (linked from
    this environment, nothing copied or downloaded) and ``extra``; edgeport is not among them."""
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(root / "env")], check=True)
    shelf = root / "site"
    shelf.mkdir()
    here = Path(sysconfig.get_paths()["purelib"])
    for dist in _closure([*MACHINE, *extra]):
        tops = {Path(f).parts[0] for f in dist.files or () if not str(f).startswith("..")}
        for top in tops:
            src = here / top
            if src.exists() and not (shelf / top).exists():
                (shelf / top).symlink_to(src)
    python = root / "env" / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True,
                          text=True, check=True).stdout.strip()
    Path(site, "machine.pth").write_text(f"{shelf}\n")
    return python


def _wheel_list() -> list[str]:
    lines = (ROOT / "scripts" / "gpu_wheels.txt").read_text().splitlines()
    return [Requirement(line.split("#")[0]).name for line in lines if line.split("#")[0].strip()]


@pytest.mark.slow  # several training processes, about a minute
@pytest.mark.skipif(sys.version_info < (3, 12), reason="the lent machine's python3 is 3.12: runs in the 3.12 suite")
def test_gpu_check_smoke_runs_where_edgeport_is_not_installed(tmp_path):
    python = machine_like_env(tmp_path, _wheel_list())
    probe = "import importlib.util as u; print([n for n in ('edgeport', 'onnx2tf', 'ai_edge_litert', 'torch') if u.find_spec(n)])"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    seen = subprocess.run([python, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path, check=True).stdout
    assert seen.strip() == "['torch']", seen

    out = tmp_path / "check"
    run = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--smoke", str(out)], capture_output=True, text=True,
                         env={**env, "PY": str(python)}, cwd=tmp_path, timeout=600)
    log = (out / "gpu_check.log").read_text() if (out / "gpu_check.log").is_file() else ""
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:] + log[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    checks = summary["checks"]
    assert summary["ran"] and summary["passed"] and summary["mode"] == "smoke"
    assert checks["train"]["world_size"] == 2 and checks["train"]["allreduce_rounds_per_step"] == 1
    assert checks["resume"]["resumed_to_epoch"] == 2
    assert checks["equivalence"]["max_rel_diff"] <= 1e-9 and checks["equivalence"]["dtype"] == "float64" and checks["bf16"]["passed"]
    assert "not installed here" in checks["convert_cpu"]["skipped"]  # the machine has no converter stack
    assert checks["fp16"]["skipped"] == "--amp fp16 needs CUDA"
    assert set(summary["steps"]) >= {"train", "resume", "equivalence, 2 ranks", "equivalence, 1 rank", "bf16"}


@pytest.mark.slow  # a process
def test_gpu_check_without_its_modules_says_what_is_missing(tmp_path):
    """On an interpreter without torch: exit 2 and a reason in summary.json, no traceback."""
    python = getattr(sys, "_base_executable", sys.executable)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    if subprocess.run([python, "-c", "import torch"], capture_output=True, env=env).returncode == 0:
        pytest.skip("the base interpreter has torch")
    run = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), str(tmp_path / "out")], capture_output=True, text=True,
                         env={**env, "PY": python}, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert not summary["ran"] and "torch" in summary["reason"], summary
    # a folder of the user's is never written into
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "summary.json").write_text("my notes")
    run = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), str(mine)], capture_output=True, text=True,
                         env={**env, "PY": python}, timeout=120)
    assert run.returncode == 2 and "is not a gpu_check folder" in run.stderr and "Traceback" not in run.stderr
    assert (mine / "summary.json").read_text() == "my notes" and sorted(p.name for p in mine.iterdir()) == ["summary.json"]


def test_wheels_are_unpacked_only_for_the_python_they_fit():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    fits = gpu_check.wheel_fits
    real = "pycocotools-2.0.11-cp312-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl"
    assert fits(real, (3, 12)) and fits(real, (3, 13)) and not fits(real, (3, 11))  # a 3.11 venv must not load it
    assert fits("a-1.0-cp311-cp311-manylinux_2_17_x86_64.whl", (3, 11)) and not fits("a-1.0-cp311-cp311-x.whl", (3, 12))
    assert fits("rich-15.0.0-py3-none-any.whl", (3, 12))
