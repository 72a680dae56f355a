"""Train the shipped demo weights: 2-process DDP (gloo) + SyncBN + accumulation, on CPU.

    .venv/bin/python scripts/train_demo.py                      # pdet-n -> pdet_n_person.pt (make demo)
    .venv/bin/python scripts/train_demo.py --arch pdet-n-bilinear  # -> pdet_n_bilinear_person.pt (make demo-legacy)
    .venv/bin/python scripts/train_demo.py --arch pdet-n-leaky-spp  # -> pdet_n_leaky_spp_person.pt (benchmarks/board_bench.py)

Minutes each on two cores (docs/measured.md: pdet-n-leaky-spp's run). Writes a synthetic person dataset to runs/demo-data/,
trains into runs/demo-train-ARCH/, and copies best.pt to models/weights/.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "runs" / "demo-data"
TARGETS = {"pdet-n": "pdet_n_person.pt", "pdet-n-bilinear": "pdet_n_bilinear_person.pt",
           "pdet-n-leaky-spp": "pdet_n_leaky_spp_person.pt"}  # the write-up's kind: LeakyReLU, SPP
TRAIN_ARGS = [
    "--imgsz", "160", "--epochs", "30", "--world-size", "2", "--syncBN",
    "--batch-size", "16", "--accumulate", "2", "--optimizer", "adamw", "--lr", "0.004", "--lrf", "0.05",
    "--weight-decay", "0.01", "--seed", "0",
]


def edgeport(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "edgeport.cli", *args], check=True)


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", choices=sorted(TARGETS), default="pdet-n")
    arch = ap.parse_args().arch
    run, target = REPO / "runs" / f"demo-train-{arch}", REPO / "models" / "weights" / TARGETS[arch]
    t0 = time.perf_counter()
    edgeport("data", "synth", "--out", str(DATA), "--n", "1200", "--n-val", "200", "--imgsz", "160", "--seed", "0", "--force")
    if run.exists():
        shutil.rmtree(run)
    edgeport("train", "--data", str(DATA), "--out", str(run), "--arch", arch, *TRAIN_ARGS)
    shutil.copyfile(run / "best.pt", target)
    summary = json.loads((run / "summary.json").read_text())
    print(f"best val mAP@0.5 {summary['best_map50']:.3f}; {target.relative_to(REPO)} "
          f"({target.stat().st_size / 1e6:.2f} MB) in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
