"""YOLOv8n at 320 and 640 px: `edgeport convert` (float32 + int8 + validation) against Ultralytics' way.

Both in the same run, on YOLOv8n (nc=1, the zoo's builder) with a head as training leaves it
(``test_zoo._checkpoint(trained_head=True)``: BatchNorm statistics and class logits spread out,
not at the prior), so its int8 file passes as a trained model's does and no repair is timed:

- edgeport: ``edgeport convert CKPT --arch zoo_models:yolov8n --imgsz N`` (everything:
  fold, export, float32 and int8 with its output groups, parity on every runtime);
- edgeport again with ``--converter litert-torch``, the peer's converter with edgeport's checks;
- the peer: Ultralytics' own ``model.export(format="tflite", int8=True, imgsz=N)``, offline
  (a local synthetic dataset for calibration). Ultralytics 8.4 exports TFLite through
  ``litert_torch``; it runs in the environment ``make setup-converters`` builds for edgeport's
  second converter (litert-torch on this environment's packages, Ultralytics among them), so the
  peer is Ultralytics' real exporter. It validates nothing.

Each size runs ``--rounds`` interleaved rounds (the three commands one after another, the order
turned each round, so a slow minute of a busy machine falls on each in turn); the ratios are of
medians. With ``--recipe``, once per size, the route Ultralytics' exporter took up to 8.3, by hand,
in a fresh process: ``torch.onnx.export`` of the model in export mode, onnxslim, and one plain
``onnx2tf -oiqt`` with the same calibration. Where the real export cannot run (litert-torch not
installed) the JSON says why and the ratio is taken against that recipe.

Target (issue #34): ``ratio = edgeport / peer <= 1.0`` at 320 and at 640 px, with either
converter. Prints and saves JSON.

    .venv/bin/python benchmarks/zoo_bench.py [--imgsz 320 640] [--rounds 3] [--recipe]
        [--also-python .venv312/bin/python] [--before DIR] [--skip NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
ZOO = REPO / "tests" / "zoo"
sys.path.insert(0, str(ZOO))


def _checkpoint(folder: Path) -> Path:
    """The zoo's YOLOv8n as a trained model's checkpoint looks (DDP prefixes, SyncBatchNorm), with
    a head as training leaves it: an untrained class branch sits at its prior on every anchor, so
    its int8 scores collapse and the repair would be timed too."""
    import test_zoo

    return test_zoo._checkpoint("yolov8n", folder, trained_head=True)


def time_edgeport(ckpt: Path, imgsz: int, out: Path, *extra: str, python: str = sys.executable, source: Path | None = None,
                  arch: str = "yolov8n") -> dict:
    """``source``: a folder holding another checkout of edgeport as ``edgeport/`` (an earlier commit), imported instead;
    ``arch``: the zoo model (``tests/zoo/zoo_models.py``)."""
    env = dict(os.environ, PYTHONPATH=str(source)) if source is not None else None
    t0 = time.perf_counter()
    proc = subprocess.run([python, "-m", "edgeport.cli", "convert", str(ckpt), "--arch", f"zoo_models:{arch}",
                           "--imgsz", str(imgsz), "--out", str(out), *extra], cwd=ZOO, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - t0
    stages, rows = {}, {}
    if (out / "report.json").is_file():
        report = json.loads((out / "report.json").read_text())
        stages = {s["name"]: s["seconds"] for s in report["stages"]}
        # each row's runtime per image, and on how many images it ran: where parity's time goes
        rows = {f"{r['variant']}/{r['runtime']}": {"ms_per_image": r["ms_per_image"], "images": r.get("images"),
                                                   "same_run_as": r.get("same_run_as")} for r in report["results"]}
    return {"seconds": round(seconds, 2), "exit": proc.returncode, "stages": stages, "rows": rows,
            "last_line": (proc.stderr.strip().splitlines() or [""])[-1][:300]}


ULTRALYTICS_EXPORT = """
import os, sys
os.environ["YOLO_OFFLINE"] = "1"
from pathlib import Path
import yaml
from ultralytics import YOLO
from ultralytics.nn.tasks import yaml_model_load
cfg = yaml_model_load("yolov8n.yaml")
cfg["nc"] = 1  # the zoo's YOLOv8n
Path("yolov8n-1.yaml").write_text(yaml.safe_dump(cfg))
print(YOLO("yolov8n-1.yaml").export(format="tflite", int8=True, imgsz=int(sys.argv[2]), data=sys.argv[3]))
"""


def time_ultralytics(work: Path, imgsz: int, data_yaml: Path) -> dict:
    from edgeport.convert.converters import litert

    python = str(litert.env_dir() / "bin" / "python") if litert.installed() else sys.executable
    t0 = time.perf_counter()
    proc = subprocess.run([python, "-c", ULTRALYTICS_EXPORT, str(ZOO), str(imgsz), str(data_yaml)], cwd=work,
                          capture_output=True, text=True, env=dict(os.environ, YOLO_OFFLINE="1"), timeout=1800)
    seconds = time.perf_counter() - t0
    made = list(work.rglob("*int8*.tflite"))
    lines = [ln for ln in (proc.stdout + proc.stderr).strip().splitlines() if not ln.startswith("WARNING: Location")]
    return {"seconds": round(seconds, 2), "exit": proc.returncode, "ok": proc.returncode == 0 and bool(made),
            "python": "litert-torch environment" if python != sys.executable else "this environment (no litert-torch)",
            "last_line": (lines or [""])[-1][:300]}


RECIPE = """
import sys, time
from pathlib import Path
import numpy as np, torch
sys.path.insert(0, sys.argv[1])
import zoo_models
from edgeport.convert.calibration import load_calibration
from edgeport.convert.passes.export_onnx_pass import export_onnx, simplify
from edgeport.convert.converters.onnx2tf import onnx2tf_command, write_calibration
imgsz, work = int(sys.argv[2]), Path(sys.argv[3])
torch.manual_seed(0)
model = zoo_models.yolov8n()
onnx_path = work / "model.onnx"
export_onnx(model, imgsz, onnx_path, output_names=["output0"], opset=17)
simplify(onnx_path)
calib, _ = load_calibration(None, imgsz, limit=32, seed=0)
write_calibration(work, np.asarray(calib))
cmd = onnx2tf_command(onnx_path, work / "tf", int8=True, input_name="images", lean=False)
t = time.perf_counter()
import subprocess
subprocess.run(cmd, cwd=work, check=True, capture_output=True)
print(time.perf_counter() - t)
"""


def time_recipe(work: Path, imgsz: int) -> dict:
    """What Ultralytics' exporter runs for int8 TFLite, by hand, in a fresh process as a user runs
    it (as edgeport is timed): import, export-mode ONNX, onnxslim, plain ``onnx2tf -oiqt`` (all
    seven files, as Ultralytics gets them), the same calibration."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", RECIPE, str(ZOO), str(imgsz), str(work)], cwd=work, capture_output=True,
                          text=True, check=True, timeout=1800)
    return {"seconds": round(time.perf_counter() - t0, 2), "onnx2tf_seconds": round(float(proc.stdout.split()[-1]), 2)}


