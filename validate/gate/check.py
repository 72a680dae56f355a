"""``edgeport check``: compare a parity report with a baseline; the CI regression gate.

It fails closed: whatever it cannot prove no worse than the baseline is a failure, and it reads
every verdict a report carries, because a check the gate skips is a check a report can fail
while the gate says it passed.

- Both files are read strictly (``load_report``, ``parse_report``): JSON with no key twice in one
  object (a reader keeps one of the two, so which one the file "says" is up to the reader); one
  row per (variant, runtime), one entry per output name in a row, every metric a number in its
  range (errors >= 0, cosine in [-1, 1], recall and mAP in [0, 1]; NaN and infinity are allowed
  and are regressions). A duplicate, a metric out of range, a number too large for a float, a
  missing field: bad input (exit 2). Fields the gate does not know are allowed (new ones come
  within a schema version); those it knows are checked.
- The two must describe the same model (architecture, weights hash, input, outputs), else
  bad input: comparing two models' reports proves nothing.
- A row's own checks, each read: its outputs (each against its own tolerance, whatever the
  output or the row says), its ``reasons`` (boxes missed, a second invoke that differs), its
  ``repeat`` (each image invoked twice), its ``verdict`` (whether the file runs there) and its
  ``steps`` (a quantised row against a run that must compute the same integers). A row passes
  only when it says so and every one of them passes; a row that says it passed while one failed
  is a regression whatever the baseline says, named with the check (a report never passes on a
  ``passed`` it does not earn). An entry that contradicts its own numbers (more steps than it
  allows, yet passed; a repeat that differs, yet passed) is bad input.
- A regression: a baseline row missing, or no longer passing; a failing row the baseline did
  not have failing; a baseline metric or section (detections, mAP) missing; an output's
  cosine falling by more than ``cosine``; its max |error| growing by more than
  ``max_abs_factor`` times (errors below ``max_abs_floor`` x max|ref| never count); boxes found
  (recall) or box precision against PyTorch, or mAP, falling by more than ``recall`` / ``map``;
  a file the board could run that it no longer can (the board's checks, or a row's verdict); a
  baseline step check gone, or its steps grown past one (a diagnostic may not worsen, gated or
  not: one step is a rounding apart, more is a different computation); a repeat check gone;
  fewer passing rows; a report that claims to pass while something in it fails. Timings are
  never compared.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from pathlib import Path

from edgeport.errors import BadInputError
from edgeport.jsonfile import DuplicateKey, Refused, read_json
from edgeport.text import for_terminal
from edgeport.validate.parity.result import JUDGES, Verdict
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


# -- reading a report, strictly -----------------------------------------------------------------

# per-output metrics and the range each must lie in (NaN and infinities are read, and then
# reported as regressions: they mean something broke)
OUTPUT_METRICS = {"max_abs": (0.0, math.inf), "mean_abs": (0.0, math.inf), "rmse": (0.0, math.inf), "p99_abs": (0.0, math.inf),
                  "max_abs_rel": (0.0, math.inf), "ref_max_abs": (0.0, math.inf), "cosine": (-1.0, 1.0),
                  "snr_db": (-math.inf, math.inf)}
REQUIRED_OUTPUT_METRICS = ("cosine", "max_abs_rel")
# where a non-finite value means something broke (+inf SNR is a bit-exact match)
FINITE_METRICS = ("max_abs", "mean_abs", "rmse", "cosine", "max_abs_rel", "p99_abs", "ref_max_abs")
# the fields of a section the gate reads (others are allowed and not read). Boxes are judged above
# the model's own noise floor (docs/validation.md): ``stable_boxes``, ``missed_stable`` and
# ``extra_beyond`` are what a row is held to, where a report carries them
SECTIONS = {"detections": {"recall": (0.0, 1.0), "precision": (0.0, 1.0), "reference_boxes": (0.0, math.inf),
                           "matched": (0.0, math.inf), "missed": (0.0, math.inf), "extra": (0.0, math.inf),
                           "stable_boxes": (0.0, math.inf), "missed_stable": (0.0, math.inf), "extra_beyond": (0.0, math.inf),
                           "noise_floor": (0.0, math.inf)},
            "map": {"map50": (0.0, 1.0), "map50_95": (0.0, 1.0)}}
REQUIRED_SECTION_FIELDS = {"detections": ("recall",), "map": ("map50", "map50_95")}
# counts of boxes: finite whole numbers, never NaN (a NaN count is no count)
DETECTION_COUNTS = ("reference_boxes", "matched", "missed", "extra", "stable_boxes", "missed_stable", "extra_beyond", "noise_floor")
# what says which model a report is about: reports of two models are never compared
IDENTITY = (("model", "arch"), ("model", "weights_sha256"), ("model", "outputs"), ("inputs", "shape"))
# steps a diagnostic may move by without having got worse: one is a rounding apart
STEPS_NOISE = 1


@dataclass(frozen=True)
class Output:
    name: str
    metrics: dict  # name -> float, as read (NaN and infinities included)
    tolerance: dict  # {"max_abs_rel", "min_cosine"}: float or None
    passed: bool
    reasons: tuple[str, ...] = ()  # why it failed (a channel collapsed, ...): any reason fails it

    def fails_own_tolerance(self) -> bool:
        """Whether these metrics fail the tolerance the report itself states (NaN fails)."""
        return self.own_tolerance_failure() is not None

    def own_tolerance_failure(self) -> str | None:
        """How these metrics fail the tolerance the report itself states, in words; None: they pass."""
        rel, cos = self.tolerance.get("max_abs_rel"), self.tolerance.get("min_cosine")
        for m in FINITE_METRICS:
            if m in self.metrics and not math.isfinite(self.metrics[m]):
                return f"{m} {self.metrics[m]!r}"
        if rel is not None and not self.metrics["max_abs_rel"] <= rel:
            return f"max_abs_rel {self.metrics['max_abs_rel']!r} > {rel!r}"
        if cos is not None and not self.metrics["cosine"] >= cos:
            return f"cosine {self.metrics['cosine']!r} < {cos!r}"
        return None

    def failure(self) -> str | None:
        """Why this output fails, in words: as it says, by its reasons, or by its own tolerance."""
        if not self.passed:
            return f"output {self.name} failed" + (f" ({_clip(self.reasons[0])})" if self.reasons else "")
        if self.reasons:
            return f"output {self.name}: {_clip(self.reasons[0])}"
        why = self.own_tolerance_failure()
        return f"output {self.name} fails its own tolerance ({why})" if why else None


@dataclass(frozen=True)
class Repeat:
    """Each image invoked twice: the largest difference between the two answers."""

    max_abs: float
    passed: bool


@dataclass(frozen=True)
class Steps:
    """One ``steps`` entry: how many quantisation steps a row's outputs lie from a run that must
    compute the same integers."""

    against: str
    max_steps: int | None  # None: that run did not run
    allowed: int | None  # None: reported, not gated
    passed: bool

    @property
    def label(self) -> str:
        return f"steps against {_clip(self.against)}"

    def failure(self) -> str | None:
        if self.passed:
            return None
        if self.max_steps is None:
            return f"{self.label}: that run did not run, so nothing was checked"
        if self.allowed is not None and self.max_steps > self.allowed:
            return f"{self.label} {self.max_steps} > allowed {self.allowed}"
        allowed = "not gated" if self.allowed is None else f"allowed {self.allowed}"
        return f"{self.label} failed ({self.max_steps}, {allowed})"


@dataclass(frozen=True)
class Row:
    key: str  # "variant/runtime"
    says_passed: bool
    outputs: dict  # name -> Output, in order
    sections: dict  # "detections" / "map" -> {field: float}, present only when not null
    reasons: tuple[str, ...] = ()  # why the row failed beyond its outputs
    repeat: Repeat | None = None
    verdict: Verdict | None = None  # whether the file runs there (judge, runnable, reasons)
    steps: dict = dataclasses.field(default_factory=dict)  # against -> Steps, in order
    boxes: tuple[float, int] | None = None  # the report's box tolerance for this variant: (fraction, slack)

    def failures(self) -> list[str]:
        """Each of the row's own checks that failed, in words; empty: its numbers earn a pass."""
        out = [f for f in (o.failure() for o in self.outputs.values()) if f]
        det = self.sections.get("detections", {})
        if self.boxes is not None and {"stable_boxes", "missed_stable", "extra_beyond"} <= det.keys():
            fraction, slack = self.boxes
            allowed = max(slack, int(fraction * det["stable_boxes"]))
            for what in ("missed_stable", "extra_beyond"):
                if not det[what] <= allowed:
                    count = {k: int(v) if float(v).is_integer() else v for k, v in det.items() if math.isfinite(v)}
                    out.append(f"detections {what} {count.get(what, det[what])!r} > allowed {allowed} "
                               f"(of {count.get('stable_boxes', det['stable_boxes'])!r} stable boxes)")
        if self.reasons:
            more = f" (and {len(self.reasons) - 1} more)" if len(self.reasons) > 1 else ""
            out.append(f"its reasons say: {_clip(self.reasons[0])}{more}")
        if self.repeat is not None and not self.repeat.passed:
            out.append(f"a second invoke answers differently (repeat max_abs {self.repeat.max_abs!r})")
        if self.verdict is not None and not self.verdict.runnable:
            why = _clip(self.verdict.reasons[0]) if self.verdict.reasons else "no reason given"
            out.append(f"the {self.verdict.judge} says the file does not run ({why})")
        out += [f for f in (s.failure() for s in self.steps.values()) if f]
        return out

    @property
    def passed(self) -> bool:
        """Passed as the row says, and as each of its own checks says."""
        return self.says_passed and not self.failures()


