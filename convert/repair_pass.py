"""Pass: a quantised file that fails its gate gets a repaired twin, judged like any other file.

Tried only where a quantised file's row fails and the float32 file passes every row (a float tail
from a failing float32 file would carry that file's error). Two repairs, in a fixed order, each
kept only if it helps:

1. **Calibration ranges** (``convert/ranges.py``): activation grids that the float32 file's values
   on the calibration images show badly wrong are set again. Same ops, same cost.
2. **Selective float, as a float tail** (``ops/float_tail.py``): the ops whose own quantisation
   carries the most error (``validate/parity/op_errors.py``), and everything downstream of them,
   run in float, taken from the float32 file. The candidates nest: the worst op's tail, then the
   two worst ops', and so on. The search takes the first that passes on the TFLite kernels
   (doubling, then halving the gap: a few quick runs, not one per op).

The file found is then judged on every row the pure file has -- the board's emulator and its own
runtime included -- and the next larger candidate is taken if a row still fails.

The pure file stays as it was, under its own name, with its rows: the repaired file is
``model_<variant>_repaired.tflite``, variant ``<variant>-repaired``, with its own rows and its own
board verdict. What the report says of it (``Validated.repairs``): each repair tried and what it
did to the worst cosine, which ops run in float, and its latency against the pure file on the
board's runtime.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import replace
from pathlib import Path

from edgeport.convert.base import ConvertConfig, Pass, PassResult, Validated
from edgeport.errors import PassCheckError
from edgeport.validate.parity.compare import QUANTISED, REPAIRED

FULL_RUNS = 3  # candidates judged on every row at most: the first that passed the quick search, and larger ones
QUICK_RUNS = 16  # candidates run on the TFLite kernels at most
CALIB_IMAGES = 16  # calibration images the float32 file's ranges are measured on


def repaired_name(variant: str) -> str:
    return f"{variant}{REPAIRED}"


def _board_row(rows, variant: str, runtime: str | None = None):
    """The row whose time is the board's (``runtime``: that row): its own runtime where it was
    reached, else its emulator's, else TFLite's."""
    mine = [r for r in rows if r.variant == variant and r.ms_per_image and runtime in (None, r.runtime)]
    return next((r for r in mine if r.verdict is not None and r.verdict.judge == "runtime"), None) or next(
        (r for r in mine if r.runtime.startswith("board:")), None) or next(iter(mine), None)


def _worst_cosine(rows) -> float | None:
    values = [o["cosine"] for r in rows for o in r.outputs if isinstance(o.get("cosine"), float)]
    return min(values) if values else None


def _candidates(quantised: Path, float_file: Path, images, work: Path):
    """The nested tails to try, smallest first (each a set of the float32 file's ops), and how to
    write one; from each op's own error, worst first, on the first image."""
    from edgeport.ops.float_tail import float_tail, key, tail_ops
    from edgeport.ops.tflite_graph import Graph
    from edgeport.validate.parity.op_errors import op_errors

    errors = op_errors(quantised, float_file, images[:1], work)
    q_raw, f_raw = quantised.read_bytes(), float_file.read_bytes()
    q, f = Graph(q_raw), Graph(f_raw)
    judged = {e.tensor for e in errors}  # tensors whose units are the float32 file's (op_errors judged them)
    by_name = {key(q.tensor_name(t)): t for op in q.ops for t in op.outputs if t >= 0}

    def fed_by(name: str):
        return by_name.get(name) if name in judged else None

    def fed(t: int) -> bool:
        s = fed_by(key(f.tensor_name(t)))
        return s is not None and q.shape(s) == f.shape(t)

    float_op = {key(f.tensor_name(t)): j for j, op in enumerate(f.ops) for t in op.outputs if t >= 0}
    outputs = {j for j, op in enumerate(f.ops) if set(op.outputs) & set(f.sg.outputs)}
    seeds, tails = [], []
    for e in errors:
        j = float_op.get(e.tensor)
        if j is None or j in seeds or e.own != e.own or e.own <= 0:
            continue
        found = tail_ops(f, {*seeds, j, *outputs}, fed)
        if found is None:  # its tail is the whole float32 file: not a repair; the next op's may be
            continue
        seeds.append(j)
        if not tails or found[0] != tails[-1][1]:
            tails.append((e, found[0]))
    return tails, lambda ops: float_tail(q_raw, f_raw, ops, fed_by)


class RepairPass(Pass[Validated, Validated]):
    name = "repair"

    def run(self, value: Validated, config: ConvertConfig) -> PassResult[Validated]:
        from edgeport.convert.parity_pass import subject_of

        converted = value.gated.converted
        rows = value.parity.rows
        failing = [v for v in converted.files if v in QUANTISED and any(not r.passed for r in rows if r.variant == v)]
        if not config.repair:
            return PassResult(value, changed=False, summary="not asked (--no-repair)" if failing else "nothing to repair")
        if not failing:
            return PassResult(value, changed=False, summary="nothing to repair: every quantised file passes")
        if "float32" not in converted.files or any(not r.passed for r in rows if r.variant == "float32"):
            why = "the float32 file fails or was not written: a float tail would carry its error"
            return PassResult(replace(value, repairs={v: {"repaired": False, "why": why} for v in failing}), changed=False,
                              summary=f"{', '.join(failing)} not repaired: {why}")
        subject = subject_of(value.gated, config)
        files, checks, new_rows, repairs = dict(converted.files), dict(value.gated.board.checks), [], {}
        for variant in failing:
            found = self._repair(variant, converted.files[variant], converted.files["float32"], subject, config, rows,
                                 converted.prepared.calib)
            repairs[variant] = found.pop("info")
            if found.get("path") is not None:
                name = repaired_name(variant)
                files[name], checks[name] = found["path"], found["check"]
                new_rows += found["rows"]
        parity = replace(value.parity, rows=(*value.parity.rows, *new_rows))
        gated = replace(value.gated, converted=replace(converted, files=files), board=replace(value.gated.board, checks=checks))
        said = [f"{v}: {_what(r)}, {'passes' if r['passed'] else 'FAILS'}" if r["repaired"] else f"{v}: not repaired ({r['why']})"
                for v, r in repairs.items()]
        return PassResult(replace(value, gated=gated, parity=parity, repairs=repairs), changed=bool(new_rows),
                          summary="; ".join(said))

    def _repair(self, variant: str, path: Path, float_file: Path, subject, config: ConvertConfig, rows, calib) -> dict:
        from edgeport.convert.ranges import float_ranges, rerange
        from edgeport.validate.board.profiles import board_verdict
        from edgeport.validate.parity.run import run_parity

        name = repaired_name(variant)
        t0 = time.perf_counter()
        pure_cosine = _worst_cosine([r for r in rows if r.variant == variant])
        applied: list[dict] = []
        with tempfile.TemporaryDirectory(prefix="repair-", dir=config.work_dir) as tmp:
            tmp = Path(tmp)

            def quick(file: Path) -> tuple[bool, float | None]:  # on the TFLite kernels (optimised and reference), no board
                result = run_parity(replace(subject, tflite={name: file}, folded_module=None, onnx_path=None, board=None,
                                            not_converted={}, normalised={}, twins={}, twin_gated={}, board_checks={},
                                            workdir=tmp), divergence=False)
                judged = [r for r in result.rows if r.variant == name]
                return all(r.passed for r in judged), _worst_cosine(judged)

            # 1. calibration ranges: grids the float32 file's values on the calibration images show wrong
            source, candidates = path, []
            try:
                reranged = rerange(path.read_bytes(), float_ranges(float_file, calib[:CALIB_IMAGES], tmp))
            except Exception as exc:  # noqa: BLE001 - a repair is an aid: its failure is said, the next is tried
                applied.append({"repair": "calibration ranges", "error": f"{type(exc).__name__}: {exc}"[:300]})
                reranged = None
            if reranged is not None and reranged.tensors:
                file = tmp / "ranges.tflite"
                file.write_bytes(reranged.model)
                passed, cosine = quick(file)
                kept = passed or (cosine is not None and pure_cosine is not None and cosine > pure_cosine)
                applied.append({"repair": "calibration ranges", "tensors": len(reranged.tensors),
                                "examples": list(reranged.tensors[:3]), "passed": passed, "worst_cosine": cosine, "kept": kept})
                if kept:
                    source = file
                if passed:
                    candidates = [(file, None)]
            elif reranged is not None:
                applied.append({"repair": "calibration ranges", "tensors": 0, "kept": False})
            # 2. selective float: the fewest ops, from the worst by their own error, run as a float tail
            total = len(_ops_of(float_file))
            if not candidates:
                try:
                    tails, write = _candidates(source, float_file, subject.inputs, tmp)
                except Exception as exc:  # noqa: BLE001
                    tails, write = [], None
                    applied.append({"repair": "float tail", "error": f"its ops could not be judged: {type(exc).__name__}: {exc}"[:300]})
                tried: dict[int, dict] = {}

                def tail(n: int) -> bool:
                    if n not in tried:
                        made = write(tails[n][1])
                        tried[n] = {"float_ops": len(tails[n][1]), "passed": False, "worst_op": tails[n][0].op,
                                    "worst_tensor": tails[n][0].tensor}
                        if made is not None:
                            file = tmp / f"tail{n}.tflite"
                            file.write_bytes(made.model)
                            passed, cosine = quick(file)
                            tried[n].update(passed=passed, worst_cosine=cosine, file=file, tail=made)
                    return tried[n]["passed"]

                # the first candidate that passes, on the assumption that more float ops never hurt:
                # doubling until one passes, then halving the gap
                lo, hi, n = -1, None, 0
                while tails and len(tried) < QUICK_RUNS:
                    if tail(n):
                        hi = n
                        break
                    if n == len(tails) - 1:
                        break
                    lo, n = n, min(2 * n + 1, len(tails) - 1)
                while hi is not None and hi - lo > 1 and len(tried) < QUICK_RUNS:
                    mid = (lo + hi) // 2
                    lo, hi = (lo, mid) if tail(mid) else (mid, hi)
                if tails:
                    applied.append({"repair": "float tail", "ops": total, "on": "the file above" if source != path else "the pure file",
                                    "tried": [{k: v for k, v in tried[n].items() if k not in ("file", "tail")} for n in sorted(tried)]})
                if hi is not None:
                    candidates = [(tried[n]["file"], tried[n]["tail"]) for n in range(hi, min(hi + FULL_RUNS, len(tails)))
                                  if n == hi or tail(n)]
            if not candidates:
                why = "; ".join(f"{a['repair']}: " + (a["error"] if "error" in a else "no tensor's grid is wrong" if not a.get("tensors", 1)
                                                      else "does not pass") for a in applied) or "no repair applies"
                return {"info": {"repaired": False, "why": why, "applied": applied, "seconds": round(time.perf_counter() - t0, 2)}}
            # the first candidate that passes every row the pure file has: the board's emulator and its own runtime included
            dest = config.work_dir / f"model_{variant}_repaired.tflite"
            for file, made in candidates:  # noqa: B007 - the tail of the one taken, after the loop
                dest.write_bytes(file.read_bytes())
                check = board_verdict(dest, subject.board)
                result = run_parity(replace(subject, tflite={name: dest}, folded_module=None, onnx_path=None, not_converted={},
                                            normalised={}, twins={}, twin_gated={}, board_checks={name: check}))
                judged = [r for r in result.rows if r.variant == name]
                passed = check["runnable"] and all(r.passed for r in judged)
                if passed:
                    break
        mine = _board_row(judged, name)
        pure = _board_row(rows, variant, mine.runtime) if mine is not None else None
        latency = None
        if pure is not None:
            latency = {"runtime": mine.runtime, "ms_per_image": mine.ms_per_image, "pure_ms_per_image": pure.ms_per_image,
                       "ratio": round(mine.ms_per_image / pure.ms_per_image, 3)}
        info = {"repaired": True, "passed": passed, "file": dest.name, "from": f"model_{variant}.tflite", "ops": total,
                "float_ops": len(made.float_ops) if made is not None else 0,
                "reranged": next((a["tensors"] for a in applied if a["repair"] == "calibration ranges" and a.get("kept")), 0),
                "fed_at": list(made.fed_at)[:8] if made is not None else [],
                "float_op_names": _names(float_file, made.float_ops) if made is not None else {},
                "worst_cosine": _worst_cosine(judged), "pure_worst_cosine": pure_cosine, "latency": latency,
                "applied": applied, "seconds": round(time.perf_counter() - t0, 2)}
        return {"info": info, "path": dest, "check": check, "rows": judged}

    def check(self, before: Validated, after: Validated, config: ConvertConfig) -> None:
        files_before, files_after = before.gated.converted.files, after.gated.converted.files
        if any(files_after.get(v) != p for v, p in files_before.items()):
            raise PassCheckError("repair changed a file it was given: the pure files stay as they were")
        for v in set(files_after) - set(files_before):
            if not v.endswith(REPAIRED) or v not in after.gated.board.checks or not any(r.variant == v for r in after.parity.rows):
                raise PassCheckError(f"the repaired file {v} has no board verdict or no rows")


def _what(info: dict) -> str:
    """What a repaired file changed: "3 grids re-calibrated, 15 of 289 ops in float"."""
    said = [f"{info['reranged']} grids re-calibrated"] if info.get("reranged") else []
    said += [f"{info['float_ops']} of {info['ops']} ops in float"] if info.get("float_ops") else []
    return ", ".join(said) or "unchanged"


def _ops_of(path: Path) -> list:
    from edgeport.ops.tflite_graph import Graph

    return Graph(Path(path).read_bytes()).ops


def _names(float_file: Path, ops) -> dict:
    """How many of each op the tail runs in float: {CONV_2D: 3, ...}."""
    from collections import Counter

    from edgeport.ops.tflite_graph import Graph

    g = Graph(Path(float_file).read_bytes())
    return dict(Counter(g.name(g.ops[j]) for j in ops).most_common())
