"""``edgeport validate --data`` against ``yolo val``: images/s on the same labelled images, and memory as
the set grows (issue #56, part 5).

The weights: YOLOv8n (nc=1) with the zoo's trained-like head (``artifact_bench.yolo_weights``). Each
tool validates its own int8 file of them: edgeport's ``convert`` writes one, Ultralytics' int8 TFLite
export the other (``yolo val`` reads its own export's outputs; edgeport's file keeps boxes in pixels).
Both calibrate on the same 32 images, apart from the measured ones (``edgeport data synth`` scenes at
``--imgsz``). Timed as a user runs them, whole commands, interleaved round by round, order turned each
round; the median of ``--rounds``:

- ``edgeport validate --rows file``: the file on TFLite's optimised kernels and its mAP on every image,
  the work ``yolo val`` does;
- ``yolo val`` (``YOLO(file).val(batch=1)``, in the litert-torch environment, which holds Ultralytics);
- ``edgeport validate`` with every row (PyTorch's mAP on every image too, and parity's rows): the full check.

Peak memory (maximum resident set, ``/usr/bin/time``) of ``--rows file`` at 100 and at all images.

    .venv/bin/python benchmarks/validate_vs_yolo_val.py [--images 500] [--imgsz 640] [--rounds 2]
        [--out benchmarks/results/validate_vs_yolo_val.json] [--work DIR]
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
import time
from pathlib import Path

import artifact_bench  # noqa: E402 -- the same weights and the peer's export (puts tests/zoo on the path)

REPO = Path(__file__).resolve().parents[1]
CALIB_IMAGES = 32
FEWER = 100  # the smaller set memory is compared at
SPEED_RATIO_MIN, MEMORY_RATIO_MAX = 1.0, 1.2

YOLO_VAL = """
import os, sys
os.environ["YOLO_OFFLINE"] = "1"
from ultralytics import YOLO
m = YOLO(sys.argv[1], task="detect").val(data=sys.argv[2], imgsz=int(sys.argv[3]), batch=1, device="cpu", plots=False,
                                          verbose=False)
