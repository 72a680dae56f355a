"""Latency of the board-exact bilinear x2 against the native resize it replaces, in TFLite.

Both are single-op float32 models converted by onnx2tf and run by TFLite's default
(XNNPACK) kernels, one thread: native = RESIZE_BILINEAR v3 (half_pixel_centers), rewritten =
RESIZE_BILINEAR v1 + STRIDED_SLICE + CONCATENATION + DEPTHWISE_CONV_2D (what edgeport emits
for TFLite 1.13). Target (issue #4): rewritten <= 2x native. Native and rewritten run
interleaved, several rounds, so machine load hits both alike.

    .venv/bin/python benchmarks/upsample_bench.py [--runs 300] [--out benchmarks/results/upsample_bench.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from edgeport.convert.export_onnx_pass import simplify
from edgeport.convert.onnx2tf import run_onnx2tf
from edgeport.ops.half_pixel_bilinear import HalfPixelBilinear2x
from edgeport.ops.tflite_model import read_tflite
from edgeport.validate.parity.tflite_runner import load_interpreter

REPO = Path(__file__).resolve().parents[1]
SHAPES = [(1, 32, 20, 20), (1, 32, 40, 40), (1, 64, 40, 40)]  # pdet-n / pdet-s neck maps at 160-320 px


def _tflite(module: nn.Module, shape, work: Path) -> Path:
    work.mkdir(parents=True)
    onnx_path = work / "model.onnx"
    torch.onnx.export(module.eval(), (torch.zeros(*shape),), str(onnx_path), input_names=["images"], output_names=["y"],
                      opset_version=17, dynamo=False)
    simplify(onnx_path)
    calib = np.random.default_rng(0).random((2, *shape[1:]), dtype=np.float32)
    files, _ = run_onnx2tf(onnx_path, calib, work / "w", int8=False, input_name="images", timeout_s=600)
    return files["float32"]


def _latency_ms(path: Path, shape, runs: int) -> float:
    interp = load_interpreter(path)
    (inp,) = interp.get_input_details()
    x = np.random.default_rng(1).random(inp["shape"], dtype=np.float32)
    for _ in range(20):
        interp.set_tensor(inp["index"], x)
        interp.invoke()
    times = []
    for _ in range(runs):
        interp.set_tensor(inp["index"], x)
        t0 = time.perf_counter()
        interp.invoke()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "upsample_bench.json")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, shape in enumerate(SHAPES):
            native = _tflite(nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False), shape, Path(tmp) / f"n{i}")
            rewritten = _tflite(HalfPixelBilinear2x(shape[1]), shape, Path(tmp) / f"r{i}")
            n_all, r_all = [], []
            for _ in range(5):  # interleaved rounds; the median of medians
                n_all.append(_latency_ms(native, shape, args.runs))
                r_all.append(_latency_ms(rewritten, shape, args.runs))
            n_ms, r_ms = statistics.median(n_all), statistics.median(r_all)
            row = {
                "input_nchw": list(shape),
                "native_ops": [f"{o.name} v{o.version}" for o in read_tflite(native).ops],
                "rewritten_ops": [f"{o.name} v{o.version}" for o in read_tflite(rewritten).ops],
                "native_ms": round(n_ms, 4), "rewritten_ms": round(r_ms, 4), "ratio": round(r_ms / n_ms, 3),
            }
            rows.append(row)
            print(f"{shape}: native {n_ms:.3f} ms, rewritten {r_ms:.3f} ms, ratio {r_ms / n_ms:.2f} (target <= 2)")
    result = {
        "benchmark": "upsample_bench",
        "kernels": "TFLite default (XNNPACK), 1 thread",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "runs": args.runs, "rows": rows,
        "worst_ratio": max(r["ratio"] for r in rows), "target_ratio_max": 2.0,
        "meets_target": max(r["ratio"] for r in rows) <= 2.0,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
