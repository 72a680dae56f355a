"""Quantised files that pass, model by board: where edgeport stands before any repair (#33).

For each zoo model -- an Ultralytics head as training leaves it, the others as built, random
weights with non-trivial BatchNorm (no trained weights or photographs exist offline: the images
are edgeport's synthetic scenes) -- runs ``edgeport convert`` for the default board (int8, per
channel) and for tflite-1.13 (uint8, per tensor; its real TFLite 1.13.1 where installed) and
reads the report: whether float32 passes, whether the quantised file was written and passes on
every row, its worst output cosine, its latency against float32 on the board's runtime (the board
row's ms per image), and the op whose own quantisation carries the most error
(``validate/parity/op_errors.py``). Prints a Markdown table and the count the issue asks for:
models whose float32 passes and whose quantised file does not. Saves JSON in
benchmarks/results/quant_bench.json.

    .venv/bin/python benchmarks/quant_bench.py [--models yolov8n,resnet18] [--boards default,tflite-1.13]
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
BOARDS = ("default", "tflite-1.13")


def measure(name: str, board: str, work: Path) -> dict:
    import test_zoo
    import zoo_models

    folder = work / f"{name}-{board}"
    folder.mkdir()
    framework, size, extra = zoo_models.ZOO[name]
    ckpt = test_zoo._checkpoint(name, folder, trained_head=framework == "ultralytics")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "edgeport.cli", "convert", str(ckpt), "--arch", f"zoo_models:{name}",
                           "--imgsz", str(size), "--board", board, "--out", str(folder / "out"), *extra],
                          cwd=ZOO, capture_output=True, text=True)
    out = {"model": name, "board": board, "imgsz": size, "exit": proc.returncode, "seconds": round(time.perf_counter() - t0, 1)}
    report = folder / "out" / "report.json"
    if not report.is_file():
        out["error"] = proc.stderr.strip().splitlines()[-1][-300:] if proc.stderr.strip() else f"exit {proc.returncode}"
        return out
    rows = json.loads(report.read_text())["results"]
    variant = "int8" if board == "default" else "uint8"
    mine = [r for r in rows if r["variant"] == variant]
    floats = [r for r in rows if r["variant"] == "float32"]
    board_row = next((r for r in reversed(mine) if r["runtime"].startswith("board:")), None)
    float_board = next((r for r in reversed(floats) if r["runtime"].startswith("board:")), None)
    written = any(r["outputs"] for r in mine)
    out.update(variant=variant, float32_passes=bool(floats) and all(r["passed"] for r in floats), written=written,
               passes=written and all(r["passed"] for r in mine),
               worst_cosine=min((o["cosine"] for r in mine for o in r["outputs"] if isinstance(o.get("cosine"), float)), default=None))
    if not written:
        out["why_not"] = next((v["reasons"][0] for r in mine if (v := r.get("verdict")) and v.get("reasons")), "no row")[:200]
    if board_row and float_board and board_row.get("ms_per_image") and float_board.get("ms_per_image"):
        out["latency_vs_float32"] = round(board_row["ms_per_image"] / float_board["ms_per_image"], 2)
        out["latency_on"] = board_row["runtime"]
    errors = next((r["op_errors"] for r in mine if r.get("op_errors")), None)
    if errors and errors.get("worst"):
        worst = errors["worst"][0]
        out["worst_op"] = {"op": worst["op"], "tensor": worst["tensor"][:80], "own": worst["own"], "reached": worst["reached"]}
    return out


def table(results: list[dict]) -> str:
    lines = ["| model | board | float32 | quantised | worst cosine | latency / float32 | op with most own error |",
             "|---|---|---|---|---|---|---|"]
    for m in results:
        if "error" in m:
            lines.append(f"| {m['model']} | {m['board']} | - | - | - | - | (no report: {m['error'][:80]}) |")
            continue
        q = ("passes" if m["passes"] else "FAILS") if m["written"] else f"not written ({m.get('why_not', '')[:60]})"
        cos = f"{m['worst_cosine']:.4f}" if m["worst_cosine"] is not None else "-"
        lat = f"{m['latency_vs_float32']:.2f} ({m['latency_on']})" if "latency_vs_float32" in m else "-"
        op = (f"{m['worst_op']['op']} {m['worst_op']['own']:.1%} own ({m['worst_op']['reached']:.1%} reached)"
              if "worst_op" in m else "-")
        lines.append(f"| {m['model']} ({m['imgsz']} px) | {m['board']} {m['variant']} | {'passes' if m['float32_passes'] else 'FAILS'} "
                     f"| {q} | {cos} | {lat} | {op} |")
    return "\n".join(lines)


def main() -> None:
    import zoo_models

    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(zoo_models.ZOO))
    ap.add_argument("--boards", default=",".join(BOARDS))
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="edgeport-quant-") as tmp:
        for name in args.models.split(","):
            for board in args.boards.split(","):
                results.append(measure(name, board, Path(tmp)))
                print(json.dumps(results[-1]), flush=True)
    print(table(results))
    counts = {}
    for board in args.boards.split(","):
        float_ok = [m for m in results if m["board"] == board and m.get("float32_passes")]
        counts[board] = {"float32_passes": len(float_ok), "no_passing_quantised_file": sum(not m["passes"] for m in float_ok)}
        print(f"{board}: {counts[board]['no_passing_quantised_file']} of {len(float_ok)} models whose float32 passes have no "
              f"passing quantised file")
    dest = REPO / "benchmarks" / "results" / "quant_bench.json"
    dest.write_text(json.dumps({"python": platform.python_version(), "counts": counts, "results": results}, indent=2) + "\n")
    print(f"saved {dest.relative_to(REPO)}")


if __name__ == "__main__":
    main()
