"""The trainer's images/s with no data-loading workers against its default count, interleaved.

One rank, SyncBN on, two epochs per run; the figure is the second epoch's images/s (the first
pays for the workers' start and the page cache). Runs alternate, ``--workers 0`` first in each
round, so drift on the machine falls on both. On the CPU the default is no workers, so this is
a GPU measurement (``--device cuda``); the ratio is the default's median over ``--workers 0``'s.

    python benchmarks/loader_bench.py --device cuda [--rounds 3] [--images 1024] [--out benchmarks/results/loader_bench.json]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _epoch_rate(data: Path, out: Path, device: str, imgsz: int, batch: int, workers: list[str]) -> tuple[float, str]:
    cmd = [sys.executable, "-m", "edgeport.cli", "train", "--data", str(data), "--out", str(out), "--device", device, "--imgsz", str(imgsz),
           "--batch-size", str(batch), "--epochs", "2", "--eval-every", "1000", "--force", *workers]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    said = next((line for line in done.stderr.splitlines() if "loader worker" in line), "")
    with open(out / "metrics.csv") as f:
        return float(list(csv.DictReader(f))[-1]["images_per_s"]), said.rsplit(", ", 1)[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--images", type=int, default=1024)
    ap.add_argument("--imgsz", type=int, default=160)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "loader_bench.json")
    args = ap.parse_args()
    rates: dict[str, list[float]] = {"none": [], "default": []}
    said = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = tmp / "data"
        subprocess.run([sys.executable, "-m", "edgeport.cli", "data", "synth", "--out", str(data), "--n", str(args.images),
                        "--n-val", "8", "--imgsz", str(args.imgsz)], check=True, capture_output=True)
        for r in range(args.rounds):
            for name, workers in (("none", ["--workers", "0"]), ("default", [])):
                rate, said[name] = _epoch_rate(data, tmp / name, args.device, args.imgsz, args.batch_size, workers)
                rates[name].append(round(rate, 1))
                print(f"round {r + 1}, {name} ({said[name]}): {rate:.1f} images/s", flush=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    result = {
        "benchmark": "loader_bench",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(), "device": args.device},
        "dataset": {"images": args.images, "imgsz": args.imgsz, "batch_per_process": args.batch_size, "kind": "synthetic persons"},
        "workers": said,
        "images_per_s": rates,
        "median_images_per_s": med,
        "ratio_default_over_none": round(med["default"] / med["none"], 3),
    }
    if args.device == "cuda":
        import torch

        result["machine"].update(gpu=torch.cuda.get_device_name(0), torch=torch.__version__)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
