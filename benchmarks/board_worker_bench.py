"""The board worker's start on the write-up's runtime: TensorFlow 1.13.1 imported whole, against
TensorFlow's own TFLite interpreter loaded alone (``validate/board/worker.py: _tensorflow_1_lite``).

Every parity row and probe on the installed TFLite 1.13.1 is one ``python board_worker.py run|probe
DIR`` process; a run of a small detector takes milliseconds there, its start most of the rest. The
demo detector is converted once for the board (``--board tflite-1.13``: float32 and uint8, lowered);
then each file is run on the same images by the worker as it ships and by a copy of it that imports
TensorFlow whole, in turn, for several rounds. Each process is timed from start to end; the outputs
of the two must be the same bytes. Needs the runtime `make setup-boards` installs: without it, says
so and exits 2.

    .venv/bin/python benchmarks/board_worker_bench.py [--rounds 7] [--out benchmarks/results/board_worker_bench.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "models" / "weights" / "pdet_n_person.pt"
IMAGES = 4
WHOLE = "found = None  # (benchmark: TensorFlow imported whole)"


def _run(python: Path, worker: Path, folder: Path) -> float:
    shutil.rmtree(folder / "outputs", ignore_errors=True)
    (folder / "result.json").unlink(missing_ok=True)
    t0 = time.perf_counter()
    subprocess.run([str(python), str(worker), "run", str(folder)], check=True, capture_output=True)
    seconds = time.perf_counter() - t0
    result = json.loads((folder / "result.json").read_text())
    if not result["ok"]:
        raise SystemExit(f"the board refused {folder.name}: {result['message']}")
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "board_worker_bench.json")
    args = ap.parse_args()

    from edgeport.validate.board.profiles import load_board
    from edgeport.validate.board.runtime import WORKER, installed_python

    python = installed_python(load_board("tflite-1.13"))
    if python is None:
        print("TFLite 1.13.1 is not installed: make setup-boards", file=sys.stderr)
        sys.exit(2)
    shipped = WORKER.read_text()
    assert "        found = _tensorflow_1_lite()\n" in shipped
    work = Path(tempfile.mkdtemp(prefix="edgeport-worker-bench-"))
    try:
        whole = work / "worker_whole.py"
        whole.write_text(shipped.replace("found = _tensorflow_1_lite()", WHOLE, 1))
        out = work / "demo"
        subprocess.run([sys.executable, "-m", "edgeport.cli", "convert", str(DEMO), "--imgsz", "160", "--board", "tflite-1.13",
                        "--out", str(out)], check=True, capture_output=True)
        rows = {}
        for variant in ("float32", "uint8"):
            folders = {}
            for way in ("alone", "whole"):
                folder = folders[way] = work / f"{variant}-{way}"
                (folder / "inputs").mkdir(parents=True)
                shutil.copy2(out / f"model_{variant}.tflite", folder / "model.tflite")
                rng = np.random.default_rng(0)
                for i in range(IMAGES):
                    x = rng.random((1, 160, 160, 3), dtype=np.float32)
                    np.save(folder / "inputs" / f"{i:04d}.npy", (x * 255).round().astype(np.uint8) if variant == "uint8" else x)
            times: dict[str, list[float]] = {"alone": [], "whole": []}
            for _ in range(args.rounds):  # interleaved: each round runs both
                times["alone"].append(_run(python, WORKER, folders["alone"]))
                times["whole"].append(_run(python, whole, folders["whole"]))
            written = {way: {p.name: p.read_bytes() for p in (folders[way] / "outputs").glob("*.npy")} for way in folders}
            same = len(written["whole"]) == IMAGES * len(json.loads((folders["whole"] / "result.json").read_text())["outputs"]) \
                and written["alone"] == written["whole"]
            runtimes = {way: json.loads((folders[way] / "result.json").read_text())["version"] for way in folders}
            rows[variant] = {"seconds": {way: statistics.median(t) for way, t in times.items()},
                             "spread": {way: max(t) - min(t) for way, t in times.items()},
                             "ratio": statistics.median(times["alone"]) / statistics.median(times["whole"]),
                             "same_outputs": same, "runtime": runtimes}
            print(f"{variant}: alone {rows[variant]['seconds']['alone']:.3f} s, TensorFlow imported whole "
                  f"{rows[variant]['seconds']['whole']:.3f} s (ratio {rows[variant]['ratio']:.2f}); outputs the same bytes: {same}")
            if not same:
                raise SystemExit(f"{variant}: the two workers' outputs differ")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {"benchmark": "board_worker_bench", "runtime": "TFLite 1.13.1 (installed by edgeport)", "images": IMAGES,
              "rounds": args.rounds, "machine": {"cpus": __import__("os").cpu_count(), "python (this process)": platform.python_version()},
              "date": time.strftime("%Y-%m-%d"), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
