"""The install: an editable install prints no warning, and the wheel holds the package and its data only."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# the repository's folders that are not the package: the wheel holds none of them
NOT_THE_PACKAGE = {"tests", "benchmarks", "scripts", "docs", "ci", "runs", "_build_backend", "build"}


def _declared() -> dict:
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_folder_of_the_package_is_declared():
    """pyproject lists the packages (the root is ``edgeport``, so setuptools cannot find them by
    itself): a folder of modules missing from the list is missing from the wheel."""
    found = set()
    for init in REPO.rglob("*.py"):
        rel = init.parent.relative_to(REPO)
        if rel.parts and (rel.parts[0] in NOT_THE_PACKAGE or rel.parts[0].startswith(".")):
            continue
        found.add(".".join(("edgeport", *rel.parts)))
    data = {".".join(("edgeport", *p.parent.relative_to(REPO).parts)) for pattern in ("*.pt", "*.toml")
            for p in REPO.rglob(pattern) if p.parent != REPO and p.relative_to(REPO).parts[0] not in NOT_THE_PACKAGE
            and not p.relative_to(REPO).parts[0].startswith(".")}
    declared = set(_declared()["packages"])
    assert found | data == declared, f"missing from pyproject's packages: {sorted((found | data) - declared)}; " \
                                     f"listed but not there: {sorted(declared - found - data)}"
    missing_init = sorted(p for p in found if not (REPO.joinpath(*p.split(".")[1:]) / "__init__.py").is_file())
    assert not missing_init, f"folders of modules without __init__.py: {missing_init}"


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


@pytest.mark.slow
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


@pytest.mark.slow
def test_an_editable_install_prints_no_warning(source, tmp_path):
    env_target = tmp_path / "site"
    proc = _pip("install", "-e", ".", "--target", str(env_target), cwd=source)
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = "\n".join(line for line in (proc.stdout + proc.stderr).splitlines() if not line.startswith("WARNING: Location"))
    assert "warning" not in text.lower(), text


@pytest.mark.slow
def test_convert_runs_from_the_installed_wheel_alone(source, tmp_path):
    """The wheel, installed with --no-deps beside this environment's third-party packages, converts
    the shipped checkpoint from a folder outside the checkout: neither the checkout nor the editable
    install is importable there (a venv whose .pth names the packages' folder; the editable finder is
    one of that folder's .pth files, which only a site folder's own processing runs)."""
    import sysconfig
    import venv

    proc = _pip("wheel", ".", "-w", str(tmp_path / "wheel"), cwd=source)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = (tmp_path / "wheel").glob("edgeport-*.whl")
    env = tmp_path / "env"
    venv.create(env, with_pip=False)
    python = env / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    proc = _pip("install", str(wheel), "--target", str(site), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (site / "third_party.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    where = tmp_path / "elsewhere"
    where.mkdir()
    found = subprocess.run([python, "-c", "import edgeport.ops.lowering.registry as m, edgeport; print(edgeport.__file__, m.__file__)"],
                           cwd=where, capture_output=True, text=True)
    assert found.returncode == 0 and all(p.startswith(str(site)) for p in found.stdout.split()), found
    weights = site / "edgeport" / "models" / "weights" / "pdet_n_person.pt"
    run = subprocess.run([python, "-m", "edgeport.cli", "convert", str(weights), "--imgsz", "64", "--out", "out"], cwd=where,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert {"model.onnx", "model_float32.tflite", "model_int8.tflite", "report.json"} <= {p.name for p in (where / "out").iterdir()}
