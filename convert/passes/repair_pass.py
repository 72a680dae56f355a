"""Pass: a quantised file that fails its gate gets a repaired file, judged like any other file.

Tried only where a quantised file's row fails and the float32 file passes every row (a float tail
from a failing float32 file would carry that file's error). Four repairs, in a fixed order, each
kept where it raises the worst cosine on TFLite's kernels, the next starting from it:

1. **Calibration ranges** (``convert/ranges.py``): activation grids that the float32 file's values
   on the calibration images show badly wrong are set again. Same ops, same cost.
2. **Cross-layer equalisation** and 3. **bias correction** (``convert/equalise.py``) on the
   PyTorch model, exported and converted again by the same passes.
4. **Selective float, as a float tail** (``ops/float_tail.py``): the ops whose own quantisation
   carries the most error (``validate/parity/op_errors.py``), and everything downstream of them,
   run in float, taken from the float32 file (the search: ``SelectiveFloat``).

A file that passes TFLite's kernels is judged on every row the pure file has, the board's emulator
and own runtime included; where a row fails, the next repair or larger tail is. A repair that breaks
is said in the report and the next is tried. The pure file stays as it was, with its rows; the
repaired file, written only where one passes, is ``model_<variant>_repaired.tflite`` (variant
``<variant>-repaired``), with its own rows and board verdict (docs/convert.md).
"""

from __future__ import annotations

import abc
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar, Sequence

from edgeport.convert.base import ConvertConfig, Converted, Pass, PassResult, Validated, run_pipeline
from edgeport.convert.context import RunContext
from edgeport.convert.passes.lower_for_board_pass import restamped
from edgeport.errors import PassCheckError
from edgeport.ops.tflite_graph import Graph
from edgeport.validate.parity.compare import QUANTISED, REPAIRED
from edgeport.validate.parity.result import timed
from edgeport.validate.report.sections import Repair, repair_changes

FULL_RUNS = 3  # candidates judged on every row at most: the first that passed the quick search, and larger ones
QUICK_RUNS = 16  # candidates run on the TFLite kernels at most
CALIB_IMAGES = 16  # calibration images the float32 file's ranges are measured on


def repaired_name(variant: str) -> str:
    return f"{variant}{REPAIRED}"


@dataclass(frozen=True)
class Candidate:
    """A file a repair made: the float32 file it pairs with (its float tail's donor), how its
    outputs are scaled (``convert/converters/int8_groups.py``: a file keeping the quantised
    outputs), and what made it."""

    file: Path
    float_file: Path
    plans: object = None
    reranged: int = 0
    equalised: dict | None = None  # {pairs, biases}
    tail: object = None  # ops/float_tail.Tail
    module: object = None  # the PyTorch model it was converted from, where a repair changed it

    def describe(self) -> str:
        eq = self.equalised or {}
        said = repair_changes(self.reranged, eq.get("pairs"), eq.get("biases"))
        return "the pure file" if not said else f"the file with {' and '.join(said)}"


