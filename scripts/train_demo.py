"""Train the shipped demo weights: pdet-n, 2-process DDP (gloo) + SyncBN + accumulation, on CPU.

    .venv/bin/python scripts/train_demo.py          # about 7-8 minutes on two cores

Writes a synthetic person dataset to runs/demo-data/, trains into runs/demo-train/, and
copies best.pt to models/weights/pdet_n_person.pt (what `make demo` converts).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA, RUN = REPO / "runs" / "demo-data", REPO / "runs" / "demo-train"
TARGET = REPO / "models" / "weights" / "pdet_n_person.pt"
TRAIN_ARGS = [
    "--arch", "pdet-n", "--imgsz", "160", "--epochs", "30", "--world-size", "2", "--syncBN",
    "--batch-size", "16", "--accumulate", "2", "--optimizer", "adamw", "--lr", "0.004", "--lrf", "0.05",
    "--weight-decay", "0.01", "--seed", "0",
]


def edgeport(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "edgeport.cli", *args], check=True)


def main() -> None:
    t0 = time.perf_counter()
    edgeport("data", "synth", "--out", str(DATA), "--n", "1200", "--n-val", "200", "--imgsz", "160", "--seed", "0", "--force")
    if RUN.exists():
        shutil.rmtree(RUN)
    edgeport("train", "--data", str(DATA), "--out", str(RUN), *TRAIN_ARGS)
    shutil.copyfile(RUN / "best.pt", TARGET)
    summary = json.loads((RUN / "summary.json").read_text())
    print(f"best val mAP@0.5 {summary['best_map50']:.3f}; {TARGET.relative_to(REPO)} "
          f"({TARGET.stat().st_size / 1e6:.2f} MB) in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