def _median(runs: list[dict]) -> float | None:
    """The median time of runs that ended (a failed gate, exit 1, is an ended run; what it says is in ``passed``)."""
    ended = [r["seconds"] for r in runs if r.get("exit", 0) in (0, 1) and r.get("ok", True)]
    return round(statistics.median(ended), 2) if len(ended) == len(runs) and ended else None


def measure_size(imgsz: int, rounds: int, recipe: bool, tmp: Path, also: list[str], before: Path | None,
                 skip: tuple[str, ...] = ()) -> dict:
    from edgeport.convert.calibration import load_calibration
    from edgeport.convert.converters import litert
    from edgeport.convert.converters.onnx2tf import write_calibration

    folder = tmp / str(imgsz)
    folder.mkdir()
    ckpt = _checkpoint(folder)
    data = folder / "data"
    # Ultralytics calibrates int8 on the whole val split: as many images as edgeport's calibration
    # (``ConvertConfig.max_calib``), so both calibrate on the same number (it was 10 until 2026-12-03)
    from edgeport.convert.base import ConvertConfig

    calib_images = ConvertConfig.max_calib
    subprocess.run([sys.executable, "-m", "edgeport.cli", "data", "synth", "--out", str(data), "--n", "20",
                    "--n-val", str(calib_images), "--imgsz", str(imgsz)], check=True, capture_output=True)
    data_yaml = folder / "data.yaml"
    data_yaml.write_text(f"path: {data}\ntrain: images/train\nval: images/val\nnames:\n  0: person\n")
    sample = np.asarray(load_calibration(None, imgsz, limit=20, seed=0)[0])

    def ultralytics(k: int) -> dict:
        work = folder / f"ul-{k}"
        work.mkdir()
        write_calibration(work, sample)  # onnx2tf's sample file, placed first (Ultralytics' own offline need)
        return time_ultralytics(work, imgsz, data_yaml)

    commands = {"ultralytics_export": ultralytics,
                "edgeport": lambda k: time_edgeport(ckpt, imgsz, folder / f"edgeport-{k}")}
    if litert.installed():  # (its int8 passes as onnx2tf's does: the output groups scaled apart on both lines)
        commands["edgeport_litert_torch"] = lambda k: time_edgeport(ckpt, imgsz, folder / f"edgeport-litert-{k}",
                                                                    "--converter", "litert-torch")
    for python in also:  # edgeport in another environment (the onnx2tf 2.x line on Python 3.12), the same checkpoint
        python = str(Path(python).absolute()) if os.sep in python else python  # (it runs in the zoo's folder)
        version = subprocess.run([python, "-c", "import platform; print(platform.python_version())"], capture_output=True,
                                 text=True, check=True).stdout.strip()
        commands[f"edgeport_python{version}"] = lambda k, python=python, version=version: time_edgeport(
            ckpt, imgsz, folder / f"edgeport-{version}-{k}", python=python)
    if before is not None:  # the same command from an earlier checkout: what a change bought, in the same rounds
        commands["edgeport_before"] = lambda k: time_edgeport(ckpt, imgsz, folder / f"edgeport-before-{k}", source=before)
    if skip:
        commands = {name: run for name, run in commands.items() if name not in skip}
    runs: dict[str, list[dict]] = {name: [] for name in commands}
    order = list(commands)
    for k in range(rounds):
        for name in order[k % len(order):] + order[: k % len(order)]:  # each round starts with the next command
            runs[name].append(commands[name](k))
            print(f"{imgsz} px round {k + 1}: {name} {runs[name][-1]['seconds']} s", file=sys.stderr)
    result = {"imgsz": imgsz, "rounds": rounds, "runs": runs, "median_s": {name: _median(r) for name, r in runs.items()},
              # every edgeport run's gate passed (exit 0): a ratio of runs whose files fail is no target met
              "passed": {name: all(r["exit"] == 0 for r in rs) for name, rs in runs.items() if name.startswith("edgeport")}}
    if not litert.installed():
        result["edgeport_litert_torch"] = {"skipped": f"litert-torch not installed: {litert.install_hint()}"}
    if recipe or not all(r["ok"] for r in runs["ultralytics_export"]):
        (folder / "recipe").mkdir()
        result["ultralytics_recipe_by_hand"] = time_recipe(folder / "recipe", imgsz)
    result["calibration_images"] = {"edgeport": calib_images, "ultralytics_export": calib_images}
    peer = result["median_s"]["ultralytics_export"]
    result["peer"] = "ultralytics_export"
    if peer is None:
        peer, result["peer"] = result["ultralytics_recipe_by_hand"]["seconds"], "ultralytics_recipe_by_hand"
    result["ratio"] = {name: (round(m / peer, 3) if m is not None else None)
                       for name, m in result["median_s"].items() if name.startswith("edgeport")}
    # where edgeport's time goes: each stage's median over the rounds
    result["stages_median_s"] = {
        name: {stage: round(statistics.median(r["stages"].get(stage, 0.0) for r in runs[name]), 2)
               for stage in runs[name][0]["stages"]}
        for name in runs if name.startswith("edgeport") and runs[name] and runs[name][0]["stages"]}
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--imgsz", type=int, nargs="+", default=[320, 640])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--also-python", nargs="*", default=[], metavar="PYTHON",
                    help="also time edgeport run by these interpreters (another venv: .venv312/bin/python, onnx2tf 2.x)")
    ap.add_argument("--before", type=Path, metavar="DIR",
                    help="also time edgeport from DIR/edgeport, a checkout of an earlier commit (git worktree add DIR/edgeport REV)")
    ap.add_argument("--skip", nargs="*", default=[], metavar="NAME",
                    help="leave these edgeport commands out (edgeport_litert_torch, ...); the peer always runs")
    ap.add_argument("--recipe", action="store_true", help="also time the route Ultralytics took up to 8.3, by hand (once per size)")
    ap.add_argument("--out", type=Path, help="default: benchmarks/results/zoo_bench_SIZES.json")
    args = ap.parse_args()
    if "ultralytics_export" in args.skip:
        ap.error("ultralytics_export is the peer every ratio is taken against: it cannot be skipped")
    args.out = args.out or REPO / "benchmarks" / "results" / f"zoo_bench_{'_'.join(map(str, args.imgsz))}.json"
    with tempfile.TemporaryDirectory(prefix="zoo-bench-") as tmp:
        sizes = [measure_size(imgsz, args.rounds, args.recipe, Path(tmp), args.also_python, args.before, tuple(args.skip)) for imgsz in args.imgsz]
    result = {
        "model": "YOLOv8n (nc=1), a head as training leaves it (tests/zoo/test_zoo.py: _checkpoint)",
        "python": platform.python_version(), "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
        "sizes": sizes, "target": "ratio <= 1.0 at every size, with either converter",
        "meets_target": all(v is not None and v <= 1.0 and s["passed"][name] for s in sizes for name, v in s["ratio"].items()),
    }
    print(json.dumps({"ratios": {s["imgsz"]: s["ratio"] for s in sizes}, "passed": {s["imgsz"]: s["passed"] for s in sizes},
                      "medians_s": {s["imgsz"]: s["median_s"] for s in sizes},
                      "stages_median_s": {s["imgsz"]: s["stages_median_s"] for s in sizes}}, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