class Job:
    """One failing quantised file's repair: its candidates judged by the pipeline's own passes after
    the conversion (``judge``: the board gate and parity), under the repaired file's name, and what
    each repair tried (``applied``, the report's)."""

    def __init__(self, variant: str, value: Validated, config: ConvertConfig, convert: Sequence[Pass], judge: Sequence[Pass],
                 tmp: Path):
        self.variant, self.name, self.value, self.config, self.tmp = variant, repaired_name(variant), value, config, tmp
        self.convert, self.judge = tuple(convert), tuple(judge)
        self.made = value.gated.tflite
        self.dest = config.work_dir / f"model_{variant}_repaired.tflite"
        self.applied: list[dict] = []
        self.best: tuple[Candidate, float] | None = None  # the file the next repair starts from, and its worst cosine

    def _rows(self, c: Candidate, config: ConvertConfig):
        made = Converted(self.made.exported, {self.name: c.file}, converter=self.made.converter, int8_plans=c.plans)
        validated, _ = run_pipeline(replace(config, context=RunContext()), self.judge, start=made)
        return validated

    def quick(self, c: Candidate) -> tuple[bool, float | None]:
        """On TFLite's kernels alone: whether it passes, its worst cosine (a run that breaks: a fail,
        said); kept as the best so far where its cosine is."""
        try:
            rows = self._rows(c, replace(self.config, work_dir=self.tmp, rows="kernels")).parity.rows[1:]
        except Exception as exc:  # noqa: BLE001 - a candidate that breaks a runtime is a failed candidate
            self.applied.append({"repair": "judging a candidate", "error": f"{type(exc).__name__}: {exc}"[:300]})
            return False, None
        passed, cosine = all(r.passed for r in rows), _worst_cosine(rows)
        if self.best is None or passed or (cosine is not None and cosine > self.best[1]):
            self.best = (c, cosine if cosine is not None else -1.0)
        return passed, cosine

    def final(self, c: Candidate) -> dict | None:
        """``c`` as the repaired file, on every row the pure file has, the board's included; None
        where a row fails (said)."""
        try:
            self.dest.write_bytes(c.file.read_bytes())
            validated = self._rows(replace(c, file=self.dest), replace(self.config, rows="files"))
        except Exception as exc:  # noqa: BLE001
            self.applied.append({"repair": "judging a candidate on every row", "error": f"{type(exc).__name__}: {exc}"[:300]})
            return None
        rows, check = validated.parity.rows[1:], validated.gated.board.checks[self.name]
        failed = [r.key for r in rows if not r.passed] + ([] if check.runnable else ["the board gate"])
        if failed:
            self.applied.append({"repair": "judging a candidate on every row", "passed": False, "failed": failed[:4],
                                 "float_ops": len(c.tail.float_ops) if c.tail is not None else 0})
            return None
        names = _names(c.float_file, c.tail.float_ops) if c.tail is not None else {}  # (its donor lives in tmp)
        return {"candidate": c, "check": check, "rows": rows, "names": names}

    def converted_again(self, module, work: Path) -> Converted:
        """``module`` in place of the prepared model, exported and converted again by the pipeline's own
        passes (no cross-check, no early parity: the repair judges its candidates itself)."""
        work.mkdir()
        config = replace(self.config, work_dir=work, cross_check=False, early_parity=False, context=RunContext())
        converted, _ = run_pipeline(config, self.convert, start=replace(self.made.prepared, module=module))
        return converted


class Strategy(abc.ABC):
    """One way to repair a quantised file: what it changes, from the best file so far."""

    name: ClassVar[str]

    @abc.abstractmethod
    def run(self, start: Candidate, job: Job) -> list[Candidate]:
        """The candidates that pass on TFLite's kernels (``Job.quick``), the fewest float ops first;
        what it tried goes into ``job.applied``."""

    def tried(self, c: Candidate, job: Job, **said) -> list[Candidate]:
        passed, cosine = job.quick(c)
        kept = job.best is not None and job.best[0] is c
        job.applied.append({"repair": self.name, **said, "passed": passed, "worst_cosine": cosine, "kept": kept})
        return [c] if passed else []


class Ranges(Strategy):
    name = "calibration ranges"

    def run(self, start: Candidate, job: Job) -> list[Candidate]:
        from edgeport.convert.ranges import float_ranges, rerange

        reranged = rerange(start.file.read_bytes(), float_ranges(start.float_file, job.made.prepared.calib[:CALIB_IMAGES], job.tmp))
        if not reranged.tensors:
            job.applied.append({"repair": self.name, "tensors": 0, "kept": False})
            return []
        (job.tmp / "ranges.tflite").write_bytes(reranged.model)
        return self.tried(replace(start, file=job.tmp / "ranges.tflite", reranged=len(reranged.tensors)), job,
                          tensors=len(reranged.tensors), examples=list(reranged.tensors[:3]))