@dataclass(frozen=True)
class GateReport:
    """What the gate reads of a report: its verdict, identity, rows, and the board's verdicts."""

    passed: bool
    identity: dict
    rows: dict  # key -> Row, in order
    board_runnable: dict  # variant -> bool


class _Malformed(Exception):
    pass


def _clip(text: str, limit: int = 200) -> str:
    """Text from a file, bounded: a reason may be long, a line of the gate's output may not."""
    return text if len(text) <= limit else text[:limit] + "..."


def _shown(value) -> str:
    """A value from a file as the error shows it: exactly (``repr``), bounded."""
    return _clip(repr(value), 80)


def _number(value, where: str, lo: float, hi: float) -> float:
    """A JSON number (or the renderer's "inf", "-inf", "nan") within [lo, hi]; NaN and infinities pass here."""
    if isinstance(value, str) and value in ("inf", "-inf", "nan"):
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Malformed(f"{where} is {_shown(value)}, not a number")
    try:
        number = float(value)
    except OverflowError:  # an integer past 1.8e308: no metric edgeport writes is one
        digits = int(value.bit_length() * math.log10(2)) + 1
        raise _Malformed(f"{where} is an integer of about {digits} digits, past the largest float (1.8e308): not a metric") from None
    if math.isfinite(number) and not lo <= number <= hi:
        # exactly as read: a cosine of 1.0000000000000002 must not print as 1
        raise _Malformed(f"{where} is {number!r}, outside [{lo!r}, {hi!r}]")
    return number


