"""Every zoo model's ``edgeport convert`` against YOLOv8n's at the same size (issue #34: none over 3x).

Each model of ``tests/zoo/zoo_models.py`` as its zoo test converts it (its checkpoint: DDP
prefixes, SyncBatchNorm; its ``--outputs``; ``--no-repair``, so what is timed is conversion and
validation, as for YOLOv8n) but at ``--imgsz``, one after another, with YOLOv8n (a head as
training leaves it, as in ``zoo_bench.py``) first and last, so a machine that slowed in between
shows. The ratio is each model's time over the median of YOLOv8n's runs. A model refused at the
door (exit 2: torchvision's detectors post-process in forward) or whose converter fails (exit 3)
is timed all the same and its exit says so. Prints and saves JSON.

    .venv/bin/python benchmarks/zoo_models_bench.py [--imgsz 320] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "benchmarks"), str(REPO / "tests" / "zoo")]
import test_zoo  # noqa: E402
import zoo_models  # noqa: E402
from zoo_bench import time_edgeport  # noqa: E402

BOUND = 3.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--imgsz", type=int, default=320)
    ap.add_argument("--only", nargs="*", default=None, metavar="NAME", help="these zoo models only (YOLOv8n always runs)")
    ap.add_argument("--out", type=Path, help="default: benchmarks/results/zoo_models_bench_SIZE.json")
    args = ap.parse_args()
    names = [n for n in zoo_models.ZOO if n != "yolov8n" and (args.only is None or n in args.only)]
    out = args.out or REPO / "benchmarks" / "results" / f"zoo_models_bench_{args.imgsz}.json"
    runs: dict[str, list[dict]] = {"yolov8n": []}
    with tempfile.TemporaryDirectory(prefix="edgeport-zoo-models-") as tmp:
        tmp = Path(tmp)

        def run(name: str, k: int) -> None:
            folder = tmp / f"{name}-{k}"
            folder.mkdir()
            ckpt = test_zoo._checkpoint(name, folder, trained_head=name == "yolov8n")
            options = zoo_models.ZOO[name][2]
            result = time_edgeport(ckpt, args.imgsz, folder / "out", *options, "--no-repair", arch=name)
            result.pop("rows", None)
            runs.setdefault(name, []).append(result)
            print(f"{args.imgsz} px: {name} {result['seconds']} s (exit {result['exit']})", file=sys.stderr)

        run("yolov8n", 0)
        for name in names:
            run(name, 0)
        run("yolov8n", 1)
    base = statistics.median(r["seconds"] for r in runs["yolov8n"])
    ratios = {name: round(rs[0]["seconds"] / base, 3) for name, rs in runs.items() if name != "yolov8n"}
    result = {"imgsz": args.imgsz, "python": platform.python_version(), "cpus": __import__("os").cpu_count(),
              "date": time.strftime("%Y-%m-%d"), "yolov8n_median_s": round(base, 2), "bound": BOUND,
              "ratio_to_yolov8n": ratios, "over_bound": sorted(n for n, r in ratios.items() if r > BOUND),
              "exits": {name: [r["exit"] for r in rs] for name, rs in runs.items()}, "runs": runs}
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("imgsz", "yolov8n_median_s", "ratio_to_yolov8n", "over_bound", "exits")}, indent=2))
    print(f"saved {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
