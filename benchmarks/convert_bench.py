"""Time each conversion stage, and compare the pipeline with a bare onnx2tf run.

For the default detector at each input size: run the pipeline up to and including
``to_tflite`` (no parity validation), then run onnx2tf alone on the same ONNX with the same
flags. Target (issue #2): everything outside onnx2tf costs at most half of onnx2tf's time,
i.e. ``overhead_ratio = (pipeline - onnx2tf inside it) / bare onnx2tf <= 0.5``.

    .venv/bin/python benchmarks/convert_bench.py [--sizes 160 320] [--out benchmarks/results/convert_bench.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import tempfile
import time
from pathlib import Path

from edgeport.convert.base import ConvertConfig
from edgeport.convert.pipeline import PIPELINE, run_pipeline
from edgeport.convert.to_tflite_pass import offline_env, onnx2tf_command, write_calibration

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "models" / "weights" / "pdet_n_person.pt"


def bench_size(imgsz: int, ckpt: Path, arch: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        config = ConvertConfig(checkpoint=ckpt, work_dir=work, arch=arch, imgsz=imgsz)
        passes = [p for p in PIPELINE if p.name != "parity"]
        t0 = time.perf_counter()
        state, records = run_pipeline(config, passes)
        pipeline_s = time.perf_counter() - t0
        (tflite_record,) = [r for r in records if r.name == "to_tflite"]
        onnx2tf_inside = float(re.search(r"onnx2tf ([\d.]+) s", tflite_record.summary).group(1))

        bare = Path(tmp) / "bare"
        bare.mkdir()
        write_calibration(bare, state.calib)
        cmd = onnx2tf_command(state.onnx_path, bare / "tf", int8=True, input_name="images")
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=bare, env=offline_env(), capture_output=True, check=True)
        bare_s = time.perf_counter() - t0
    overhead = pipeline_s - onnx2tf_inside
    return {
        "imgsz": imgsz,
        "stages_s": {r.name: round(r.seconds, 3) for r in records},
        "pipeline_without_validation_s": round(pipeline_s, 3),
        "onnx2tf_inside_pipeline_s": round(onnx2tf_inside, 3),
        "bare_onnx2tf_s": round(bare_s, 3),
        "ratio_pipeline_over_bare": round(pipeline_s / bare_s, 3),
        "overhead_outside_onnx2tf_s": round(overhead, 3),
        "overhead_ratio": round(overhead / bare_s, 3),
        "target_overhead_ratio_max": 0.5,
        "meets_target": overhead / bare_s <= 0.5,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[160, 320])
    ap.add_argument("--checkpoint", type=Path, default=DEMO)
    ap.add_argument("--arch", default="pdet-n")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "convert_bench.json")
    args = ap.parse_args()
    runs = [bench_size(s, args.checkpoint, args.arch) for s in args.sizes]
    result = {
        "benchmark": "convert_bench",
        "arch": args.arch,
        "checkpoint": str(args.checkpoint.relative_to(REPO) if args.checkpoint.is_relative_to(REPO) else args.checkpoint),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "note": "pipeline timed in-process (torch already imported); onnx2tf runs as a child process in both cases",
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for r in runs:
        print(
            f"{r['imgsz']:>4}px  pipeline {r['pipeline_without_validation_s']:6.2f} s  "
            f"bare onnx2tf {r['bare_onnx2tf_s']:6.2f} s  ratio {r['ratio_pipeline_over_bare']:.2f}  "
            f"overhead {r['overhead_ratio']:.2f} (target <= 0.5)  "
            + "  ".join(f"{k} {v:.2f}" for k, v in r["stages_s"].items())
        )
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
