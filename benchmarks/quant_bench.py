"""Quantised files that pass, model by board, before and after edgeport's repair (#33).

For each zoo model -- an Ultralytics head as training leaves it, the others as built, random
weights with non-trivial BatchNorm (no trained weights or photographs exist offline: the images
are edgeport's synthetic scenes) -- runs ``edgeport convert`` for the default board (int8, per
channel) and for tflite-1.13 (uint8, per tensor; its real TFLite 1.13.1 where installed) and
reads the report: whether float32 passes, whether the quantised file was written and passes on
every row, its worst output cosine, its latency against float32 on the board's runtime (the board
row's ms per image), and the op whose own quantisation carries the most error
(``validate/parity/op_errors.py``); then, where the pure file fails, what the repair pass made of
it (``convert/passes/repair_pass.py``: ``model_<variant>_repaired.tflite``): whether it passes every row,
its worst cosine, what it changed, and its time against the pure file on the board's runtime.
Prints a Markdown table and the counts the issue asks for -- models whose float32 passes and whose
quantised file does not, before the repair (the pure file) and after (pure or repaired) -- and the
median latency cost of the repairs. Saves JSON in benchmarks/results/quant_bench.json. mAP
against labels needs a trained model: the zoo's weights are random, so the trained detectors'
mAP on the real 1.13.1 is ``benchmarks/board_bench.py``'s.

    .venv/bin/python benchmarks/quant_bench.py [--models yolov8n,resnet18] [--boards default,tflite-1.13]
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
ZOO = REPO / "tests" / "zoo"
sys.path.insert(0, str(ZOO))
BOARDS = ("default", "tflite-1.13")


# models trained by someone else, with real weights: name -> (--arch, --imgsz); `make setup-bench`
TRAINED = {"mtcnn_pnet": ("mtcnn_models:PNet", 96)}
# edgeport's own trained detectors, as shipped (their checkpoints name their architecture): name -> (file, --imgsz)
SHIPPED = {"pdet_n_person (shipped)": ("models/weights/pdet_n_person.pt", 160),
           "pdet_n_leaky_spp_person (LeakyReLU and SPP)": ("models/weights/pdet_n_leaky_spp_person.pt", 160)}


def _trained_checkpoint(name: str, folder: Path) -> Path:
    import torch

    sys.path.insert(0, str(REPO / "benchmarks"))
    import mtcnn_models

    path = folder / f"{name}.pt"
    torch.save({"model": getattr(mtcnn_models, TRAINED[name][0].split(":")[1])().state_dict()}, path)
    return path


def measure(name: str, board: str, work: Path) -> dict:
    import test_zoo
    import zoo_models

    folder = work / f"{name.split()[0]}-{board}"
    folder.mkdir()
    if name in SHIPPED:
        ckpt, size = REPO / SHIPPED[name][0], SHIPPED[name][1]
        extra, cwd, arch = [], REPO, None
    elif name in TRAINED:
        (arch, size), extra, cwd = TRAINED[name], [], REPO / "benchmarks"
        ckpt = _trained_checkpoint(name, folder)
    else:
        framework, size, extra = zoo_models.ZOO[name]
        arch, cwd = f"zoo_models:{name}", ZOO
        ckpt = test_zoo._checkpoint(name, folder, trained_head=framework == "ultralytics")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "edgeport.cli", "convert", str(ckpt), *(["--arch", arch] if arch else []),
                           "--imgsz", str(size), "--board", board, "--out", str(folder / "out"), *extra],
                          cwd=cwd, capture_output=True, text=True)
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
    repair = (json.loads(report.read_text()).get("repairs") or {}).get(variant)
    if repair is not None:
        repaired = [r for r in rows if r["variant"] == f"{variant}-repaired"]
        out["repair"] = {k: repair.get(k) for k in ("repaired", "passed", "why", "reranged", "float_ops", "ops", "latency", "worst_cosine")}
        out["repair"]["rows_pass"] = bool(repaired) and all(r["passed"] for r in repaired)
    out["passes_after"] = out["passes"] or bool(out.get("repair", {}).get("rows_pass"))
    errors = next((r["op_errors"] for r in mine if r.get("op_errors")), None)
    if errors and errors.get("worst"):
        worst = errors["worst"][0]
        out["worst_op"] = {"op": worst["op"], "tensor": worst["tensor"][:80], "own": worst["own"], "reached": worst["reached"]}
    return out


def _f(x) -> str:
    return f"{x:.4f}" if isinstance(x, float) else "-"


def table(results: list[dict]) -> str:
    lines = ["| model | board | float32 | quantised | worst cosine | latency / float32 | op with most own error | repaired | "
             "its cosine | its time / pure |", "|---|---|---|---|---|---|---|---|---|---|"]
    for m in results:
        if "error" in m:
            lines.append(f"| {m['model']} | {m['board']} | - | - | - | - | (no report: {m['error'][:80]}) | - | - | - |")
            continue
        q = ("passes" if m["passes"] else "FAILS") if m["written"] else f"not written ({m.get('why_not', '')[:60]})"
        cos = f"{m['worst_cosine']:.4f}" if m["worst_cosine"] is not None else "-"
        lat = f"{m['latency_vs_float32']:.2f} ({m['latency_on']})" if "latency_vs_float32" in m else "-"
        op = (f"{m['worst_op']['op']} {m['worst_op']['own']:.1%} own ({m['worst_op']['reached']:.1%} reached)"
              if "worst_op" in m else "-")
        r = m.get("repair") or {}
        what = ", ".join(([f"{r['reranged']} grids"] if r.get("reranged") else []) +
                         ([f"{r['float_ops']}/{r['ops']} ops float"] if r.get("float_ops") else []))
        fixed = ("-" if not r else f"not repaired ({(r.get('why') or '')[:60]})" if not r.get("repaired")
                 else f"{'passes' if r['rows_pass'] else 'FAILS'} ({what})")
        took = r.get("latency") or {}
        cost = (f"{took['ratio']:.2f} ({took['runtime']})" + (f"; XNNPACK {took['tflite_ratio']:.2f}" if "tflite_ratio" in took else "")
                if took else "-")
        lines.append(f"| {m['model']} ({m['imgsz']} px) | {m['board']} {m['variant']} | {'passes' if m['float32_passes'] else 'FAILS'} "
                     f"| {q} | {cos} | {lat} | {op} | {fixed} | {_f(r.get('worst_cosine'))} | {cost} |")
    return "\n".join(lines)


def main() -> None:
    import zoo_models

    ap = argparse.ArgumentParser()
    import importlib.util

    trained = [n for n in TRAINED if importlib.util.find_spec("facenet_pytorch") is not None]
    if not trained:
        print("facenet-pytorch is not installed (`make setup-bench`): MTCNN's trained P-Net is left out", file=sys.stderr)
    ap.add_argument("--models", default=",".join([*zoo_models.ZOO, *trained, *SHIPPED]))
    ap.add_argument("--boards", default=",".join(BOARDS))
    ap.add_argument("--merge", action="store_true", help="measure --models again and keep the saved JSON's other cells")
    args = ap.parse_args()
    dest = REPO / "benchmarks" / "results" / "quant_bench.json"
    results = []
    with tempfile.TemporaryDirectory(prefix="edgeport-quant-") as tmp:
        for name in args.models.split(","):
            for board in args.boards.split(","):
                results.append(measure(name, board, Path(tmp)))
                print(json.dumps(results[-1]), flush=True)
    if args.merge and dest.is_file():
        again = {(m["model"], m["board"]) for m in results}
        results = [m for m in json.loads(dest.read_text())["results"] if (m["model"], m["board"]) not in again] + results
    print(table(results))
    counts = {}
    for board in BOARDS:
        float_ok = [m for m in results if m["board"] == board and m.get("float32_passes")]
        counts[board] = {"float32_passes": len(float_ok), "no_passing_quantised_file": sum(not m["passes"] for m in float_ok),
                         "no_passing_file_after_repair": sum(not m.get("passes_after") for m in float_ok)}
        print(f"{board}: {counts[board]['no_passing_quantised_file']} of {len(float_ok)} models whose float32 passes have no "
              f"passing quantised file before the repair, {counts[board]['no_passing_file_after_repair']} after")
    costs = [m["repair"]["latency"]["ratio"] for m in results if (m.get("repair") or {}).get("rows_pass") and m["repair"].get("latency")]
    counts["repair_latency_ratio_median"] = statistics.median(costs) if costs else None
    print(f"repairs that pass: {len(costs)}, median time against the pure file on the board's runtime: "
          f"{counts['repair_latency_ratio_median']}")
    dest.write_text(json.dumps({"python": platform.python_version(), "counts": counts, "results": results}, indent=2) + "\n")
    print(f"saved {dest.relative_to(REPO)}")


if __name__ == "__main__":
    main()