print("MAP", m.box.map, m.box.map50)
"""


def timed(cmd: list[str], cwd: Path, env=None) -> dict:
    """Wall seconds and peak resident memory (MiB) of one command; its last lines where it failed."""
    t0 = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-f", "PEAK_KB %M", *cmd], cwd=cwd, capture_output=True, text=True, env=env,
                          timeout=3600)
    seconds = time.perf_counter() - t0
    peak = [ln for ln in proc.stderr.splitlines() if ln.startswith("PEAK_KB ")]
    out = {"exit": proc.returncode, "seconds": round(seconds, 2), "peak_mib": round(int(peak[-1].split()[1]) / 1024, 1) if peak else None}
    if proc.returncode != 0:
        out["said"] = (proc.stderr.strip().splitlines() or [""])[-2:]
    out["stdout_tail"] = proc.stdout.strip().splitlines()[-3:]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=500)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "validate_vs_yolo_val.json")
    ap.add_argument("--work", type=Path, help="keep the files made here (default: a temporary folder, removed)")
    args = ap.parse_args()
    from edgeport.convert.converters import litert

    if not litert.installed():
        raise SystemExit(f"yolo val runs in the litert-torch environment: {litert.install_hint()}")
    work = args.work or Path(tempfile.mkdtemp(prefix="edgeport-vs-yolo-val-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        result = measure(args, work, litert.env_dir() / "bin" / "python")
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("ratios", "met")}, indent=1))
    print(f"saved {args.out}")


def measure(args, work: Path, peer_python: Path) -> dict:
    edgeport = [sys.executable, "-m", "edgeport.cli"]
    data = work / "data"
    subprocess.run([*edgeport, "data", "synth", "--out", str(data), "--n", str(CALIB_IMAGES), "--n-val", str(args.images),
                    "--imgsz", str(args.imgsz)], check=True, capture_output=True)
    calib_yaml, val_yaml = work / "calib.yaml", work / "val.yaml"
    calib_yaml.write_text(f"path: {data}\ntrain: images/train\nval: images/train\nnames:\n  0: person\n")
    val_yaml.write_text(f"path: {data}\ntrain: images/train\nval: images/val\nnames:\n  0: person\n")
    sd, ckpt = artifact_bench.yolo_weights("trained", args.imgsz, work)
    conv = artifact_bench.edgeport_convert(ckpt, args.imgsz, data / "images" / "train", work / "conv", arch="zoo_models:yolov8n",
                                           cwd=artifact_bench.ZOO, val=data / "images" / "val")
    peer_run, peer_file = artifact_bench.peer_export(sd, args.imgsz, calib_yaml, work / "peer")
    ours = work / "conv" / "model_int8.tflite"
    if not ours.is_file() or peer_file is None:
        raise SystemExit(f"no files to validate: edgeport {conv}, peer {peer_run}")
    env = dict(os.environ, YOLO_OFFLINE="1")
    check = [*edgeport, "validate", str(ckpt), "--arch", "zoo_models:yolov8n", "--tflite", str(ours), "--data", str(data), "--force"]
    commands = {
        "edgeport validate --rows file": [*check, "--rows", "file", "--out", str(work / "v-file")],
        "yolo val": [str(peer_python), "-c", YOLO_VAL, str(peer_file), str(val_yaml), str(args.imgsz)],
        "edgeport validate (every row)": [*check, "--out", str(work / "v-all")],
    }
    runs: dict[str, list[dict]] = {name: [] for name in commands}
    for r in range(args.rounds):
        for name in (list(commands) if r % 2 == 0 else list(reversed(commands))):
            run = timed(commands[name], artifact_bench.ZOO, env)
            print(f"round {r + 1}: {name}: {run}", flush=True)
            runs[name].append(run)
    fewer = timed([*commands["edgeport validate --rows file"], "--images", str(FEWER), "--out", str(work / "v-fewer")],
                  artifact_bench.ZOO, env)
    cases = {}
    for name, rs in runs.items():
        ok = [x for x in rs if x["exit"] in (0, 1)]
        seconds = statistics.median(x["seconds"] for x in ok) if ok else None
        cases[name] = {"runs": rs, "median_s": seconds, "images_per_s": round(args.images / seconds, 2) if seconds else None,
                       "peak_mib": max((x["peak_mib"] for x in ok if x["peak_mib"]), default=None)}
    ours_ips, peer_ips = cases["edgeport validate --rows file"]["images_per_s"], cases["yolo val"]["images_per_s"]
    many, few = cases["edgeport validate --rows file"]["peak_mib"], fewer["peak_mib"]
    report = json.loads((work / "v-file" / "report.json").read_text()) if (work / "v-file" / "report.json").is_file() else {}
    ratios = {"speed": round(ours_ips / peer_ips, 3) if ours_ips and peer_ips else None,
              "memory_all_vs_fewer": round(many / few, 3) if many and few else None}
    return {
        "benchmark": "validate_vs_yolo_val", "python": platform.python_version(), "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"), "model": "yolov8n (nc=1), the zoo's trained-like head", "imgsz": args.imgsz,
        "images": args.images, "rounds": args.rounds,
        "files": {"edgeport": {"convert": conv, "bytes": ours.stat().st_size},
                  "peer": {"export": peer_run, "bytes": peer_file.stat().st_size}},
        "cases": cases, f"edgeport validate --rows file --images {FEWER}": fewer,
        "edgeport_map": (report.get("dataset") or {}).get("rows"),
        "ratios": ratios,
        "target": f"images/s ratio (edgeport --rows file / yolo val) >= {SPEED_RATIO_MIN}; peak memory at {args.images} images "
                  f"<= {MEMORY_RATIO_MAX}x that at {FEWER}",
        "met": bool(ratios["speed"] and ratios["speed"] >= SPEED_RATIO_MIN and ratios["memory_all_vs_fewer"]
                    and ratios["memory_all_vs_fewer"] <= MEMORY_RATIO_MAX),
    }


if __name__ == "__main__":
    main()
