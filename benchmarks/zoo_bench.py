"""YOLOv8n at 320 px: `edgeport convert` (float32 + int8 + validation) against Ultralytics' way.

Both in the same run, on the same random-init YOLOv8n (nc=1, the zoo's builder):

- edgeport: ``edgeport convert CKPT --arch zoo_models:yolov8n --imgsz 320`` (everything:
  fold, export, float32 and int8 with its output groups, parity on every runtime);
- the peer: Ultralytics' own ``model.export(format="tflite", int8=True, imgsz=320)``, offline
  (a local synthetic dataset for calibration). Ultralytics 8.4 exports TFLite through
  ``litert_torch``; it runs in the environment ``make setup-converters`` builds for edgeport's
  second converter (litert-torch on this environment's packages, Ultralytics among them), so the
  peer is Ultralytics' real exporter. Beside it, the route its exporter took up to 8.3, by hand,
  in a fresh process: ``torch.onnx.export`` of the model in export mode, onnxslim, and one plain
  ``onnx2tf -oiqt`` with the same calibration. Neither peer validates anything;
- edgeport again with ``--converter litert-torch``, the peer's converter with edgeport's checks.

Where the real export cannot run (litert-torch not installed) the JSON records why and the
ratio is taken against the recipe by hand.

Target (issue #8): ``ratio = edgeport / peer <= 1.0``. Prints and saves JSON.

    .venv/bin/python benchmarks/zoo_bench.py [--imgsz 320]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
ZOO = REPO / "tests" / "zoo"
sys.path.insert(0, str(ZOO))


def _checkpoint(folder: Path) -> Path:
    import zoo_models

    torch.manual_seed(0)
    model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(zoo_models.yolov8n())
    path = folder / "yolov8n.pt"
    torch.save({"model": {f"module.{k}": v for k, v in model.state_dict().items()}}, path)
    return path


def time_edgeport(ckpt: Path, imgsz: int, out: Path, *extra: str) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "edgeport.cli", "convert", str(ckpt), "--arch", "zoo_models:yolov8n",
                           "--imgsz", str(imgsz), "--out", str(out), *extra], cwd=ZOO, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    stages = {}
    if (out / "report.json").is_file():
        stages = {s["name"]: s["seconds"] for s in json.loads((out / "report.json").read_text())["stages"]}
    return {"seconds": round(seconds, 2), "exit": proc.returncode, "stages": stages,
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
    from edgeport.convert import litert

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
from edgeport.convert.export_onnx_pass import export_onnx, simplify
from edgeport.convert.onnx2tf import onnx2tf_command, write_calibration
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--imgsz", type=int, default=320)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "zoo_bench.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="zoo-bench-") as tmp:
        tmp = Path(tmp)
        ckpt = _checkpoint(tmp)
        data = tmp / "data"
        subprocess.run([sys.executable, "-m", "edgeport.cli", "data", "synth", "--out", str(data), "--n", "20",
                        "--n-val", "10", "--imgsz", str(args.imgsz)], check=True, capture_output=True)
        data_yaml = tmp / "data.yaml"
        data_yaml.write_text(f"path: {data}\ntrain: images/train\nval: images/val\nnames:\n  0: person\n")
        (tmp / "ul").mkdir()
        from edgeport.convert.calibration import load_calibration
        from edgeport.convert.onnx2tf import write_calibration

        write_calibration(tmp / "ul", np.asarray(load_calibration(None, args.imgsz, limit=20, seed=0)[0]))  # onnx2tf's sample file, placed first
        ultralytics = time_ultralytics(tmp / "ul", args.imgsz, data_yaml)
        (tmp / "recipe").mkdir()
        recipe = time_recipe(tmp / "recipe", args.imgsz)
        edgeport = time_edgeport(ckpt, args.imgsz, tmp / "edgeport")
        from edgeport.convert import litert

        through_litert = (time_edgeport(ckpt, args.imgsz, tmp / "edgeport-litert", "--converter", "litert-torch")
                          if litert.installed() else {"skipped": f"litert-torch not installed: {litert.install_hint()}"})
    peer = ultralytics["seconds"] if ultralytics["ok"] else recipe["seconds"]
    result = {
        "model": "YOLOv8n (nc=1), random init", "imgsz": args.imgsz, "python": platform.python_version(),
        "edgeport": edgeport, "edgeport_litert_torch": through_litert, "ultralytics_export": ultralytics,
        "ultralytics_recipe_by_hand": recipe,
        "peer": "ultralytics_export" if ultralytics["ok"] else "ultralytics_recipe_by_hand",
        "ratio": round(edgeport["seconds"] / peer, 3), "target": "ratio <= 1.0",
    }
    print(json.dumps(result, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
