"""The write-up's board: the demo detectors' uint8 file against their float32 file on the real
TensorFlow Lite 1.13.1 -- ms per image, interleaved in one run, and mAP@0.5 of each against the
labels of a synthetic validation set.

Each demo checkpoint (nearest and bilinear neck, and LeakyReLU with SPP) is converted with ``--board tflite-1.13``
(float32 and uint8, lowered for the board), then ``validate`` runs each file on the board's own
runtime with ``--data`` for mAP; the speed is timed apart, both files in turn, several rounds
of the same images, on the runtime `make setup-boards` installs (one thread, as its Python
interpreter runs). Needs that runtime: without it, says so and exits 2.

    .venv/bin/python benchmarks/board_bench.py [--rounds 5] [--images 32] [--out benchmarks/results/board_bench.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEMOS = {"nearest": REPO / "models" / "weights" / "pdet_n_person.pt",
         "bilinear": REPO / "models" / "weights" / "pdet_n_bilinear_person.pt",
         # the write-up's kind (LeakyReLU, SPP): its uint8 LEAKY_RELU lowered for 1.13.1 (ops/lowering/leaky_relu.py)
         "leaky-spp": REPO / "models" / "weights" / "pdet_n_leaky_spp_person.pt"}
IMGSZ = 160  # what the demo detectors were trained at (`make demo`)


def _cli(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "edgeport.cli", *args], capture_output=True, text=True,
                          env=dict(os.environ))
    if proc.returncode not in (0, 1):
        raise SystemExit(f"edgeport {' '.join(args[:2])} failed:\n{proc.stderr[-2000:]}")
    return proc


def _board_ms(transport, model: Path, images: np.ndarray, work: Path) -> float:
    """The board's median ms per image for ``model`` on ``images`` (already in its input layout)."""
    folder = Path(tempfile.mkdtemp(dir=work))
    try:
        shutil.copy2(model, folder / "model.tflite")
        (folder / "inputs").mkdir()
        for i, x in enumerate(images):
            np.save(folder / "inputs" / f"{i:04d}.npy", x[None])
        result = transport.execute(folder, "run")
        if not result["ok"]:
            raise SystemExit(f"the board refused {model.name}: {result['message']}")
        return statistics.median(result["ms"])
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--images", type=int, default=32)
    ap.add_argument("--val", type=int, default=64, help="labelled synthetic validation images for mAP")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "board_bench.json")
    args = ap.parse_args()
    from edgeport.ops.tflite_model import read_tflite
    from edgeport.validate.board.profiles import load_board
    from edgeport.validate.board.runtime import transport_for
    from edgeport.validate.parity.tensors import to_model_input

    transport = transport_for(load_board("tflite-1.13"))
    if transport is None:
        print("the real TFLite 1.13.1 is not installed: `make setup-boards` (needs a python3.7)", file=sys.stderr)
        raise SystemExit(2)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        _cli("data", "synth", "--out", str(work / "data"), "--n", "8", "--n-val", str(args.val), "--imgsz", str(IMGSZ))
        rng = np.random.default_rng(0)
        images = rng.random((args.images, 3, IMGSZ, IMGSZ), dtype=np.float32)
        for neck, ckpt in DEMOS.items():
            out = work / f"convert-{neck}"
            _cli("convert", str(ckpt), "--imgsz", str(IMGSZ), "--board", "tflite-1.13", "--out", str(out))
            row: dict = {"demo": neck, "checkpoint": str(ckpt.relative_to(REPO))}
            report = json.loads((out / "report.json").read_text())
            row["lowered"] = {s["name"]: s["summary"] for s in report["stages"]}.get("lower_for_board")
            # and the repaired file, where the uint8 file failed its gate (convert/passes/repair_pass.py)
            files = {v: out / f"model_{v}.tflite" for v in ("float32", "uint8", "uint8_repaired")
                     if (out / f"model_{v}.tflite").is_file()}
            for variant, path in files.items():
                val = _cli("validate", str(ckpt), "--tflite", str(path), "--board", "tflite-1.13", "--data", str(work / "data"),
                           "--out", str(work / f"validate-{neck}-{variant}"))
                vr = json.loads((work / f"validate-{neck}-{variant}" / "report.json").read_text())
                board = [r for r in vr["results"] if r["runtime"] == "board:tflite-1.13 (TFLite 1.13.1)"]
                reference = vr["results"][0]
                row[variant] = {"bytes": path.stat().st_size, "passed": val.returncode == 0,
                                "map50_board": board[0]["map"]["map50"] if board and board[0]["map"] else None,
                                "map50_pytorch": reference["map"]["map50"] if reference["map"] else None}
            summaries = {v: read_tflite(p) for v, p in files.items()}
            inputs = {v: np.concatenate([to_model_input(images[i:i + 1], s.input_shape, s.input_dtype, s.input_quantization)
                                         for i in range(len(images))]) for v, s in summaries.items()}
            times = {v: [] for v in files}
            for _ in range(args.rounds):  # interleaved: load hits both alike
                for v, path in files.items():
                    times[v].append(_board_ms(transport, path, inputs[v], work))
            for v in files:
                row[v]["ms_per_image"] = round(statistics.median(times[v]), 3)
            row["uint8_speedup"] = round(row["float32"]["ms_per_image"] / row["uint8"]["ms_per_image"], 3)
            if row["float32"]["map50_board"] is not None and row["uint8"]["map50_board"] is not None:
                row["map50_points_lost"] = round(100 * (row["float32"]["map50_board"] - row["uint8"]["map50_board"]), 2)
            rows.append(row)
            print(f"{neck}: float32 {row['float32']['ms_per_image']} ms, uint8 {row['uint8']['ms_per_image']} ms "
                  f"({row['uint8_speedup']}x); mAP@0.5 float32 {row['float32']['map50_board']}, uint8 {row['uint8']['map50_board']}")
    result = {
        "benchmark": "board_bench",
        "runtime": "TensorFlow Lite 1.13.1 (tensorflow==1.13.1, Python 3.7), its Python interpreter, default threads",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "rounds": args.rounds, "images": args.images, "val_images": args.val, "rows": rows,
        "targets": {"map50_points_lost_max": 1.0, "uint8_speedup_aim": 1.5},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
