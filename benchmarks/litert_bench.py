"""The litert-torch worker started early (``convert/converters/litert.py: warm_worker``) against one started
when the conversion needs it, on the demo detector, interleaved rounds.

The warm worker imports torch and litert-torch while edgeport runs the passes before the
conversion. It starts only in a one-shot process (the ``edgeport`` command): each round runs
``commands.convert.convert`` in a fresh process, once marked one-shot (warm) and once not (cold),
alternating, and reads the whole run's wall time and the ``to_tflite`` stage from the report.
Needs ``make setup-converters``. Prints and saves JSON.

    .venv/bin/python benchmarks/litert_bench.py [--rounds 4]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "models" / "weights" / "pdet_n_person.pt"
RUN = """
import sys
from pathlib import Path
if sys.argv[2] == "warm":
    from edgeport._lazy import one_shot_process
    one_shot_process()
from edgeport.commands.boards import board
from edgeport.commands.convert import convert
convert(Path(sys.argv[1]), board=board("default"), out=Path(sys.argv[3]), imgsz=160, converter="litert-torch")
"""


def one(mode: str, out: Path) -> dict:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", RUN, str(DEMO), mode, str(out)], capture_output=True, text=True, check=True)
    seconds = time.perf_counter() - t0
    stages = {s["name"]: s["seconds"] for s in json.loads((out / "report.json").read_text())["stages"]}
    return {"seconds": seconds, "to_tflite": stages["to_tflite"]}


def main() -> None:
    from edgeport.convert.converters import litert

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "litert_bench.json")
    args = ap.parse_args()
    litert.require()
    runs: dict[str, list[dict]] = {"warm": [], "cold": []}
    with tempfile.TemporaryDirectory(prefix="litert-bench-") as tmp:
        for i in range(args.rounds):
            for mode in (("warm", "cold") if i % 2 == 0 else ("cold", "warm")):
                runs[mode].append(one(mode, Path(tmp) / f"{mode}-{i}"))
    median = {m: {k: round(statistics.median(r[k] for r in rs), 2) for k in ("seconds", "to_tflite")} for m, rs in runs.items()}
    spread = {m: round(max(r["seconds"] for r in rs) - min(r["seconds"] for r in rs), 2) for m, rs in runs.items()}
    result = {
        "model": "pdet-n demo detector, 160 px, float32 + int8 + validation", "python": platform.python_version(),
        "litert_torch": litert.version(), "rounds": args.rounds, "median": median, "spread_seconds": spread,
        "saved_seconds": round(median["cold"]["seconds"] - median["warm"]["seconds"], 2),
        "ratio": round(median["warm"]["seconds"] / median["cold"]["seconds"], 3),
        "runs": {m: [{k: round(v, 2) for k, v in r.items()} for r in rs] for m, rs in runs.items()},
    }
    print(json.dumps(result, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