def _expect(value, kind, where: str):
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise _Malformed(f"{where} is missing or not a{'n' if kind.__name__[0] in 'aeiou' else ''} {kind.__name__}")
    return value


def _strings(value, where: str) -> tuple[str, ...]:
    return tuple(_expect(s, str, f"{where}[{i}]") for i, s in enumerate(_expect(value, list, where)))


def _count(value, where: str, *, nullable: bool) -> int | None:
    """A non-negative integer (or null where ``nullable``): a float, NaN or bool is not a count."""
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        valid = "a non-negative integer" + (" or null" if nullable else "")
        raise _Malformed(f"{where} is {_shown(value)}, not {valid}")
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
    reasons = _strings(o["reasons"], f"{where}.reasons") if "reasons" in o else ()
    return Output(name, metrics, tolerance, _expect(o.get("passed"), bool, f"{where}.passed"), reasons)


def _repeat(value, where: str) -> Repeat | None:
    if value is None:
        return None
    _expect(value, dict, where)
    if "max_abs" not in value:
        raise _Malformed(f"{where}.max_abs is missing")
    max_abs = _number(value["max_abs"], f"{where}.max_abs", 0.0, math.inf)
    passed = _expect(value.get("passed"), bool, f"{where}.passed")
    if passed != (max_abs == 0.0):  # the check is "the same answer twice": its passed is its number
        raise _Malformed(f"{where} says passed {passed} with max_abs {max_abs!r}: it passes exactly when max_abs is 0")
    return Repeat(max_abs, passed)


