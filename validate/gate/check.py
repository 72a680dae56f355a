"""``edgeport check``: compare a parity report with a baseline; the CI regression gate.

It fails closed: whatever it cannot prove no worse than the baseline is a failure.

- Both files are read strictly (``parse_report``): one row per (variant, runtime), one entry
  per output name in a row, every metric a number in its range (errors >= 0, cosine in
  [-1, 1], recall and mAP in [0, 1]; NaN and infinity are allowed and are regressions). A
  duplicate, a metric out of range, a missing field: bad input (exit 2).
- The two must describe the same model (architecture, weights hash, input, outputs), else
  bad input: comparing two models' reports proves nothing.
- A row fails when it says so, or when one of its outputs fails its own tolerance whatever
  the row says (a report never passes on a ``passed`` it does not earn).
- A regression: a baseline row missing, or no longer passing; a failing row the baseline did
  not have failing; a baseline metric or section (detections, mAP) missing; an output's
  cosine falling by more than ``cosine``; its max |error| growing by more than
  ``max_abs_factor`` times (errors below ``max_abs_floor`` x max|ref| never count); boxes found
  (recall) or box precision against PyTorch, or mAP, falling by more than ``recall`` / ``map``;
  a file the board could run that it no longer can; fewer passing rows; a report that claims to
  pass while something in it fails. Timings are never compared.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from edgeport.errors import BadInputError
from edgeport.text import for_terminal
from edgeport.validate.report.schema import SCHEMA

MAX_REPORT_BYTES = 64 * 1024 * 1024  # a report is kilobytes; anything near this is not one


@dataclass(frozen=True)
class CheckTolerance:
    cosine: float = 1e-4
    max_abs_factor: float = 2.0
    max_abs_floor: float = 1e-6
    recall: float = 0.02
    map: float = 0.01

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


def _fmt(v) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


# -- reading a report, strictly -----------------------------------------------------------------

# per-output metrics and the range each must lie in (NaN and infinities are read, and then
# reported as regressions: they mean something broke)
OUTPUT_METRICS = {"max_abs": (0.0, math.inf), "mean_abs": (0.0, math.inf), "rmse": (0.0, math.inf), "p99_abs": (0.0, math.inf),
                  "max_abs_rel": (0.0, math.inf), "ref_max_abs": (0.0, math.inf), "cosine": (-1.0, 1.0),
                  "snr_db": (-math.inf, math.inf)}
REQUIRED_OUTPUT_METRICS = ("cosine", "max_abs_rel")
# where a non-finite value means something broke (+inf SNR is a bit-exact match)
FINITE_METRICS = ("max_abs", "mean_abs", "rmse", "cosine", "max_abs_rel", "p99_abs", "ref_max_abs")
SECTIONS = {"detections": {"recall": (0.0, 1.0), "precision": (0.0, 1.0), "reference_boxes": (0.0, math.inf),
                           "matched": (0.0, math.inf), "missed": (0.0, math.inf), "extra": (0.0, math.inf)},
            "map": {"map50": (0.0, 1.0), "map50_95": (0.0, 1.0)}}
REQUIRED_SECTION_FIELDS = {"detections": ("recall",), "map": ("map50", "map50_95")}
# what says which model a report is about: reports of two models are never compared
IDENTITY = (("model", "arch"), ("model", "weights_sha256"), ("model", "outputs"), ("inputs", "shape"))


@dataclass(frozen=True)
class Output:
    name: str
    metrics: dict  # name -> float, as read (NaN and infinities included)
    tolerance: dict  # {"max_abs_rel", "min_cosine"}: float or None
    passed: bool

    def fails_own_tolerance(self) -> bool:
        """Whether these metrics fail the tolerance the report itself states (NaN fails)."""
        rel, cos = self.tolerance.get("max_abs_rel"), self.tolerance.get("min_cosine")
        finite = all(math.isfinite(self.metrics[m]) for m in FINITE_METRICS if m in self.metrics)
        return (not finite or (rel is not None and not self.metrics["max_abs_rel"] <= rel)
                or (cos is not None and not self.metrics["cosine"] >= cos))


@dataclass(frozen=True)
class Row:
    key: str  # "variant/runtime"
    says_passed: bool
    outputs: dict  # name -> Output, in order
    sections: dict  # "detections" / "map" -> {field: float}, present only when not null

    @property
    def passed(self) -> bool:
        """Passed as the row says, and as its own numbers say."""
        return self.says_passed and all(o.passed and not o.fails_own_tolerance() for o in self.outputs.values())


@dataclass(frozen=True)
class GateReport:
    """What the gate reads of a report: its verdict, identity, rows, and the board's verdicts."""

    passed: bool
    identity: dict
    rows: dict  # key -> Row, in order
    board_runnable: dict  # variant -> bool


class _Malformed(Exception):
    pass


def _number(value, where: str, lo: float, hi: float) -> float:
    """A JSON number (or the renderer's "inf", "-inf", "nan") within [lo, hi]; NaN and infinities pass here."""
    if isinstance(value, str) and value in ("inf", "-inf", "nan"):
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Malformed(f"{where} is {value!r}, not a number")
    value = float(value)  # a huge integer becomes inf, and is then a regression like any inf
    if math.isfinite(value) and not lo <= value <= hi:
        raise _Malformed(f"{where} is {value:g}, outside [{lo:g}, {hi:g}]")
    return value


