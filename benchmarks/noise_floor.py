"""The noise floor of box agreement, measured on the zoo's detectors (docs/validation.md).

For each detector -- its head as built (an untrained class branch: few boxes) and as training
leaves it (class logits spread around 0: a busy detector, hundreds of near-tied boxes) -- runs
``edgeport convert`` and reads, per row, how many of PyTorch's boxes a change that means nothing
already moves (``noise_floor``), how many are stable under it, and what the row misses or adds
against all of PyTorch's boxes (raw) and above the floor (judged). Prints a Markdown table and
saves JSON in benchmarks/results/noise_floor.json.

    .venv/bin/python benchmarks/noise_floor.py [--models yolov8n,yolo11n] [--imgsz N]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ZOO = REPO / "tests" / "zoo"
sys.path.insert(0, str(ZOO))
DETECTORS = ("yolov8n", "yolo11n", "yolov5nu", "yolov8n_pose", "yolov8n_seg", "yolov10n")
ROWS = ("folded/pytorch", "float32/tflite", "int8/tflite", "int8/tflite-ref")


def measure(name: str, busy: bool, imgsz: int | None, work: Path) -> dict:
    import test_zoo
    import zoo_models

    folder = work / f"{name}-{'busy' if busy else 'as-built'}"
    folder.mkdir()
    ckpt = test_zoo._checkpoint(name, folder, trained_head=busy)
    size = imgsz or zoo_models.ZOO[name][1]
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "edgeport.cli", "convert", str(ckpt), "--arch", f"zoo_models:{name}",
                           "--imgsz", str(size), "--out", str(folder / "out"), *zoo_models.ZOO[name][2]],
                          cwd=ZOO, capture_output=True, text=True)
    out = {"model": name, "head": "as training leaves it" if busy else "as built", "imgsz": size, "exit": proc.returncode,
           "seconds": round(time.perf_counter() - t0, 1), "rows": {}}
    report = folder / "out" / "report.json"
    if not report.is_file():
        out["error"] = proc.stderr[-500:]
        return out
    for r in json.loads(report.read_text())["results"]:
        key = f"{r['variant']}/{r['runtime']}"
        d = r.get("detections")
        if key in ROWS and d:
            out["rows"][key] = {k: d.get(k) for k in ("reference_boxes", "missed", "extra", "noise_floor", "stable_boxes",
                                                      "missed_stable", "extra_beyond")} | {"passed": r["passed"]}
            if not r["passed"]:
                from edgeport.validate.parity.result import ResultRow
                from edgeport.validate.report.schema import Report, failures

                (failed,) = [f for f in failures(Report((ResultRow.from_dict(r, key),))) if f.what == key]
                out["rows"][key]["failed"] = list(failed.reasons[:3])
    return out


def table(results: list[dict]) -> str:
    lines = ["| model | head | row | PyTorch's boxes | raw missed / added | floor | stable | judged missed / added | row |",
             "|---|---|---|---|---|---|---|---|---|"]
    failed = []
    for m in results:
        for key, d in m["rows"].items():
            lines.append(f"| {m['model']} ({m['imgsz']} px) | {m['head']} | {key} | {d['reference_boxes']} | {d['missed']} / {d['extra']} "
                         f"| {d['noise_floor']} | {d['stable_boxes']} | {d['missed_stable']} / {d['extra_beyond']} "
                         f"| {'pass' if d['passed'] else 'FAIL'} |")
            if d.get("failed"):
                failed.append(f"- {m['model']} ({m['head']}) {key}: {'; '.join(d['failed'])}")
    return "\n".join(lines + [""] + failed)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(DETECTORS))
    ap.add_argument("--imgsz", type=int, default=None)
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="edgeport-noise-") as tmp:
        for name in args.models.split(","):
            for busy in (False, True):
                results.append(measure(name, busy, args.imgsz, Path(tmp)))
                print(json.dumps(results[-1]), flush=True)
    print(table(results))
    dest = REPO / "benchmarks" / "results" / "noise_floor.json"
    dest.write_text(json.dumps({"python": platform.python_version(), "results": results}, indent=2) + "\n")
    print(f"saved {dest.relative_to(REPO)}")


if __name__ == "__main__":
    main()
