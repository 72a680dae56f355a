"""The install: an editable install prints no warning, and the wheel holds the package and its data only."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _tracked_copy(dst: Path) -> Path:
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        (dst / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, dst / name)
    return dst


def _pip(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    # offline: the venv's own setuptools (the dev extra pins it), no index
    return subprocess.run([sys.executable, "-m", "pip", *args, "--no-build-isolation", "--no-index", "--no-deps"], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs the git checkout")
    return _tracked_copy(tmp_path_factory.mktemp("src"))


def test_the_wheel_holds_exactly_the_package_and_its_data(source, tmp_path):
    proc = _pip("wheel", ".", "-w", str(tmp_path), cwd=source)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = tmp_path.glob("edgeport-*.whl")
    names = [n for n in zipfile.ZipFile(wheel).namelist() if not n.startswith("edgeport-")]
    assert all(n.startswith("edgeport/") for n in names), [n for n in names if not n.startswith("edgeport/")]
    parts = {n.split("/")[1] for n in names if n.count("/") > 1}
    assert parts == {"commands", "convert", "models", "ops", "train", "validate"}
    data = sorted(n for n in names if not n.endswith(".py"))
    assert data == ["edgeport/models/weights/pdet_n_bilinear_person.pt", "edgeport/models/weights/pdet_n_leaky_spp_person.pt",
                    "edgeport/models/weights/pdet_n_person.pt",
                    "edgeport/validate/board_profiles/default.ops.toml",
                    "edgeport/validate/board_profiles/default.toml", "edgeport/validate/board_profiles/op_min_runtime.toml",
                    "edgeport/validate/board_profiles/tflite-1.13.ops.toml", "edgeport/validate/board_profiles/tflite-1.13.toml",
                    "edgeport/validate/board_profiles/tflm-m4-256k.toml", "edgeport/validate/report/SCHEMA.md"]
    assert not any("/tests/" in n or "/benchmarks/" in n or "_build_backend" in n for n in names)
    assert "warning" not in (proc.stdout + proc.stderr).lower().replace("warning: location", "")


def test_an_editable_install_prints_no_warning(source, tmp_path):
    env_target = tmp_path / "site"
    proc = _pip("install", "-e", ".", "--target", str(env_target), cwd=source)
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = "\n".join(line for line in (proc.stdout + proc.stderr).splitlines() if not line.startswith("WARNING: Location"))
    assert "warning" not in text.lower(), text
