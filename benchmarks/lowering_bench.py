"""What each board lowering costs against the operator it replaces, on today's LiteRT.

Each case is one operator at a detector's sizes (a neck map, an attention block), written as a
one-op .tflite file (ops/tflite_graph), and the same file lowered for TFLite 1.13
(ops/lowering): both run on LiteRT's default (XNNPACK) kernels, one thread, interleaved over
several rounds so machine load hits both alike. The ratio (lowered / native) is what a file
lowered for the old board costs where it also runs on a current runtime; on the old board itself
there is no native form to compare with.

    .venv/bin/python benchmarks/lowering_bench.py [--runs 200] [--out benchmarks/results/lowering_bench.json]
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

from edgeport.ops.lowering.registry import lower_for_board
from edgeport.ops.tflite_graph import ACTIVATIONS, Graph, Quant
from edgeport.ops.tflite_run import load_interpreter
from edgeport.ops.tflite_versions import needed_version
from edgeport.validate.board.profiles import load_board

REPO = Path(__file__).resolve().parents[1]
Q = Quant(0.05, 120)


def _finish(g: Graph, x: int, y: int) -> bytes:
    g.set_io([x], [y])
    for op in g.ops:
        g.set_version(op, needed_version(g, op) or 1)
    return g.to_bytes()


def _unary(name, shape, dtype="float32", qout=None):
    g = Graph.empty()
    x = g.add_tensor("x", shape, dtype, Q if dtype == "uint8" else None)
    y = g.add_tensor("y", shape, dtype, qout)
    g.add(g.new_op(name, [x], [y]))
    return _finish(g, x, y)


def _resize(shape, k, dtype="float32"):
    n, h, w, c = shape
    q = Q if dtype == "uint8" else None
    g = Graph.empty()
    x, y = g.add_tensor("x", shape, dtype, q), g.add_tensor("y", (n, k * h, k * w, c), dtype, q)
    g.add(g.new_op("RESIZE_BILINEAR", [x, g.constant("s", np.array([k * h, k * w], np.int32), "int32")], [y],
                   "ResizeBilinearOptions", alignCorners=False, halfPixelCenters=True))
    return _finish(g, x, y)


def _grouped(shape, groups, cout):
    g = Graph.empty()
    x, y = g.add_tensor("x", shape, "float32"), g.add_tensor("y", (*shape[:3], cout), "float32")
    w = g.constant("w", np.random.default_rng(0).normal(size=(cout, 3, 3, shape[3] // groups)).astype(np.float32))
    g.add(g.new_op("CONV_2D", [x, w, g.constant("b", np.zeros(cout, np.float32))], [y], "Conv2DOptions", padding=0, strideW=1,
                   strideH=1, dilationWFactor=1, dilationHFactor=1, fusedActivationFunction=ACTIVATIONS["NONE"]))
    return _finish(g, x, y)


def _attention(heads, tokens, dim):
    g = Graph.empty()
    x = g.add_tensor("x", (1, heads, tokens, dim), "float32")
    y = g.add_tensor("y", (1, heads, tokens, tokens), "float32")
    g.add(g.new_op("BATCH_MATMUL", [x, x], [y], "BatchMatMulOptions", adjX=False, adjY=True))
    return _finish(g, x, y)


def _transpose_conv(shape, cout):
    n, h, w, c = shape
    g = Graph.empty()
    x, y = g.add_tensor("x", shape, "float32"), g.add_tensor("y", (n, 2 * h, 2 * w, cout), "float32")
    wt = g.constant("w", np.random.default_rng(0).normal(size=(cout, 2, 2, c)).astype(np.float32))
    g.add(g.new_op("TRANSPOSE_CONV", [g.constant("s", np.array([n, 2 * h, 2 * w, cout], np.int32), "int32"), wt, x,
                                      g.constant("b", np.zeros(cout, np.float32))], [y], "TransposeConvOptions",
                   padding=1, strideW=2, strideH=2))
    return _finish(g, x, y)


def _mean(shape):
    g = Graph.empty()
    x = g.add_tensor("x", shape, "uint8", Q)
    y = g.add_tensor("y", (1, 1, 1, shape[3]), "uint8", Quant(0.01, 100))
    g.add(g.new_op("MEAN", [x, g.constant("a", np.array([1, 2], np.int32), "int32")], [y], "ReducerOptions", keepDims=True))
    return _finish(g, x, y)


CASES = {
    "hard_swish (1, 40, 40, 32)": lambda: _unary("HARD_SWISH", (1, 40, 40, 32)),
    "hard_swish uint8 (1, 40, 40, 32)": lambda: _unary("HARD_SWISH", (1, 40, 40, 32), "uint8", Quant(0.03, 10)),
    "relu_0_to_1 (1, 40, 40, 32)": lambda: _unary("RELU_0_TO_1", (1, 40, 40, 32)),
    "bilinear x2, half-pixel (1, 40, 40, 32)": lambda: _resize((1, 40, 40, 32), 2),
    "bilinear x2, half-pixel, uint8 (1, 40, 40, 32)": lambda: _resize((1, 40, 40, 32), 2, "uint8"),
    "bilinear x4, half-pixel (1, 20, 20, 32)": lambda: _resize((1, 20, 20, 32), 4),
    "grouped conv 3x3, 8 groups (1, 20, 20, 64)": lambda: _grouped((1, 20, 20, 64), 8, 64),
    "attention Q K^T, 2 heads, 100 tokens, 32 dims": lambda: _attention(2, 100, 32),
    "transpose conv 2x2 s2 with bias (1, 40, 40, 32)": lambda: _transpose_conv((1, 40, 40, 32), 32),
    "global mean, uint8 (1, 40, 40, 64)": lambda: _mean((1, 40, 40, 64)),
}


def _latency_ms(path: Path, runs: int) -> float:
    interp = load_interpreter(path)
    inp = interp.get_input_details()[0]
    x = (np.random.default_rng(1).random(inp["shape"]) * (255 if inp["dtype"] == np.uint8 else 1)).astype(inp["dtype"])
    for _ in range(10):
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
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "lowering_bench.json")
    args = ap.parse_args()
    board = load_board("tflite-1.13")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (case, build) in enumerate(CASES.items()):
            model = build()
            lowered = lower_for_board(model, board.lacks)
            native, low = Path(tmp) / f"native{i}.tflite", Path(tmp) / f"lowered{i}.tflite"
            native.write_bytes(model)
            low.write_bytes(lowered.model)
            n_all, l_all = [], []
            for _ in range(args.rounds):  # interleaved rounds; the median of medians
                n_all.append(_latency_ms(native, args.runs))
                l_all.append(_latency_ms(low, args.runs))
            n_ms, l_ms = statistics.median(n_all), statistics.median(l_all)
            rows.append({"case": case, "rules": lowered.rules, "native_ms": round(n_ms, 4), "lowered_ms": round(l_ms, 4),
                         "ratio": round(l_ms / n_ms, 3)})
            print(f"{case}: native {n_ms:.3f} ms, lowered ({', '.join(lowered.rules)}) {l_ms:.3f} ms, ratio {l_ms / n_ms:.2f}")
    result = {
        "benchmark": "lowering_bench",
        "kernels": "LiteRT default (XNNPACK), 1 thread",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "runs": args.runs, "rounds": args.rounds, "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