class Equalise(Strategy):
    name, pairs = "equalisation", True

    def run(self, start: Candidate, job: Job) -> list[Candidate]:
        import torch

        from edgeport.convert.equalise import equalise

        prepared = job.made.prepared
        t0 = time.perf_counter()
        done = equalise(start.module if start.module is not None else prepared.module, torch.from_numpy(prepared.calib[:CALIB_IMAGES]),
                        per_channel=job.variant == "int8", pairs=self.pairs, biases=not self.pairs)
        said = {"pairs": done.pairs} if self.pairs else {"biases": done.biases}
        if not done.pairs and not done.biases:
            job.applied.append({"repair": self.name, **said, "kept": False})
            return []
        converted = job.converted_again(done.module, job.tmp / self.name.replace(" ", "-"))
        said["seconds"] = round(time.perf_counter() - t0, 2)
        if job.variant not in converted.files or "float32" not in converted.files:
            why = f"the converter wrote no {job.variant} file: {converted.not_written.get(job.variant, '')}"[:300]
            job.applied.append({"repair": self.name, **said, "error": why, "kept": False})
            return []
        before = start.equalised or {"pairs": 0, "biases": 0}
        c = Candidate(converted.files[job.variant], converted.files["float32"], converted.int8_plans,
                      equalised={"pairs": before["pairs"] + done.pairs, "biases": before["biases"] + done.biases}, module=done.module)
        return self.tried(c, job, **said)


class CorrectBiases(Equalise):
    """Bias correction on the PyTorch model: each convolution's bias takes back the mean error its
    quantised weights make on the calibration images (``convert/equalise.py``), converted again."""

    name, pairs = "bias correction", False


class SelectiveFloat(Strategy):
    """Selective float (``ops/float_tail.py``): the ops whose own quantisation carries the most error
    (``validate/parity/op_errors.py``), in float. The candidates nest, worst op first; the search
    doubles until one passes, then halves the gap (a few quick runs, not one per op), on the
    assumption that more float ops never hurt."""

    # whether the file keeps the quantised file's outputs (and their scaling, ``int8_groups``), or
    # takes the float32 file's
    keeps_outputs: ClassVar[bool]

    @abc.abstractmethod
    def candidates(self, start: Candidate, job: Job) -> tuple[list, object]:
        """The nested sets of the float32 file's ops to try, fewest first, each (its worst op's error,
        the ops), and how to write one (``ops -> Tail | None``)."""

    def applies(self, job: Job) -> str | None:
        """Why this repair cannot run for the job's board; None: it can."""
        return None

    def run(self, start: Candidate, job: Job) -> list[Candidate]:
        refused = self.applies(job)
        if refused:
            job.applied.append({"repair": self.name, "error": refused})
            return []
        tag = f"{len(job.applied)}"
        try:
            sets, write = self.candidates(start, job)
        except Exception as exc:  # noqa: BLE001 - a repair is an aid: its failure is said
            job.applied.append({"repair": self.name, "on": start.describe(),
                                "error": f"its ops could not be judged: {type(exc).__name__}: {exc}"[:300]})
            return []
        runs: dict[int, dict] = {}

        def attempt(n: int) -> bool:
            if n not in runs:
                made = write(sets[n][1])
                runs[n] = {"float_ops": len(sets[n][1]), "passed": False, "worst_op": sets[n][0].op,
                           "worst_tensor": sets[n][0].tensor}
                if made is not None:
                    file = job.tmp / f"{self.name.replace(' ', '-')}{tag}-{n}.tflite"
                    file.write_bytes(restamped(made.model))  # its min_runtime_version: of the ops now in it
                    c = Candidate(file, start.float_file, start.plans if self.keeps_outputs else None, start.reranged,
                                  start.equalised, made)
                    passed, cosine = job.quick(c)
                    runs[n].update(passed=passed, worst_cosine=cosine, candidate=c)
            return runs[n]["passed"]

        lo, hi, n = -1, None, 0
        while sets and len(runs) < QUICK_RUNS:
            if attempt(n):
                hi = n
                break
            if n == len(sets) - 1:
                break
            lo, n = n, min(2 * n + 1, len(sets) - 1)
        while hi is not None and hi - lo > 1 and len(runs) < QUICK_RUNS:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if attempt(mid) else (mid, hi)
        if sets:
            job.applied.append({"repair": self.name, "ops": len(_ops_of(start.float_file)), "on": start.describe(),
                                "tried": [{k: v for k, v in runs[n].items() if k != "candidate"} for n in sorted(runs)]})
        if hi is None:
            return []
        return [runs[n]["candidate"] for n in range(hi, min(hi + FULL_RUNS, len(sets))) if n == hi or attempt(n)]