def _expect(value, kind, where: str):
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise _Malformed(f"{where} is missing or not a{'n' if kind.__name__[0] in 'aeiou' else ''} {kind.__name__}")
    return value


def _output(o, where: str) -> Output:
    _expect(o, dict, where)
    name = _expect(o.get("name"), str, f"{where}.name")
    metrics = {}
    for metric, (lo, hi) in OUTPUT_METRICS.items():
        if metric in o:
            metrics[metric] = _number(o[metric], f"{where}.{metric}", lo, hi)
        elif metric in REQUIRED_OUTPUT_METRICS:
            raise _Malformed(f"{where}.{metric} is missing")
    tol = _expect(o.get("tolerance"), dict, f"{where}.tolerance")
    tolerance = {k: (None if tol.get(k) is None else _number(tol[k], f"{where}.tolerance.{k}", lo, hi))
                 for k, lo, hi in (("max_abs_rel", 0.0, math.inf), ("min_cosine", -1.0, 1.0))}
    return Output(name, metrics, tolerance, _expect(o.get("passed"), bool, f"{where}.passed"))


def _row(r, where: str) -> Row:
    _expect(r, dict, where)
    key = f"{_expect(r.get('variant'), str, f'{where}.variant')}/{_expect(r.get('runtime'), str, f'{where}.runtime')}"
    outputs: dict[str, Output] = {}
    for j, o in enumerate(_expect(r.get("outputs"), list, f"{where}.outputs")):
        out = _output(o, f"{where}.outputs[{j}]")
        if out.name in outputs:
            raise _Malformed(f"{where} ({key}) has two outputs named {out.name!r}")
        outputs[out.name] = out
    sections = {}
    for section, fields in SECTIONS.items():
        value = r.get(section)
        if value is None:
            continue
        _expect(value, dict, f"{where}.{section}")
        for f in REQUIRED_SECTION_FIELDS[section]:
            if f not in value:
                raise _Malformed(f"{where}.{section}.{f} is missing")
        sections[section] = {f: _number(value[f], f"{where}.{section}.{f}", lo, hi) for f, (lo, hi) in fields.items() if f in value}
    return Row(key, _expect(r.get("passed"), bool, f"{where}.passed"), outputs, sections)