def _verdict(value, where: str) -> Verdict | None:
    if value is None:
        return None
    _expect(value, dict, where)
    judge = value.get("judge")
    if judge not in JUDGES:
        raise _Malformed(f"{where}.judge is {_shown(judge)}, not one of {', '.join(JUDGES)}")
    return Verdict(judge, _expect(value.get("runnable"), bool, f"{where}.runnable"), _strings(value.get("reasons"), f"{where}.reasons"))


def _steps(value, where: str, key: str) -> dict:
    out: dict[str, Steps] = {}
    for i, s in enumerate(_expect(value, list, where)):
        at = f"{where}[{i}]"
        _expect(s, dict, at)
        against = _expect(s.get("against"), str, f"{at}.against")
        for field in ("max_steps", "allowed"):
            if field not in s:
                raise _Malformed(f"{at}.{field} is missing (null: {'that run did not run' if field == 'max_steps' else 'not gated'})")
        check = Steps(against, _count(s["max_steps"], f"{at}.max_steps", nullable=True),
                      _count(s["allowed"], f"{at}.allowed", nullable=True), _expect(s.get("passed"), bool, f"{at}.passed"))
        if against in out:
            raise _Malformed(f"{where} ({key}) has two entries against {_shown(against)}")
        if check.passed and check.allowed is not None and (check.max_steps is None or check.max_steps > check.allowed):
            seen = "no run to check against" if check.max_steps is None else f"max_steps {check.max_steps}"
            raise _Malformed(f"{at} says passed with {seen} and allowed {check.allowed}")
        out[against] = check
    return out


def _row(r, where: str, boxes: dict | None = None) -> Row:
    """One row; ``boxes``: variant -> (fraction, slack), the report's own box tolerances."""
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
    for f in DETECTION_COUNTS:
        count = sections.get("detections", {}).get(f)
        if count is not None and not math.isfinite(count):
            raise _Malformed(f"{where}.detections.{f} is {count!r}: a count of boxes is a finite number")
    if "stable_boxes" in sections.get("detections", {}) and boxes is not None and r.get("variant") not in boxes:
        raise _Malformed(f"{where} counts boxes above the noise floor, and tolerances.{r.get('variant')}.boxes is missing: "
                         f"nothing says how many it may miss")
    # all optional: reports written before these checks existed carry none of them
    return Row(key, _expect(r.get("passed"), bool, f"{where}.passed"), outputs, sections,
               reasons=_strings(r["reasons"], f"{where}.reasons") if "reasons" in r else (),
               repeat=_repeat(r.get("repeat"), f"{where}.repeat"), verdict=_verdict(r.get("verdict"), f"{where}.verdict"),
               steps=_steps(r.get("steps", []), f"{where}.steps", key), boxes=(boxes or {}).get(r["variant"]))


def _box_tolerances(tolerances) -> dict:
    """variant -> (fraction, slack) from the report's ``tolerances`` (optional: older reports)."""
    out = {}
    if tolerances is None:
        return out
    for variant, tol in _expect(tolerances, dict, "tolerances").items():
        if not isinstance(tol, dict) or tol.get("boxes") is None:
            continue
        b = _expect(tol["boxes"], dict, f"tolerances.{variant}.boxes")
        fraction = _number(b.get("fraction"), f"tolerances.{variant}.boxes.fraction", 0.0, 1.0)
        slack = _expect(b.get("slack"), int, f"tolerances.{variant}.boxes.slack")
        if not math.isfinite(fraction) or slack < 0:
            raise _Malformed(f"tolerances.{variant}.boxes is {_shown(b)}: a fraction in [0, 1] and a slack >= 0")
        out[variant] = (fraction, slack)
    return out