class FloatIslands(SelectiveFloat):
    """The worst ops alone in float, each island QUANTIZEd back onto its own tensor's grid: the file
    stays quantised but for them. Only where the board runs a QUANTIZE from float to the file's type
    (today's TFLite; not TFLite 1.13, whose uint8 has no QUANTIZE, nor a board without float)."""

    name, keeps_outputs = "float islands", True

    def applies(self, job: Job) -> str | None:
        board = job.config.board
        if not board.runs_dtype("float32") or board.max_op_version("QUANTIZE") < (2 if job.variant == "int8" else 1):
            return f"{board.name} runs no QUANTIZE from float to {job.variant}: a float op could not hand back"
        return None

    def candidates(self, start: Candidate, job: Job) -> tuple[list, object]:
        from edgeport.ops.float_tail import float_islands, islandable

        errors, q_raw, f_raw, fed_by, float_op, _ = _judged_ops(start, job)
        q, f = Graph(q_raw), Graph(f_raw)
        half = len(f.ops) // 2  # more in float than that is no quantised file (the verdict's rule too)
        chosen, sets = [], []
        for e in errors:
            j = float_op.get(e.tensor)
            if j is None or j in chosen or e.own != e.own or e.own <= 0 or not islandable(q, f, j, fed_by):
                continue
            chosen.append(j)
            sets.append((e, tuple(chosen)))
            if len(chosen) >= half:
                break
        return sets, lambda ops: float_islands(q_raw, f_raw, ops, fed_by)


class FloatTail(SelectiveFloat):
    """The worst ops and everything downstream of them, in float: where the board cannot go back
    from float to integers (TFLite 1.13 has DEQUANTIZE, not QUANTIZE). Searched from the best file so
    far and, where another repair was kept, from the pure file too: the fewer float ops wins."""

    name, keeps_outputs = "float tail", False

    def candidates(self, start: Candidate, job: Job) -> tuple[list, object]:
        from edgeport.ops.float_tail import float_tail, tail_ops

        errors, q_raw, f_raw, fed_by, float_op, fed = _judged_ops(start, job)
        f = Graph(f_raw)
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


REPAIRS: tuple[Strategy, ...] = (Ranges(), Equalise(), CorrectBiases(), FloatIslands(), FloatTail())