def parse_report(data, what: str = "report") -> GateReport:
    """The gate's view of a report dictionary; ``BadInputError`` (exit 2) naming the first problem."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        schema = data.get("schema") if isinstance(data, dict) else None
        raise BadInputError(f"{what} is not an {SCHEMA} report (schema: {for_terminal(repr(schema))[:80]}); pass a report.json "
                            f"edgeport wrote")
    try:
        identity = {}
        for section, field in IDENTITY:
            part = _expect(data.get(section), dict, section)
            if field not in part:
                raise _Malformed(f"{section}.{field} is missing: it says which model the report is about")
            identity[f"{section}.{field}"] = part[field]
        rows: dict[str, Row] = {}
        for i, r in enumerate(_expect(data.get("results"), list, "results")):
            row = _row(r, f"results[{i}]")
            if row.key in rows:
                raise _Malformed(f"results[{i}] repeats the row {row.key!r}: one row per variant and runtime")
            rows[row.key] = row
        board = data.get("board")
        checks = {}
        if board is not None:
            for variant, check in _expect(_expect(board, dict, "board").get("checks"), dict, "board.checks").items():
                checks[variant] = _expect(_expect(check, dict, f"board.checks.{variant}").get("runnable"), bool,
                                          f"board.checks.{variant}.runnable")
        return GateReport(_expect(data.get("passed"), bool, "passed"), identity, rows, checks)
    except _Malformed as exc:
        raise BadInputError(f"{what} is a malformed {SCHEMA} report: {exc}; regenerate it with edgeport") from None


def load_report(path: Path, what: str) -> dict:
    """Read a report file as JSON; anything unreadable is bad input (exit 2), one line."""
    label = f"{what} {str(path)!r}"
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_REPORT_BYTES + 1)
    except FileNotFoundError as exc:
        raise BadInputError(f"{label} does not exist") from exc
    except IsADirectoryError as exc:
        raise BadInputError(f"{label} is a folder; pass its report.json") from exc
    if len(raw) > MAX_REPORT_BYTES:
        raise BadInputError(f"{label} is larger than {MAX_REPORT_BYTES >> 20} MiB: not a parity report")
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise BadInputError(f"{label} is not text (byte {exc.start} is not UTF-8); pass a report.json") from exc
    except RecursionError as exc:
        raise BadInputError(f"{label} is nested too deeply to be a parity report") from exc
    except ValueError as exc:  # malformed JSON, or an integer too long to convert
        raise BadInputError(f"{label} is not readable JSON ({str(exc)[:200]})") from exc


def write_baseline(report: Path, baseline: Path) -> Path:
    """``--update-baseline``: write the (checked) report over the baseline, atomically. A symlinked
    baseline is written through: its target is replaced, the link kept. Returns the file written."""
    import tempfile

    data = Path(report).read_bytes()
    target = Path(os.path.realpath(baseline))
    if target.is_dir():
        raise BadInputError(f"--baseline {str(baseline)!r} is a folder; pass a .json path")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise BadInputError(f"--update-baseline: cannot write {str(baseline)!r} ({exc.strerror or exc}); "
                            f"pass a writable --baseline path") from exc
    return target


# -- comparing ------------------------------------------------------------------------------------


def _non_finite(report: GateReport, label: str) -> list[Regression]:
    """Every NaN or Inf metric in a report, as a regression naming the row."""
    out = []
    for key, row in report.rows.items():
        for o in row.outputs.values():
            for metric, value in o.metrics.items():
                if metric in FINITE_METRICS and not math.isfinite(value):
                    out.append(Regression(key, f"{o.name} {metric} in the {label}", "finite", value))
                elif metric == "snr_db" and math.isnan(value):
                    out.append(Regression(key, f"{o.name} snr_db in the {label}", "a number", value))
        for section, values in row.sections.items():
            for field, value in values.items():
                if not math.isfinite(value):
                    out.append(Regression(key, f"{section} {field} in the {label}", "finite", value))
    return out


def _precision(section: dict) -> float | None:
    """Boxes a runtime found that PyTorch also found, of all it found."""
    if "precision" in section:
        return section["precision"]
    if "matched" in section and "extra" in section:
        found = section["matched"] + section["extra"]
        return section["matched"] / found if found else 1.0
    return None


def _compare_row(key: str, now: Row, base: Row, tol: CheckTolerance) -> list[Regression]:
    out = []
    if base.passed and not now.passed:
        why = "passed" if not now.says_passed else "passed (by its own tolerance)"
        out.append(Regression(key, why, True, False))
    for bo in base.outputs.values():
        no = now.outputs.get(bo.name)
        if no is None:
            out.append(Regression(key, f"output {bo.name}", "present", "missing"))
            continue
        for metric in bo.metrics:
            if metric not in no.metrics:
                out.append(Regression(key, f"{bo.name} {metric}", bo.metrics[metric], "missing"))
        b_cos, n_cos = bo.metrics["cosine"], no.metrics["cosine"]
        if not n_cos >= b_cos - tol.cosine and math.isfinite(b_cos):
            out.append(Regression(key, f"{bo.name} cosine", b_cos, n_cos))
        b_rel, n_rel = bo.metrics["max_abs_rel"], no.metrics["max_abs_rel"]
        if n_rel > tol.max_abs_floor and n_rel > tol.max_abs_factor * max(b_rel, tol.max_abs_floor):
            out.append(Regression(key, f"{bo.name} max_abs/max|ref|", b_rel, n_rel))
    for section, b in base.sections.items():
        n = now.sections.get(section)
        if n is None:
            out.append(Regression(key, section, "present", "missing"))
            continue
        if section == "detections":
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


def compare_reports(report: dict | GateReport, baseline: dict | GateReport, tol: CheckTolerance) -> list[Regression]:
    """Every regression of ``report`` against ``baseline``; raises ``BadInputError`` when either
    is malformed, the baseline holds no rows, or the two describe different models."""
    now = report if isinstance(report, GateReport) else parse_report(report, "report")
    base = baseline if isinstance(baseline, GateReport) else parse_report(baseline, "baseline")
    if not base.rows:
        raise BadInputError("the baseline holds no rows: it proves nothing; pass a baseline written from a real report "
                            "(--update-baseline)")
    differ = [f"{k} {base.identity[k]!r} vs {now.identity[k]!r}" for k in base.identity if base.identity[k] != now.identity[k]]
    if differ:
        raise BadInputError(f"report and baseline describe different models ({'; '.join(differ)} in the baseline vs the report); "
                            f"pass the baseline of this model, or accept this report with --update-baseline")
    out = _non_finite(now, "report") + _non_finite(base, "baseline")
    for key, b in base.rows.items():
        n = now.rows.get(key)
        if n is None:
            out.append(Regression(key, "row", "present", "missing"))
        else:
            out += _compare_row(key, n, b, tol)
    for key, n in now.rows.items():
        if key not in base.rows and not n.passed:
            out.append(Regression(key, "new row", "absent", "failing"))
    for variant, runnable in base.board_runnable.items():
        if runnable and not now.board_runnable.get(variant, False):
            out.append(Regression(f"board {variant}", "runnable", True, now.board_runnable.get(variant, "missing")))
    failing = [k for k, r in now.rows.items() if not r.passed] + [f"board {v}" for v, ok in now.board_runnable.items() if not ok]
    if now.passed and failing:
        out.append(Regression("report", "passed", f"claimed, with {', '.join(failing[:3])} failing", False))
    if base.passed and not now.passed:
        out.append(Regression("report", "passed", True, False))
    n_base = sum(r.passed for r in base.rows.values())
    n_now = sum(r.passed for r in now.rows.values())
    if n_now < n_base:
        out.append(Regression("all", "passing rows", n_base, n_now))
    return out
