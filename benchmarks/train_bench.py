"""Trainer throughput and gradient all-reduce counts, in real gloo processes on the CPU.

1. images/s at world size 1 and 2 (same per-process batch, SyncBN on), from the trainer's
   own metrics of the last epoch;
2. gradient all-reduce rounds per optimizer step for K = 1, 2, 4 with ``no_sync``
   accumulation and with ``--sync-micro-steps`` (an all-reduce on every micro-step),
   counted by the trainer's DDP communication hook.

    .venv/bin/python benchmarks/train_bench.py [--images 128] [--imgsz 160] [--out benchmarks/results/train_bench.json]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from edgeport.models.synth import make_scene
from edgeport.validate.datasets import write_dataset

REPO = Path(__file__).resolve().parents[1]


def _train(data: Path, out: Path, *args: str) -> list[dict]:
    cmd = [sys.executable, "-m", "edgeport.cli", "train", "--data", str(data), "--out", str(out), "--eval-every", "1000", *args]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    with open(out / "metrics.csv") as f:
        return list(csv.DictReader(f))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=128)
    ap.add_argument("--imgsz", type=int, default=160)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "train_bench.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        rng = np.random.default_rng(0)
        data = tmp / "data"
        write_dataset(data, {"train": [make_scene(rng, args.imgsz) for _ in range(args.images)],
                             "val": [make_scene(rng, args.imgsz) for _ in range(8)]}, size=args.imgsz)
        throughput = []
        for world in (1, 2):
            rows = _train(data, tmp / f"tp{world}", "--epochs", "2", "--world-size", str(world), "--batch-size", str(args.batch_size),
                          "--imgsz", str(args.imgsz))
            last = rows[-1]  # the first epoch pays for image decoding and warm-up
            throughput.append({"world_size": world, "batch_per_process": args.batch_size, "images_per_s": round(float(last["images_per_s"]), 1),
                               "epoch_seconds": round(float(last["seconds"]), 2)})
            print(f"world size {world}: {float(last['images_per_s']):.1f} images/s")
        allreduce = []
        for k in (1, 2, 4):
            for no_sync in (True, False):
                extra = [] if no_sync else ["--sync-micro-steps"]
                (row,) = _train(data, tmp / f"ar{k}{no_sync}", "--epochs", "1", "--world-size", "2", "--batch-size", "4",
                                "--accumulate", str(k), "--imgsz", "64", "--deterministic", *extra)
                steps = int(row["optimizer_steps"])
                entry = {"accumulate": k, "no_sync": no_sync, "optimizer_steps": steps,
                         "allreduce_rounds": int(row["allreduce_rounds"]),
                         "allreduce_rounds_per_step": round(int(row["allreduce_rounds"]) / steps, 3),
                         "allreduce_buckets_per_step": round(int(row["allreduce_buckets"]) / steps, 3)}
                allreduce.append(entry)
                print(f"K={k} {'no_sync' if no_sync else 'sync every micro-step'}: "
                      f"{entry['allreduce_rounds_per_step']} all-reduce rounds / optimizer step")
    result = {
        "benchmark": "train_bench",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "dataset": {"images": args.images, "imgsz": args.imgsz, "kind": "synthetic persons"},
        "throughput": throughput,
        "speedup_world2_over_world1": round(throughput[1]["images_per_s"] / throughput[0]["images_per_s"], 3),
        "allreduce": allreduce,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