class RepairPass(Pass[Validated, Validated]):
    """``convert``: the pipeline's passes that convert a changed model again (export and conversion),
    and those that judge a file (the board gate and parity): a repair runs them, not a sequence of its own."""

    name = "repair"

    def __init__(self, convert: Sequence[Pass], judge: Sequence[Pass]):
        self.convert, self.judge = tuple(convert), tuple(judge)

    def run(self, value: Validated, config: ConvertConfig) -> PassResult[Validated]:
        converted = value.gated.tflite
        rows = value.parity.rows
        failing = [v for v in converted.files if v in QUANTISED and any(not r.passed for r in rows if r.variant == v)]
        if not config.repair:
            return PassResult(value, changed=False, summary="not asked (--no-repair)" if failing else "nothing to repair")
        if not failing:
            unwritten = "".join(f"; no {v} file: {why}" for v, why in converted.not_written.items() if v in QUANTISED)
            return PassResult(value, changed=False, summary=f"nothing to repair: every quantised file written passes{unwritten}"
                              if unwritten else "nothing to repair: every quantised file passes")
        if "float32" not in converted.files or any(not r.passed for r in rows if r.variant == "float32"):
            why = "the float32 file fails or was not written: a float tail would carry its error"
            return PassResult(replace(value, repairs={v: Repair(repaired=False, why=why) for v in failing}), changed=False,
                              summary=f"{', '.join(failing)} not repaired: {why}")
        files, checks, new_rows, repairs = dict(converted.files), dict(value.gated.board.checks), [], {}
        for variant in failing:
            try:
                found = self._repair(variant, value, config)
            except Exception as exc:  # noqa: BLE001 - a repair is an aid: the pure files and their report stand
                found = {"info": {"repaired": False, "why": f"the repair broke: {type(exc).__name__}: {exc}"[:300]}}
            repairs[variant] = Repair.from_dict(found.pop("info"), f"repairs.{variant}")
            if found.get("path") is not None:
                name = repaired_name(variant)
                files[name], checks[name] = found["path"], found["check"]
                new_rows += found["rows"]
        parity = replace(value.parity, rows=(*value.parity.rows, *new_rows))
        gated = replace(value.gated, tflite=replace(converted, files=files), board=replace(value.gated.board, checks=checks))
        said = [f"{v}: {', '.join(r.changes()) or 'unchanged'}, {'passes' if r.passed else 'FAILS'}" if r.repaired
                else f"{v}: not repaired ({r.why})" for v, r in repairs.items()]
        return PassResult(replace(value, gated=gated, parity=parity, repairs=repairs), changed=bool(new_rows),
                          summary="; ".join(said))

    def _repair(self, variant: str, value: Validated, config: ConvertConfig) -> dict:
        converted, rows = value.gated.tflite, value.parity.rows
        t0 = time.perf_counter()
        pure = Candidate(converted.files[variant], converted.files["float32"], converted.int8_plans if variant != "float32" else None)
        pure_cosine = _worst_cosine([r for r in rows if r.variant == variant])
        with tempfile.TemporaryDirectory(prefix="repair-", dir=config.work_dir) as tmp:
            job = Job(variant, value, config, self.convert, self.judge, Path(tmp))
            job.quick(pure)  # the pure file on the rows candidates are first judged on: what a repair must beat
            done = None
            for repair in REPAIRS:
                starts = [job.best[0]]
                if isinstance(repair, SelectiveFloat) and job.best[0] is not pure:
                    starts.append(pure)  # a file a little closer is not always one a shorter tail repairs
                found = []
                for start in starts:
                    try:
                        found += repair.run(start, job)
                    except Exception as exc:  # noqa: BLE001 - a repair is an aid: its failure is said, the next is tried
                        job.applied.append({"repair": repair.name, "error": f"{type(exc).__name__}: {exc}"[:300]})
                for c in sorted(found, key=lambda c: len(c.tail.float_ops) if c.tail is not None else 0)[:FULL_RUNS]:
                    done = job.final(c)
                    if done is not None:
                        break
                if done is not None:
                    break
        total = len(_ops_of(pure.float_file))
        if done is None:
            job.dest.unlink(missing_ok=True)
            why = "; ".join(f"{a['repair']}: " + (a["error"] if "error" in a else "nothing to change"
                                                  if 0 in (a.get("tensors"), a.get("pairs"), a.get("biases")) else "does not pass")
                            for a in job.applied)
            return {"info": {"repaired": False, "why": why or "no repair applies", "applied": job.applied, "ops": total,
                             "seconds": round(time.perf_counter() - t0, 2)}}
        chosen, mine_rows = done["candidate"], done["rows"]
        mine, pure_row = timed(mine_rows, job.name), timed(rows, variant)
        latency = None
        if mine is not None and pure_row is not None and mine.runtime == pure_row.runtime:
            latency = {"runtime": mine.runtime, "ms_per_image": mine.ms_per_image, "pure_ms_per_image": pure_row.ms_per_image,
                       "ratio": round(mine.ms_per_image / pure_row.ms_per_image, 3)}
            latency.update(_interleaved(job.dest, converted.files[variant], converted.files.get("float32"), pure_row, value, config))
            # and on today's optimised kernels (XNNPACK), where the board's own runtime is timed above
            fast = [next((r for r in rs if r.variant == v and r.runtime == "tflite" and r.ms_per_image), None)
                    for rs, v in ((mine_rows, job.name), (rows, variant))]
            if None not in fast and mine.runtime != "tflite":
                latency["tflite_ratio"] = round(fast[0].ms_per_image / fast[1].ms_per_image, 3)
        made = chosen.tail
        info = {"repaired": True, "passed": True, "file": job.dest.name, "from": f"model_{variant}.tflite", "ops": total,
                "float_ops": len(made.float_ops) if made is not None else 0, "reranged": chosen.reranged,
                "equalised": chosen.equalised, "fed_at": list(made.fed_at)[:8] if made is not None else [],
                "float_op_names": done["names"],
                "int8_normalised": [[list(r) for r in plan] for plan in chosen.plans] if chosen.plans else None,
                "worst_cosine": _worst_cosine(mine_rows), "pure_worst_cosine": pure_cosine, "latency": latency,
                "applied": job.applied, "seconds": round(time.perf_counter() - t0, 2),
                "float_as": ("islands" if made.islands else "tail") if made is not None else None}
        return {"info": info, "path": job.dest, "check": done["check"], "rows": list(mine_rows)}

    def check(self, before: Validated, after: Validated, config: ConvertConfig) -> None:
        files_before, files_after = before.gated.tflite.files, after.gated.tflite.files
        if any(files_after.get(v) != p for v, p in files_before.items()):
            raise PassCheckError("repair changed a file it was given: the pure files stay as they were")
        for v in set(files_after) - set(files_before):
            if not v.endswith(REPAIRED) or v not in after.gated.board.checks or not any(r.variant == v for r in after.parity.rows):
                raise PassCheckError(f"the repaired file {v} has no board verdict or no rows")


