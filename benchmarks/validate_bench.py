"""Images/s through each validation runner on the demo detector, and a full convert's wall time.

    .venv/bin/python benchmarks/validate_bench.py [--images 16] [--out benchmarks/results/validate_bench.json]
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

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "models" / "weights" / "pdet_n_person.pt"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=16)
    ap.add_argument("--imgsz", type=int, default=160)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "validate_bench.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "conv"
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "edgeport.cli", "convert", str(DEMO), "--imgsz", str(args.imgsz),
                               "--out", str(out)], capture_output=True, text=True)
        convert_s = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(proc.stderr[-2000:])
        report = json.loads((out / "report.json").read_text())
        stages = {s["name"]: round(s["seconds"], 3) for s in report["stages"]}

        from edgeport.checkpoints import find_weights, strip_state_dict, torch_load
        from edgeport.models.preprocess import preprocess
        from edgeport.models.registry import build_model
        from edgeport.models.synth import sample_images
        from edgeport.validate.board.profiles import load_board
        from edgeport.validate.parity.emulator import emulate
        from edgeport.validate.parity.runners import OnnxRuntimeRunner, TorchRunner
        from edgeport.validate.parity.tflite_runner import TFLiteRunner

        _, sd, _, arch, config = find_weights(torch_load(DEMO, trust=False))
        model, _ = build_model(arch, config)
        model.load_state_dict(strip_state_dict(sd)[0])
        x = np.stack([preprocess(im, args.imgsz) for im in sample_images(args.images, args.imgsz, seed=3)])
        shapes = [(1, 6, args.imgsz // s, args.imgsz // s) for s in (8, 16, 32)]
        runners = {
            "pytorch": TorchRunner(model.eval()),
            "onnxruntime": OnnxRuntimeRunner(out / "model.onnx"),
            "tflite float32 (XNNPACK)": TFLiteRunner(out / "model_float32.tflite", shapes),
            "tflite float32 (reference kernels)": TFLiteRunner(out / "model_float32.tflite", shapes, kernels="reference"),
            "tflite int8 (XNNPACK)": TFLiteRunner(out / "model_int8.tflite", shapes),
            "tflite int8 (reference kernels)": TFLiteRunner(out / "model_int8.tflite", shapes, kernels="reference"),
            "board emulator tflm-m4-256k (int8)": emulate(out / "model_int8.tflite", load_board("tflm-m4-256k"), shapes, Path(tmp)).runner,
        }
        rows = []
        for name, runner in runners.items():
            runner.run(x[:2])  # warm-up
            t0 = time.perf_counter()
            run = runner.run(x)
            wall = time.perf_counter() - t0
            rows.append({"runner": name, "images_per_s": round(args.images / wall, 1), "median_ms_per_image": round(run.ms_per_image, 3)})
            print(f"{name:<38} {args.images / wall:8.1f} images/s   median {run.ms_per_image:7.2f} ms/image")
    result = {
        "benchmark": "validate_bench",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "model": "pdet-n (shipped weights)", "imgsz": args.imgsz, "images": args.images,
        "runners": rows,
        "convert_with_validation_wall_s": round(convert_s, 2),
        "convert_stages_s": stages,
    }
    print(f"convert with validation: {convert_s:.1f} s wall ({', '.join(f'{k} {v}' for k, v in stages.items())})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