def parse_report(data, what: str = "report") -> GateReport:
    """The gate's view of a report dictionary (as ``load_report`` read it, or as the pipeline holds
    it); ``BadInputError`` (exit 2) naming the first problem."""
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
        boxes = _box_tolerances(data.get("tolerances"))
        rows: dict[str, Row] = {}
        for i, r in enumerate(_expect(data.get("results"), list, "results")):
            row = _row(r, f"results[{i}]", boxes)
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
        raise BadInputError(f"{what} is a malformed {SCHEMA} report: {exc}; this version of edgeport does not write that, so "
                            f"the file was written by another version or edited: restore it, or write it again with this "
                            f"version (edgeport validate)") from None


def load_report(path: Path, what: str) -> dict:
    """Read a report file as JSON (``jsonfile.read_json``: bounded, UTF-8, no key twice); anything
    unreadable is bad input (exit 2), one line."""
    label = f"{what} {str(path)!r}"
    try:
        return read_json(path, MAX_REPORT_BYTES)
    except FileNotFoundError as exc:
        raise BadInputError(f"{label} does not exist") from exc
    except IsADirectoryError as exc:
        raise BadInputError(f"{label} is a folder; pass its report.json") from exc
    except Refused as exc:
        edited = "; edgeport never writes that, so the file was edited: restore it, or write it again with edgeport validate" \
            if isinstance(exc, DuplicateKey) else "; pass a report.json edgeport wrote"
        raise BadInputError(f"{label} {for_terminal(str(exc))}{edited}") from None


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
    """Every NaN or Inf metric of a row that says it passed, as a regression naming the row. A row
    that says it failed has failed already (its NaN is why, and compared with the baseline it is a
    failing row like any other); a mAP of NaN is a dataset with no labelled boxes, not a broken run."""
    out = []
    for key, row in report.rows.items():
        if not row.says_passed:
            continue
        for o in row.outputs.values():
            for metric, value in o.metrics.items():
                if metric in FINITE_METRICS and not math.isfinite(value):
                    out.append(Regression(key, f"{o.name} {metric} in the {label}", "finite", value))
                elif metric == "snr_db" and math.isnan(value):
                    out.append(Regression(key, f"{o.name} snr_db in the {label}", "a number", value))
        for section, values in row.sections.items():
            for field, value in values.items():
                if not math.isfinite(value) and not (section == "map" and math.isnan(value)):
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


def _share(section: dict, field: str) -> float:
    """``field`` (a count) as a share of the stable boxes: 0 when there are none and none counted."""
    stable = section["stable_boxes"]
    if stable > 0:
        return section[field] / stable
    return 0.0 if section[field] == 0 else math.inf


def _compare_checks(key: str, now: Row, base: Row) -> list[Regression]:
    """The row's checks besides its outputs, against the baseline's: none may go missing, a file
    that ran must still run, and steps may not grow past a rounding (gated or only reported)."""
    out = []
    for against, b in base.steps.items():
        n = now.steps.get(against)
        metric = b.label
        if n is None or (n.max_steps is None and b.max_steps is not None):
            out.append(Regression(key, metric, "present" if b.max_steps is None else b.max_steps, "missing"))
        elif b.max_steps is not None and n.max_steps > b.max_steps and n.max_steps > STEPS_NOISE:
            out.append(Regression(key, metric, b.max_steps, n.max_steps))
    if base.verdict is not None and base.verdict.runnable:
        if now.verdict is None:
            out.append(Regression(key, "verdict", "runnable", "missing"))
        elif not now.verdict.runnable:
            out.append(Regression(key, f"runnable (the {now.verdict.judge}'s verdict)", True, False))
    if base.repeat is not None and now.repeat is None:
        out.append(Regression(key, "repeat (each image invoked twice)", "present", "missing"))
    return out


def _compare_row(key: str, now: Row, base: Row, tol: CheckTolerance) -> list[Regression]:
    out = []
    if base.passed and not now.says_passed:  # one that says it passed but fails is a Contradiction
        out.append(Regression(key, "passed", True, False))
    out += _compare_checks(key, now, base)
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


def compare_reports(report: dict | GateReport, baseline: dict | GateReport,
                    tol: CheckTolerance) -> list[Regression | Contradiction]:
    """Every regression of ``report`` against ``baseline``, and every row of ``report`` that says
    it passed while one of its checks failed; raises ``BadInputError`` when either is malformed,
    the baseline holds no rows, or the two describe different models."""
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
        if n.says_passed:
            out += [Contradiction(key, failed) for failed in n.failures()]
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
