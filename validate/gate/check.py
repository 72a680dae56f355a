"""``edgeport check``: compare a parity report with a baseline; the CI regression gate.

It fails closed: whatever it cannot prove no worse than the baseline is a failure, and it reads
every verdict a report carries, because a check the gate skips is a check a report can fail
while the gate says it passed.

- Both files are read strictly, by the types that wrote them (``load_report``: ``jsonfile.read_json``,
  then ``Report.from_dict``): JSON with no key twice in one object (``jsonfile`` says why); one row
  per (variant, runtime), one entry per output name in a row, every metric a number in its range
  (errors >= 0, cosine in [-1, 1], recall and mAP in [0, 1]; NaN and infinity are allowed and are
  regressions). A duplicate, a metric out of range, a number too large for a float, a missing
  field: bad input (exit 2). Unknown fields are allowed (new ones come within a schema version).
- The two must describe the same model (architecture, weights hash, input, outputs), else
  bad input: comparing two models' reports proves nothing.
- A row's own checks, each read: its outputs (each against the stricter of its own tolerance and
  the report's for its variant, whatever the output or the row says), its ``reasons``, ``repeat``,
  ``verdict`` and ``steps`` (``ResultRow`` says what each holds). A row passes only when it says so
  and every one of them passes; a row that says it passed while one failed is a regression
  whatever the baseline says, named with the check (a report never passes on a ``passed`` it does
  not earn). An entry that contradicts its own numbers (more steps than it allows, yet passed; a
  repeat that differs, yet passed) is bad input.
- A regression: a baseline row missing, or no longer passing; a failing row the baseline did
  not have failing; a baseline metric or section (detections, mAP) missing; an output's
  cosine falling by more than ``cosine``; its max |error| growing by more than
  ``max_abs_factor`` times (errors below ``max_abs_floor`` x max|ref| never count); boxes found
  (recall) or box precision against PyTorch, or mAP, falling by more than ``recall`` / ``map``;
  a file the board could run that it no longer can (the board's checks, or a row's verdict); a
  baseline step check gone, or its steps grown past one (a diagnostic may not worsen, gated or
  not: one step is a rounding apart, more is a different computation); a repeat check gone; a
  row judged on fewer images than the baseline's (a diagnostic's sample, ``ResultRow.images``);
  fewer passing rows; a report that claims to pass while something in it fails; a tolerance of
  the report's laxer than the baseline's; validate --data's whole-set mAP (each row's) falling by
  more than ``map``, or measured on other images. Timings are never compared.
- A repaired file stands in for its failing quantised file only where it proves it
  (``Report.stand_in_refusal``: a row on each of the file's runtimes, with the same outputs,
  images and sections, each earned); a report naming a repaired file that does not is malformed.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from edgeport.errors import BadInputError
from edgeport.jsonfile import DuplicateKey, Refused, read_json
from edgeport.text import clip, for_terminal
from edgeport.userfiles import read_bounded
from edgeport.validate.parity.result import FINITE_METRICS, OUTPUT_METRICS, ResultRow, sections, steps_label, stricter
from edgeport.validate.report.render import render_json
from edgeport.validate.report.schema import SCHEMA, Report

MAX_REPORT_BYTES = 64 * 1024 * 1024  # a report is kilobytes; anything near this is not one


@dataclass(frozen=True)
class CheckTolerance:
    cosine: float = 1e-4
    max_abs_factor: float = 2.0
    max_abs_floor: float = 1e-6
    recall: float = 0.02
    map: float = 0.01
    box_growth: float = 0.25  # a box error may grow by this share of the baseline's ...
    box_px: float = 0.25  # ... or by this many pixels, whichever is more

    @classmethod
    def parse(cls, items: list[str]) -> "CheckTolerance":
        valid = {f.name for f in dataclasses.fields(cls)}
        values = {}
        for item in items:
            key, sep, value = item.partition("=")
            if not sep or key not in valid:
                raise BadInputError(f"--tolerance {item!r}: expected KEY=VALUE with KEY one of {', '.join(sorted(valid))}")
            try:
                values[key] = float(value)
            except ValueError as exc:
                raise BadInputError(f"--tolerance {item!r}: {value!r} is not a number") from exc
            if not math.isfinite(values[key]) or values[key] < 0:
                raise BadInputError(f"--tolerance {item!r}: must be a finite number >= 0")
        return cls(**values)


@dataclass(frozen=True)
class Regression:
    row: str
    metric: str
    baseline: object
    now: object

    def __str__(self) -> str:
        return f"{self.row}: {self.metric} {_fmt(self.baseline)} -> {_fmt(self.now)}"


@dataclass(frozen=True)
class Contradiction:
    """A row that says it passed while one of its own checks failed: never a pass, whatever the
    baseline says (the baseline may carry the same contradiction)."""

    row: str
    failed: str  # which check failed, and its values, in words

    @property
    def metric(self) -> str:
        return "passed"

    def __str__(self) -> str:
        return f"{self.row}: says passed, but {self.failed}"


def _fmt(v) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


# steps a diagnostic may move by without having got worse: one is a rounding apart
STEPS_NOISE = 1


def _metrics(o: dict) -> dict:
    return {m: o[m] for m in OUTPUT_METRICS if m in o}


def _board_runnable(report: Report) -> dict:
    return {v: c.runnable for v, c in report.board.checks.items()} if report.board else {}


def load_report(path: Path, what: str) -> Report:
    """A report file read strictly (the module's docstring); anything unreadable is bad input (exit 2), one line."""
    label = f"{what} {str(path)!r}"
    try:
        data = read_json(path, MAX_REPORT_BYTES)
    except FileNotFoundError as exc:
        raise BadInputError(f"{label} does not exist") from exc
    except IsADirectoryError as exc:
        raise BadInputError(f"{label} is a folder; pass its report.json") from exc
    except Refused as exc:
        edited = "; edgeport never writes that, so the file was edited: restore it, or write it again with edgeport validate" \
            if isinstance(exc, DuplicateKey) else "; pass a report.json edgeport wrote"
        raise BadInputError(f"{label} {for_terminal(str(exc))}{edited}") from None
    return Report.from_dict(data, label)


def write_baseline(report: Path, baseline: Path) -> Path:
    """``--update-baseline``: write the (checked) report over the baseline, atomically (``folders.writing``).
    It writes where nothing is, or over an edgeport report -- never over another file, a checkpoint or
    notes a link leads to. A symlinked baseline is written through: its target is replaced, the link
    kept. Returns the file written."""
    from edgeport.folders import writing

    data = read_bounded(report, MAX_REPORT_BYTES)  # read strictly already (``load_report``): the same bound
    target = Path(os.path.realpath(baseline))
    if target.is_dir():
        raise BadInputError(f"--baseline {str(baseline)!r} is a folder; pass a .json path")
    if os.path.lexists(target):
        _only_a_report(target, baseline)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with writing(target) as f:
            f.write(data)
    except OSError as exc:
        raise BadInputError(f"--update-baseline: cannot write {str(baseline)!r} ({exc.strerror or exc}); "
                            f"pass a writable --baseline path") from exc
    return target


def _only_a_report(target: Path, baseline: Path) -> None:
    """Refuse to write over ``target`` unless it is an edgeport report (of any schema version: an
    older baseline is what --update-baseline replaces)."""
    try:
        data = read_json(target, MAX_REPORT_BYTES)
        schema = data.get("schema") if isinstance(data, dict) else None
        why = None if isinstance(schema, str) and schema.startswith(SCHEMA.rsplit("/", 1)[0] + "/") else "it is JSON of another kind"
    except Refused as exc:
        why = f"it {exc}"
    except OSError as exc:
        why = f"it cannot be read ({exc.strerror or exc})"
    if why:
        raise BadInputError(f"--update-baseline: {clip(str(baseline), 80)!r} is not an edgeport report ({for_terminal(clip(why, 80))}); "
                            f"edgeport writes only over a report: pass a report's path, or a new one")


# -- comparing ------------------------------------------------------------------------------------


def _non_finite(report: Report, label: str) -> list[Regression]:
    """Every NaN or Inf metric of a row that says it passed, as a regression naming the row. A row
    that says it failed has failed already (its NaN is why, and compared with the baseline it is a
    failing row like any other); a mAP of NaN is a dataset with no labelled boxes, not a broken run."""
    out = []
    for row in report.results:
        if not row.passed:
            continue
        for o in row.outputs:
            for metric, value in _metrics(o).items():
                if metric in FINITE_METRICS and not math.isfinite(value):
                    out.append(Regression(row.key, f"{o['name']} {metric} in the {label}", "finite", value))
                elif metric == "snr_db" and math.isnan(value):
                    out.append(Regression(row.key, f"{o['name']} snr_db in the {label}", "a number", value))
        for section, values in sections(row).items():
            for field, value in values.items():
                if not math.isfinite(value) and not (section == "map" and math.isnan(value)):
                    out.append(Regression(row.key, f"{section} {field} in the {label}", "finite", value))
    return out


def _precision(section: dict) -> float | None:
    """Boxes a runtime found that PyTorch also found, of all it found."""
    if "precision" in section:
        return section["precision"]
    if "matched" in section and "extra" in section:
        found = section["matched"] + section["extra"]
        return section["matched"] / found if found else 1.0
    return None


def _share(section: dict, field: str) -> float:
    """``field`` (a count) as a share of the stable boxes: 0 when there are none and none counted."""
    stable = section["stable_boxes"]
    if stable > 0:
        return section[field] / stable
    return 0.0 if section[field] == 0 else math.inf


def _compare_checks(key: str, now: ResultRow, base: ResultRow) -> list[Regression]:
    """The row's checks besides its outputs, against the baseline's: none may go missing, a file
    that ran must still run, and steps may not grow past a rounding (gated or only reported)."""
    out = []
    steps_now = {c["against"]: c for c in now.steps}
    for b in base.steps:
        n = steps_now.get(b["against"])
        if n is None or (n["max_steps"] is None and b["max_steps"] is not None):
            out.append(Regression(key, steps_label(b), "present" if b["max_steps"] is None else b["max_steps"], "missing"))
        elif b["max_steps"] is not None and n["max_steps"] > b["max_steps"] and n["max_steps"] > STEPS_NOISE:
            out.append(Regression(key, steps_label(b), b["max_steps"], n["max_steps"]))
    if base.verdict is not None and base.verdict.runnable:
        if now.verdict is None:
            out.append(Regression(key, "verdict", "runnable", "missing"))
        elif not now.verdict.runnable:
            out.append(Regression(key, f"runnable (the {now.verdict.judge}'s verdict)", True, False))
    if base.repeat is not None and now.repeat is None:
        out.append(Regression(key, "repeat (each image invoked twice)", "present", "missing"))
    if now.images is not None and (base.images is None or now.images < base.images):  # judged on fewer images: it proves less
        out.append(Regression(key, "images judged", "all" if base.images is None else base.images, now.images))
    return out


def _compare_row(key: str, now: ResultRow, base: ResultRow, base_earned: bool, tol: CheckTolerance) -> list[Regression]:
    out = []
    if base_earned and not now.passed:  # one that says it passed but fails is a Contradiction
        out.append(Regression(key, "passed", True, False))
    out += _compare_checks(key, now, base)
    outputs_now = {o["name"]: o for o in now.outputs}
    for bo in base.outputs:
        name, no = bo["name"], outputs_now.get(bo["name"])
        if no is None:
            out.append(Regression(key, f"output {name}", "present", "missing"))
            continue
        for metric, value in _metrics(bo).items():
            if metric not in no:
                out.append(Regression(key, f"{name} {metric}", value, "missing"))
        if not no["cosine"] >= bo["cosine"] - tol.cosine and math.isfinite(bo["cosine"]):
            out.append(Regression(key, f"{name} cosine", bo["cosine"], no["cosine"]))
        b_rel, n_rel = bo["max_abs_rel"], no["max_abs_rel"]
        if n_rel > tol.max_abs_floor and n_rel > tol.max_abs_factor * max(b_rel, tol.max_abs_floor):
            out.append(Regression(key, f"{name} max_abs/max|ref|", b_rel, n_rel))
    sections_now = sections(now)
    for section, b in sections(base).items():
        n = sections_now.get(section)
        if n is None:
            out.append(Regression(key, section, "present", "missing"))
            continue
        if section == "detections" and "box_centre_px" in b:
            # where the boxes lie: further than both ``box_growth`` and ``box_px`` allow is a regression
            moved = n.get("box_centre_px")
            if moved is None or not moved <= max(b["box_centre_px"] * (1 + tol.box_growth), b["box_centre_px"] + tol.box_px):
                out.append(Regression(key, "box centres' mean distance from PyTorch's (px)", b["box_centre_px"],
                                      "missing" if moved is None else moved))
        if section == "detections" and "stable_boxes" in b:
            # judged above the noise floor: what NMS alone moves is no regression
            judged = {"stable_boxes", "missed_stable", "extra_beyond"}
            if not (judged <= n.keys() and judged <= b.keys()):
                out.append(Regression(key, "boxes above the noise floor (stable_boxes, missed_stable, extra_beyond)",
                                      "present", "missing"))
                continue
            for field, what in (("missed_stable", "stable boxes missed"), ("extra_beyond", "boxes beyond the noise floor")):
                b_share, n_share = _share(b, field), _share(n, field)
                if not n_share <= b_share + tol.recall:
                    out.append(Regression(key, f"{what} (share of PyTorch's stable boxes)", b_share, n_share))
        elif section == "detections":
            if not n["recall"] >= b["recall"] - tol.recall:
                out.append(Regression(key, "boxes found (recall vs PyTorch)", b["recall"], n["recall"]))
            bp, np_ = _precision(b), _precision(n)
            if bp is not None and (np_ is None or not np_ >= bp - tol.recall):
                out.append(Regression(key, "boxes that PyTorch also finds (precision vs PyTorch)", bp, np_ if np_ is not None else "missing"))
        else:
            for metric in ("map50", "map50_95"):
                if math.isfinite(b[metric]) and not n[metric] >= b[metric] - tol.map:
                    out.append(Regression(key, metric, b[metric], n[metric]))
    return out


def _laxer_tolerances(now: Report, base: Report) -> list[Regression]:
    """Each tolerance the report holds its outputs to that is laxer than the baseline's: a row
    judged by a laxer rule proves less, whatever it says of itself."""
    out = []
    for variant, tol in base.tolerances.items():
        b = tol.limits
        n = now.tolerances[variant].limits if variant in now.tolerances else {}
        both = stricter(b, n)
        for metric in ("max_abs_rel", "min_cosine"):
            if b[metric] is not None and n.get(metric) != both[metric]:
                out.append(Regression(f"tolerances.{variant}", metric, b[metric], "ungated" if n.get(metric) is None else n[metric]))
    return out


def _dataset(now: Report, base: Report, tol: CheckTolerance) -> list[Regression]:
    """validate --data's mAP on the whole set: each row's mAP@0.5 and mAP@0.5:0.95 may fall by ``map``
    at most, measured on the same images (a baseline measured on others compares nothing here)."""
    b, n = base.dataset, now.dataset
    if b is None:
        return []
    same = n is not None and n.images == b.images and (n.fingerprint == b.fingerprint if b.fingerprint else n.source == b.source)
    if not same:  # (a baseline without a fingerprint: an older report, its folder as given)
        def scored(d) -> str:
            return f"{d.images} images of {d.source}" + (f" (set {d.fingerprint[:12]})" if d.fingerprint else "")

        return [Regression("dataset", "mAP measured on", scored(b), "missing" if n is None else scored(n))]
    out = []
    for row, bm in b.rows.items():
        nm = n.rows.get(row)
        for metric in ("map50", "map50_95"):
            if nm is None or not getattr(nm, metric) >= getattr(bm, metric) - tol.map:
                out.append(Regression(f"dataset {row}", metric, getattr(bm, metric), "missing" if nm is None else getattr(nm, metric)))
    return out


def compare_reports(report: dict | Report, baseline: dict | Report, tol: CheckTolerance) -> list[Regression | Contradiction]:
    """Every regression of ``report`` against ``baseline``, and every row of ``report`` that says
    it passed while one of its checks failed; raises ``BadInputError`` when either is malformed
    (``Report.from_dict``), the baseline holds no rows, or the two describe different models."""
    now = report if isinstance(report, Report) else Report.from_dict(report, "report")
    base = baseline if isinstance(baseline, Report) else Report.from_dict(baseline, "baseline")
    if not base.results:
        raise BadInputError("the baseline holds no rows: it proves nothing; pass a baseline written from a real report "
                            "(--update-baseline)")
    ids_now, ids_base = now.identity, base.identity
    differ = [f"{k} {ids_base[k]!r} vs {ids_now[k]!r}" for k in ids_base if ids_base[k] != ids_now[k]]
    if differ:
        raise BadInputError(f"report and baseline describe different models ({'; '.join(differ)} in the baseline vs the report); "
                            f"pass the baseline of this model, or accept this report with --update-baseline")
    out = _non_finite(now, "report") + _non_finite(base, "baseline")
    rows_now = {r.key: r for r in now.results}
    earned_now, earned_base = {r.key: now.earned(r) for r in now.results}, {r.key: base.earned(r) for r in base.results}
    for b in base.results:
        n = rows_now.get(b.key)
        out += [Regression(b.key, "row", "present", "missing")] if n is None else _compare_row(b.key, n, b, earned_base[b.key], tol)
    for n in now.results:
        if n.key not in earned_base and not earned_now[n.key]:
            out.append(Regression(n.key, "new row", "absent", "failing"))
        if n.passed:
            out += [Contradiction(n.key, failed) for failed in now.failures(n)]
    out += _laxer_tolerances(now, base) + _dataset(now, base, tol)
    runnable_now = _board_runnable(now)
    for variant, runnable in _board_runnable(base).items():
        if runnable and not runnable_now.get(variant, False):
            out.append(Regression(f"board {variant}", "runnable", True, runnable_now.get(variant, "missing")))
    stands_in = set(now.repaired)  # a quantised file whose repaired file proves what it stands in for (``Report.passed``)
    failing = [k for k, ok in earned_now.items() if not ok and rows_now[k].variant not in stands_in] + \
        [f"board {v}" for v, ok in runnable_now.items() if not ok and v not in stands_in] + \
        [f"dataset {row}" for row in (now.dataset.refused if now.dataset is not None else {})]
    if now.says_passed and failing:
        out.append(Regression("report", "passed", f"claimed, with {', '.join(failing[:3])} failing", False))
    if base.says_passed and not now.says_passed:
        out.append(Regression("report", "passed", True, False))
    n_base, n_now = sum(earned_base.values()), sum(earned_now.values())
    if n_now < n_base:
        out.append(Regression("all", "passing rows", n_base, n_now))
    return out


def check_written(report: Report) -> None:
    """Every report edgeport writes is one ``edgeport check`` reads and no worse than itself (here in the
    gate, which the report never imports); a report that fails is edgeport's bug (an internal error,
    exit 3), never a file left for the user's gate to refuse."""
    try:
        read = Report.from_dict(json.loads(render_json(report)), "the report edgeport is writing")
    except BadInputError as exc:
        raise RuntimeError(str(exc)) from None
    regressions = compare_reports(read, read, CheckTolerance())
    if regressions:
        raise RuntimeError(f"the report edgeport is writing is a regression of itself: {'; '.join(map(str, regressions[:3]))}")