def _interleaved(repaired: Path, pure: Path, float32: Path | None, pure_row, value: Validated, config: ConvertConfig) -> dict:
    """The repaired file's, the pure file's and float32's times on the runtime that times the pure
    file (``result.timed``: the board's own, else today's TFLite), against each other in one process,
    interleaved (``board_runner.time_interleaved``): what the stand-in's time condition reads. Rows timed
    apart, beside other work, part by up to twice on a busy machine. Nothing where it cannot be timed."""
    from edgeport.validate.board.reply import BoardRuntimeError
    from edgeport.validate.board.runtime import this_python, transport_for
    from edgeport.validate.parity.board_runner import time_interleaved
    from edgeport.validate.parity.runners import RuntimeRefused

    on_board = pure_row.verdict is not None and pure_row.verdict.judge == "runtime"
    transport = transport_for(config.board) if on_board and config.board is not None else this_python()
    if float32 is None or transport is None:
        return {}
    try:
        ms, pure_ms, float_ms = time_interleaved(transport, [repaired, pure, float32], value.gated.tflite.prepared.val, config.work_dir)
    except (BoardRuntimeError, RuntimeRefused):
        return {}
    return {"ms_per_image": ms, "pure_ms_per_image": pure_ms, "float32_ms_per_image": float_ms, "ratio": round(ms / pure_ms, 3),
            "interleaved": True}


def _worst_cosine(rows) -> float | None:
    values = [o["cosine"] for r in rows for o in r.outputs if isinstance(o.get("cosine"), float)]
    return min(values) if values else None


def _judged_ops(start: Candidate, job: Job):
    """Each op's own error in ``start``'s file, worst first, on the first image
    (``validate/parity/op_errors.py``), with the two files' bytes and how their tensors meet:
    ``fed_by(name)`` the quantised tensor holding the float32 file's tensor ``name`` in the same
    units (one op_errors judged), ``float_op`` name -> the float32 file's op writing it, ``fed(t)``
    whether the float32 file's tensor ``t`` has such a quantised tensor of its shape."""
    from edgeport.ops.tflite_graph import name_key as key
    from edgeport.validate.parity.op_errors import op_errors

    errors = op_errors(start.file, start.float_file, job.made.prepared.val[:1], job.tmp)
    q_raw, f_raw = start.file.read_bytes(), start.float_file.read_bytes()
    q, f = Graph(q_raw), Graph(f_raw)
    judged = {e.tensor for e in errors}  # tensors whose units are the float32 file's (op_errors judged them)
    by_name = {key(q.tensor_name(t)): t for op in q.ops for t in op.outputs if t >= 0}

    def fed_by(name: str):
        return by_name.get(name) if name in judged else None

    def fed(t: int) -> bool:
        s = fed_by(key(f.tensor_name(t)))
        return s is not None and q.shape(s) == f.shape(t)

    float_op = {key(f.tensor_name(t)): j for j, op in enumerate(f.ops) for t in op.outputs if t >= 0}
    return errors, q_raw, f_raw, fed_by, float_op, fed


def _ops_of(path: Path) -> list:
    return Graph(Path(path).read_bytes()).ops


def _names(float_file: Path, ops) -> dict:
    """How many of each op the tail runs in float: {CONV_2D: 3, ...}."""
    from collections import Counter

    g = Graph(Path(float_file).read_bytes())
    return dict(Counter(g.name(g.ops[j]) for j in ops).most_common())
