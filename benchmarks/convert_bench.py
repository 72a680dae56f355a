"""Time each conversion stage, compare the pipeline with a bare onnx2tf run, and the two onnx2tf lines.

1. For the default detector at each input size: run the pipeline up to and including
   ``to_tflite`` (no parity validation), then run onnx2tf alone on the same ONNX with the
   same flags. Target (issue #2): everything outside onnx2tf costs at most half of onnx2tf's
   time, i.e. ``overhead_ratio = (pipeline - onnx2tf inside it) / bare onnx2tf <= 0.5``.
2. When the other Python's environment exists (``.venv`` for 3.11 with onnx2tf 1.28,
   ``.venv312`` for 3.12+ with onnx2tf 2.x; or ``--other-python``): the same bare conversion
   with each line side by side (wall time, peak memory), and the demo's whole ``edgeport
   convert`` (conversion and validation) on each. Target (issue #10): 3.12 takes at most
   0.5x the time of 3.11.

    .venv/bin/python benchmarks/convert_bench.py [--sizes 160 320] [--other-python .venv312/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from edgeport.convert.base import ConvertConfig, run_pipeline
from edgeport.convert.converters.base import offline_env
from edgeport.convert.converters.onnx2tf import onnx2tf_command, write_calibration
from edgeport.convert.pipeline import PIPELINE

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "models" / "weights" / "pdet_n_person.pt"


MEASURE = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
           "p = subprocess.run(sys.argv[1:], capture_output=True); "
           "print(p.returncode, time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def measured(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, peak resident MiB) of one child process, itself measured in a fresh process."""
    out = subprocess.run([sys.executable, "-c", MEASURE, *cmd], cwd=cwd, env=offline_env(), capture_output=True, text=True, check=True)
    code, seconds, kib = out.stdout.split()
    if int(code) != 0:
        raise RuntimeError(f"{cmd[:3]} failed with exit {code}")
    return float(seconds), int(kib) / 1024


def line_info(python: str) -> dict:
    probe = "import importlib.metadata as m, platform; print(platform.python_version(), m.version('onnx2tf'))"
    version, onnx2tf = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    return {"python": version, "onnx2tf": onnx2tf, "executable": python}


def other_python(given: Path | None) -> str | None:
    if given is not None:
        return str(given)
    mine = sys.version_info[:2] >= (3, 12)
    candidate = REPO / (".venv" if mine else ".venv312") / "bin" / "python"
    return str(candidate) if candidate.exists() else None


def bench_lines(state, onnx2tf_cmd, pythons: list[str], tmp: Path) -> list[dict]:
    """The same bare conversion with each onnx2tf line."""
    from edgeport.convert.converters.onnx2tf import Onnx2tfBackend

    out = []
    for i, python in enumerate(pythons):
        info = line_info(python)
        work = tmp / f"line{i}"
        work.mkdir()
        write_calibration(work, state.calib)
        cmd = onnx2tf_cmd(state.onnx_path, work / "tf", int8=True, input_name="images", backend=Onnx2tfBackend(info["onnx2tf"]),
                          python=python)
        seconds, mib = measured(cmd, work)
        out.append({**info, "bare_onnx2tf_s": round(seconds, 3), "peak_mib": round(mib, 1)})
    return out


def bench_demo(pythons: list[str], tmp: Path, repeat: int = 5) -> list[dict]:
    """The demo's whole `edgeport convert` (conversion and validation), per Python: the median of
    ``repeat`` runs, the Pythons interleaved so that a busy moment of the machine hits both."""
    import statistics

    times: dict[int, list[float]] = {i: [] for i in range(len(pythons))}
    peaks: dict[int, float] = {}
    for k in range(repeat):
        for i, python in enumerate(pythons):
            cmd = [python, "-m", "edgeport.cli", "convert", str(DEMO), "--imgsz", "160", "--out", str(tmp / f"demo{i}-{k}")]
            seconds, mib = measured(cmd, REPO)
            times[i].append(seconds)
            peaks[i] = max(peaks.get(i, 0.0), mib)
    return [{**line_info(python), "convert_and_validate_s": round(statistics.median(times[i]), 2),
             "runs_s": [round(t, 2) for t in times[i]], "peak_mib": round(peaks[i], 1)} for i, python in enumerate(pythons)]


def bench_size(imgsz: int, ckpt: Path, arch: str, pythons: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        config = ConvertConfig(checkpoint=ckpt, work_dir=work, arch=arch, imgsz=imgsz)
        passes = [p for p in PIPELINE if p.name != "parity"]
        t0 = time.perf_counter()
        state, records = run_pipeline(config, passes)
        pipeline_s = time.perf_counter() - t0
        (tflite_record,) = [r for r in records if r.name == "to_tflite"]
        onnx2tf_inside = float(re.search(r"\): ([\d.]+) s", tflite_record.summary).group(1))

        bare = Path(tmp) / "bare"
        bare.mkdir()
        write_calibration(bare, state.calib)
        cmd = onnx2tf_command(state.onnx_path, bare / "tf", int8=True, input_name="images")
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=bare, env=offline_env(), capture_output=True, check=True)
        bare_s = time.perf_counter() - t0
        lines = bench_lines(state, onnx2tf_command, pythons, Path(tmp)) if len(pythons) > 1 else []
    overhead = pipeline_s - onnx2tf_inside
    return {
        "onnx2tf_lines": lines,
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
    ap.add_argument("--other-python", type=Path, help="the other onnx2tf line's interpreter (default: .venv or .venv312)")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "convert_bench.json")
    args = ap.parse_args()
    other = other_python(args.other_python)
    pythons = [sys.executable] + ([other] if other else [])
    runs = [bench_size(s, args.checkpoint, args.arch, pythons) for s in args.sizes]
    with tempfile.TemporaryDirectory() as tmp:
        demo = bench_demo(pythons, Path(tmp)) if other else []
    by_minor = {tuple(int(v) for v in d["python"].split(".")[:2]): d for d in demo}
    new = next((d for v, d in by_minor.items() if v >= (3, 12)), None)
    old = next((d for v, d in by_minor.items() if v < (3, 12)), None)
    result = {
        "benchmark": "convert_bench",
        "arch": args.arch,
        "checkpoint": str(args.checkpoint.relative_to(REPO) if args.checkpoint.is_relative_to(REPO) else args.checkpoint),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "note": "pipeline timed in-process (torch already imported); onnx2tf runs as a child process in both cases",
        "runs": runs,
        "demo_convert_and_validate": demo,
        "py312_over_py311": round(new["convert_and_validate_s"] / old["convert_and_validate_s"], 3) if new and old else None,
        "target_py312_over_py311_max": 0.5,
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
    for r in runs:
        for line in r["onnx2tf_lines"]:
            print(f"{r['imgsz']:>4}px  Python {line['python']} onnx2tf {line['onnx2tf']}: {line['bare_onnx2tf_s']:.2f} s, "
                  f"peak {line['peak_mib']:.0f} MiB")
    for d in demo:
        print(f"demo convert + validate, Python {d['python']} onnx2tf {d['onnx2tf']}: {d['convert_and_validate_s']:.1f} s")
    if result["py312_over_py311"] is not None:
        print(f"Python 3.12 / 3.11: {result['py312_over_py311']:.2f} (target <= 0.5)")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
