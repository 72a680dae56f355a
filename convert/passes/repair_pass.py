"""Pass: a quantised file that fails its gate gets a repaired twin, judged like any other file.

Tried only where a quantised file's row fails and the float32 file passes every row (a float tail
from a failing float32 file would carry that file's error). Four repairs, in a fixed order, each
kept where it raises the worst cosine on TFLite's kernels, the next starting from it:

1. **Calibration ranges** (``convert/ranges.py``): activation grids that the float32 file's values
   on the calibration images show badly wrong are set again. Same ops, same cost.
2. **Cross-layer equalisation** and 3. **bias correction** (``convert/equalise.py``) on the
   PyTorch model, exported and converted again by the same passes.
4. **Selective float, as a float tail** (``ops/float_tail.py``): the ops whose own quantisation
   carries the most error (``validate/parity/op_errors.py``), and everything downstream of them,
   run in float, taken from the float32 file. The candidates nest: the worst op's tail, then the
   two worst ops', and so on; the search doubles until one passes on TFLite's kernels, then
   halves the gap (a few quick runs, not one per op).

A file that passes TFLite's kernels is judged on every row the pure file has -- the board's
emulator and its own runtime included; where a row fails, the next repair or larger tail is. A
repair that breaks is said in the report and the next is tried: the pure files and their report
stand. The pure file stays as it was, under its own name, with its rows; the repaired file,
written only where one passes, is ``model_<variant>_repaired.tflite``, variant
``<variant>-repaired``, with its own rows and board verdict (docs/convert.md).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from edgeport.convert.base import ConvertConfig, Pass, PassResult, Validated
from edgeport.convert.passes.lower_for_board_pass import restamped
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
    from edgeport.ops.float_tail import float_tail, tail_ops
    from edgeport.ops.tflite_graph import Graph
    from edgeport.ops.tflite_graph import name_key as key
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
        from edgeport.convert.passes.parity_pass import subject_of

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
            try:
                found = self._repair(variant, value, subject, config)
            except Exception as exc:  # noqa: BLE001 - a repair is an aid: the pure files and their report stand
                found = {"info": {"repaired": False, "why": f"the repair broke: {type(exc).__name__}: {exc}"[:300]}}
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

    def _repair(self, variant: str, value: Validated, subject, config: ConvertConfig) -> dict:
        from edgeport.convert.ranges import float_ranges, rerange
        from edgeport.validate.board.profiles import board_verdict
        from edgeport.validate.parity.run import run_parity

        converted, rows = value.gated.converted, value.parity.rows
        path, float_file, calib = converted.files[variant], converted.files["float32"], converted.prepared.calib
        name = repaired_name(variant)
        t0 = time.perf_counter()
        pure = _Candidate(path, float_file, subject.normalised.get(variant))
        pure_cosine = _worst_cosine([r for r in rows if r.variant == variant])
        applied: list[dict] = []
        dest = config.work_dir / f"model_{variant}_repaired.tflite"
        with tempfile.TemporaryDirectory(prefix="repair-", dir=config.work_dir) as tmp:
            tmp = Path(tmp)

            def judged(c: "_Candidate", board=None, check=None) -> list:
                """Its rows: on the TFLite kernels (optimised and reference) alone, or every row the pure file has."""
                result = run_parity(replace(subject, tflite={name: c.file}, folded_module=None, onnx_path=None, board=board,
                                            not_converted={}, normalised={name: c.plans} if c.plans else {}, twins={},
                                            twin_gated={}, board_checks={name: check} if check is not None else {},
                                            workdir=tmp if board is None else subject.workdir), divergence=False)
                return [r for r in result.rows if r.variant == name]

            def quick(c: "_Candidate") -> tuple[bool, float | None]:
                """On TFLite's kernels: whether it passes, its worst cosine (a run that breaks: a fail, said)."""
                try:
                    found = judged(c)
                except Exception as exc:  # noqa: BLE001 - a candidate that breaks a runtime is a failed candidate
                    applied.append({"repair": "judging a candidate", "error": f"{type(exc).__name__}: {exc}"[:300]})
                    return False, None
                return all(r.passed for r in found), _worst_cosine(found)

            def final(c: "_Candidate") -> dict | None:
                """``c`` as the repaired file, on every row the pure file has; None where a row fails (said)."""
                try:
                    dest.write_bytes(c.file.read_bytes())
                    check = board_verdict(dest, subject.board)
                    mine = judged(replace(c, file=dest), subject.board, check)
                except Exception as exc:  # noqa: BLE001
                    applied.append({"repair": "judging a candidate on every row", "error": f"{type(exc).__name__}: {exc}"[:300]})
                    return None
                failed = [r.key for r in mine if not r.passed] + ([] if check["runnable"] else ["the board gate"])
                if failed:
                    applied.append({"repair": "judging a candidate on every row", "passed": False, "failed": failed[:4],
                                    "float_ops": len(c.tail.float_ops) if c.tail is not None else 0})
                    return None
                names = _names(c.float_file, c.tail.float_ops) if c.tail is not None else {}  # (its donor lives in tmp)
                return {"candidate": c, "check": check, "rows": mine, "names": names}

            def tried(repair: str, c: "_Candidate", **said) -> dict | None:
                """Judge ``c`` on TFLite's kernels, then (where it passes) on every row; say what it did; kept
                as the next repair's start where it helps."""
                passed, cosine = quick(c)
                kept = passed or (cosine is not None and cosine > best[1])
                applied.append({"repair": repair, **said, "passed": passed, "worst_cosine": cosine, "kept": kept})
                if kept:
                    best[0], best[1] = c, cosine
                return final(c) if passed else None

            # the pure file on the same rows the candidates are first judged on: what a repair must beat
            base = quick(pure)[1]
            best = [pure, base if base is not None else -1.0]  # the file the next repair starts from
            done = None
            # 1. calibration ranges: grids the float32 file's values on the calibration images show wrong
            try:
                reranged = rerange(path.read_bytes(), float_ranges(float_file, calib[:CALIB_IMAGES], tmp))
            except Exception as exc:  # noqa: BLE001 - a repair is an aid: its failure is said, the next is tried
                applied.append({"repair": "calibration ranges", "error": f"{type(exc).__name__}: {exc}"[:300]})
                reranged = None
            if reranged is not None and not reranged.tensors:
                applied.append({"repair": "calibration ranges", "tensors": 0, "kept": False})
            elif reranged is not None:
                (tmp / "ranges.tflite").write_bytes(reranged.model)
                done = tried("calibration ranges", replace(pure, file=tmp / "ranges.tflite", reranged=len(reranged.tensors)),
                             tensors=len(reranged.tensors), examples=list(reranged.tensors[:3]))
            # 2. cross-layer equalisation, then 3. bias correction, on the PyTorch model (the best so far), converted again
            for repair, pairs in (("equalisation", True), ("bias correction", False)):
                if done is not None:
                    break
                try:
                    c, said = _equalised(variant, converted, best[0], config, tmp / repair.replace(" ", "-"), pairs=pairs)
                except Exception as exc:  # noqa: BLE001
                    c, said = None, {"error": f"{type(exc).__name__}: {exc}"[:300]}
                if c is None:
                    applied.append({"repair": repair, **said, "kept": False})
                else:
                    done = tried(repair, c, **said)
            # 4. selective float: the fewest ops, from the worst by their own error, run as a float tail --
            # searched from the best file so far and, where a repair above was kept, from the pure file too
            # (a file a little closer is not always one a shorter tail repairs): the fewer float ops wins
            total = len(_ops_of(pure.float_file))
            if done is None:
                found = [self._tails(source, subject, tmp, quick, applied) for source in [best[0]] + ([pure] if best[0] is not pure else [])]
                for c in sorted((c for f in found for c in f), key=lambda c: len(c.tail.float_ops))[:FULL_RUNS]:
                    done = final(c)
                    if done is not None:
                        break
        if done is None:
            dest.unlink(missing_ok=True)
            why = "; ".join(f"{a['repair']}: " + (a["error"] if "error" in a else "nothing to change"
                                                  if 0 in (a.get("tensors"), a.get("pairs"), a.get("biases")) else "does not pass")
                            for a in applied)
            return {"info": {"repaired": False, "why": why or "no repair applies", "applied": applied, "ops": total,
                             "seconds": round(time.perf_counter() - t0, 2)}}
        chosen, mine_rows = done["candidate"], done["rows"]
        mine = _board_row(mine_rows, name)
        pure_row = _board_row(rows, variant, mine.runtime) if mine is not None else None
        latency = None
        if pure_row is not None:
            latency = {"runtime": mine.runtime, "ms_per_image": mine.ms_per_image, "pure_ms_per_image": pure_row.ms_per_image,
                       "ratio": round(mine.ms_per_image / pure_row.ms_per_image, 3)}
            # and on today's optimised kernels (XNNPACK), where a board emulated on the reference kernels runs those
            fast, fast_pure = _board_row(mine_rows, name, "tflite"), _board_row(rows, variant, "tflite")
            if fast is not None and fast_pure is not None and mine.runtime != "tflite":
                latency["tflite_ratio"] = round(fast.ms_per_image / fast_pure.ms_per_image, 3)
        made = chosen.tail
        info = {"repaired": True, "passed": True, "file": dest.name, "from": f"model_{variant}.tflite", "ops": total,
                "float_ops": len(made.float_ops) if made is not None else 0, "reranged": chosen.reranged,
                "equalised": chosen.equalised, "fed_at": list(made.fed_at)[:8] if made is not None else [],
                "float_op_names": done["names"],
                "int8_normalised": [[list(r) for r in plan] for plan in chosen.plans] if chosen.plans else None,
                "worst_cosine": _worst_cosine(mine_rows), "pure_worst_cosine": pure_cosine, "latency": latency,
                "applied": applied, "seconds": round(time.perf_counter() - t0, 2)}
        return {"info": info, "path": dest, "check": done["check"], "rows": mine_rows}

    @staticmethod
    def _tails(source: "_Candidate", subject, tmp: Path, quick, applied: list) -> list:
        """The float tails of ``source`` that pass on the TFLite kernels, fewest ops first (up to
        ``FULL_RUNS``); what was tried goes into ``applied``."""
        tag = f"{len(applied)}"
        try:
            tails, write = _candidates(source.file, source.float_file, subject.inputs, tmp)
        except Exception as exc:  # noqa: BLE001 - a repair is an aid: its failure is said
            applied.append({"repair": "float tail", "on": source.describe(),
                            "error": f"its ops could not be judged: {type(exc).__name__}: {exc}"[:300]})
            return []
        runs: dict[int, dict] = {}

        def tail(n: int) -> bool:
            if n not in runs:
                made = write(tails[n][1])
                runs[n] = {"float_ops": len(tails[n][1]), "passed": False, "worst_op": tails[n][0].op,
                           "worst_tensor": tails[n][0].tensor}
                if made is not None:
                    file = tmp / f"tail{tag}-{n}.tflite"
                    file.write_bytes(restamped(made.model))  # its min_runtime_version: of the ops now in it
                    c = _Candidate(file, source.float_file, None, source.reranged, source.equalised, made)
                    passed, cosine = quick(c)
                    runs[n].update(passed=passed, worst_cosine=cosine, candidate=c)
            return runs[n]["passed"]

        # the first candidate that passes, on the assumption that more float ops never hurt:
        # doubling until one passes, then halving the gap
        lo, hi, n = -1, None, 0
        while tails and len(runs) < QUICK_RUNS:
            if tail(n):
                hi = n
                break
            if n == len(tails) - 1:
                break
            lo, n = n, min(2 * n + 1, len(tails) - 1)
        while hi is not None and hi - lo > 1 and len(runs) < QUICK_RUNS:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if tail(mid) else (mid, hi)
        if tails:
            applied.append({"repair": "float tail", "ops": len(_ops_of(source.float_file)), "on": source.describe(),
                            "tried": [{k: v for k, v in runs[n].items() if k != "candidate"} for n in sorted(runs)]})
        if hi is None:
            return []
        return [runs[n]["candidate"] for n in range(hi, min(hi + FULL_RUNS, len(tails))) if n == hi or tail(n)]

    def check(self, before: Validated, after: Validated, config: ConvertConfig) -> None:
        files_before, files_after = before.gated.converted.files, after.gated.converted.files
        if any(files_after.get(v) != p for v, p in files_before.items()):
            raise PassCheckError("repair changed a file it was given: the pure files stay as they were")
        for v in set(files_after) - set(files_before):
            if not v.endswith(REPAIRED) or v not in after.gated.board.checks or not any(r.variant == v for r in after.parity.rows):
                raise PassCheckError(f"the repaired file {v} has no board verdict or no rows")


