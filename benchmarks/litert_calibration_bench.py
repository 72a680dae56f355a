"""litert-torch's int8 calibration: ai-edge-quantizer's own (every tensor copied into Python after
every image, 16 threads: what Ultralytics' export runs) against edgeport's (``litert_worker.calibrate``:
the same records taken by TFLite's profiler in C++, a thread per core, where the first image shows
them the same), interleaved rounds on the same 32 images, and whether the two int8 files are the
same to the byte (and where edgeport's fell back to the quantiser's own).

Each model is a zoo model at a size (``yolov8n:320``); its float32 file is ``edgeport convert
--converter litert-torch --no-int8``'s, and the rounds run in the converter's own Python (``make
setup-converters``). Prints and saves JSON.

    .venv/bin/python benchmarks/litert_calibration_bench.py [--models yolov8n:320 yolov8n:640 resnet18:96 mobilevit_xxs:64]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ZOO = REPO / "tests" / "zoo"

ROUNDS = """
import contextlib, io, json, os, statistics, sys, time, warnings
import numpy as np
sys.path.insert(0, sys.argv[4])
import litert_worker
from ai_edge_quantizer import qtyping, quantizer, recipe_manager

warnings.filterwarnings("ignore")
path, size, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(0)
samples = {"serving_default": [{"args_0": rng.random((1, size, size, 3), dtype=np.float32)} for _ in range(32)]}


def quantiser():
    qt, manager = quantizer.Quantizer(path), recipe_manager.RecipeManager()
    manager.add_static_config(regex=".*", operation_name=qtyping.TFLOperationName.ALL_SUPPORTED, activation_num_bits=8,
                              weight_num_bits=8, weight_granularity=qtyping.QuantGranularity.CHANNELWISE)
    qt.load_quantization_recipe(manager.get_quantization_recipe())
    return qt, manager


ways = {"default": lambda qt, manager: qt.calibrate(samples),
        "edgeport": lambda qt, manager: litert_worker.calibrate(open(path, "rb").read(), manager, samples)}
seconds, files, said = {k: [] for k in ways}, {}, io.StringIO()
for i in range(rounds):
    for way in (list(ways) if i % 2 == 0 else list(ways)[::-1]):
        qt, manager = quantiser()
        t0 = time.perf_counter()
        with contextlib.redirect_stderr(said):
            ranges = ways[way](qt, manager)
        seconds[way].append(time.perf_counter() - t0)
        files[way] = bytes(qt.quantize(calibration_result=ranges).quantized_model)
print(json.dumps({"seconds": {k: [round(x, 3) for x in v] for k, v in seconds.items()},
                  "median_s": {k: round(statistics.median(v), 3) for k, v in seconds.items()},
                  "same_int8_file": files["default"] == files["edgeport"], "fell_back": "calibrating as the quantiser does" in said.getvalue(),
                  "said": [line for line in said.getvalue().splitlines() if line.startswith("edgeport:")]}))
"""


def main() -> None:
    from edgeport.convert.converters import litert

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["yolov8n:320", "yolov8n:640", "resnet18:96", "mobilevit_xxs:64"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "litert_calibration_bench.json")
    args = ap.parse_args()
    python = litert.require()
    sys.path.insert(0, str(ZOO))
    import test_zoo

    result = {"machine": platform.machine(), "python": platform.python_version(), "litert_torch": litert.version(),
              "cores": len(__import__("os").sched_getaffinity(0)), "models": {}}
    with tempfile.TemporaryDirectory(prefix="litert-calibration-bench-") as tmp:
        for model in args.models:
            name, size = model.split(":")
            (Path(tmp) / name).mkdir(exist_ok=True)
            ckpt = test_zoo._checkpoint(name, Path(tmp) / name, trained_head=name.startswith("yolo"))
            out = Path(tmp) / f"convert-{name}-{size}"
            subprocess.run([sys.executable, "-m", "edgeport.cli", "convert", str(ckpt), "--arch", f"zoo_models:{name}", "--imgsz",
                            str(size), "--out", str(out), "--converter", "litert-torch", "--no-int8"],
                           cwd=ZOO, capture_output=True, text=True, check=True)
            done = subprocess.run([str(python), "-I", "-c", ROUNDS, str(out / "model_float32.tflite"), str(size), str(args.rounds),
                                   str(litert.WORKER.parent)],
                                  capture_output=True, text=True, check=True)
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            figures["ratio"] = round(figures["median_s"]["edgeport"] / figures["median_s"]["default"], 3)
            result["models"][model] = figures
            print(model, json.dumps(figures), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