@dataclass(frozen=True)
class _Candidate:
    """A file a repair made: the float32 file it pairs with (its float tail's donor), how its
    outputs are scaled (``convert/converters/int8_groups.py``: a file keeping the quantised outputs), and what
    made it."""

    file: Path
    float_file: Path
    plans: object = None
    reranged: int = 0
    equalised: dict | None = None  # {pairs, biases}
    tail: object = None  # ops/float_tail.Tail
    module: object = None  # the PyTorch model it was converted from, where a repair changed it

    def describe(self) -> str:
        said = ([f"{self.reranged} grids re-calibrated"] if self.reranged else []) + (
            [f"{self.equalised['pairs']} convolution pairs equalised"] if (self.equalised or {}).get("pairs") else []) + (
            [f"{self.equalised['biases']} biases corrected"] if (self.equalised or {}).get("biases") else [])
        return "the pure file" if not said else f"the file with {' and '.join(said)}"


def _equalised(variant: str, converted, source: _Candidate, config: ConvertConfig, tmp: Path, *,
               pairs: bool) -> tuple[_Candidate | None, dict]:
    """The model ``source`` was converted from (the prepared model, or one a repair changed),
    equalised (``pairs``) or its biases corrected (``convert/equalise.py``), exported and converted
    again by the same passes: its quantised file, with the float32 file of the same model."""
    import torch

    from edgeport.convert.context import RunContext
    from edgeport.convert.equalise import equalise
    from edgeport.convert.passes.export_onnx_pass import ExportOnnxPass
    from edgeport.convert.passes.int8_fixes_pass import Int8FixesPass
    from edgeport.convert.passes.lower_for_board_pass import LowerForBoardPass
    from edgeport.convert.passes.to_tflite_pass import ToTFLitePass
    from edgeport.convert.passes.uint8_pass import Uint8Pass

    prepared = converted.prepared
    t0 = time.perf_counter()
    done = equalise(source.module if source.module is not None else prepared.module,
                    torch.from_numpy(prepared.calib[:CALIB_IMAGES]), per_channel=variant == "int8", pairs=pairs, biases=not pairs)
    said = {"pairs": done.pairs} if pairs else {"biases": done.biases}
    if not done.pairs and not done.biases:
        return None, said
    # parity's runs: the repair judges its own; what a pass begins ends with these passes
    cfg = replace(config, work_dir=tmp, cross_check=False, early_parity=False, context=RunContext())
    cfg.work_dir.mkdir()
    value = replace(prepared, module=done.module)
    with cfg.context:
        for p in (ExportOnnxPass(), ToTFLitePass(), Int8FixesPass(), Uint8Pass(), LowerForBoardPass()):
            result = p.run(value, cfg)
            p.check(value, result.value, cfg)
            value = result.value
    said["seconds"] = round(time.perf_counter() - t0, 2)
    if variant not in value.files or "float32" not in value.files:
        return None, {**said, "error": f"the converter wrote no {variant} file: {value.not_written.get(variant, '')}"[:300]}
    before = source.equalised or {"pairs": 0, "biases": 0}
    return _Candidate(value.files[variant], value.files["float32"], value.int8_plans,
                      equalised={"pairs": before["pairs"] + done.pairs, "biases": before["biases"] + done.biases},
                      module=done.module), said


def _what(info: dict) -> str:
    """What a repaired file changed: "3 grids re-calibrated, 15 of 289 ops in float"."""
    said = [f"{info['reranged']} grids re-calibrated"] if info.get("reranged") else []
    said += [f"{info['equalised']['pairs']} convolution pairs equalised"] if (info.get("equalised") or {}).get("pairs") else []
    said += [f"{info['equalised']['biases']} biases corrected"] if (info.get("equalised") or {}).get("biases") else []
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
