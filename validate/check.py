"""``edgeport check``: compare a parity report with a baseline; the CI regression gate.

A regression is any of: a (variant, runtime) row of the baseline missing or no longer
passing; an output's cosine falling by more than ``cosine``; its max |error| growing by
more than ``max_abs_factor`` times (errors below ``max_abs_floor`` x max|ref| never count);
boxes found (recall against PyTorch) or mAP falling by more than ``recall`` / ``map``; the
number of passing rows going down. Timings are never compared.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

from edgeport.errors import BadInputError
from edgeport.validate.report import SCHEMA


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


def load_report(path: Path, what: str) -> dict:
    """Read and shape-check a report; anything malformed is bad input (exit 2), one line."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
        report = json.loads(text)
    except FileNotFoundError as exc:
        raise BadInputError(f"{what} {str(path)!r} does not exist") from exc
    except IsADirectoryError as exc:
        raise BadInputError(f"{what} {str(path)!r} is a folder; pass its report.json") from exc
    except UnicodeDecodeError as exc:
        raise BadInputError(f"{what} {str(path)!r} is not text (byte {exc.start} is not UTF-8); pass a report.json") from exc
    except json.JSONDecodeError as exc:
        raise BadInputError(f"{what} {str(path)!r} is not readable JSON ({exc})") from exc
    if not isinstance(report, dict) or report.get("schema") != SCHEMA or not isinstance(report.get("results"), list):
        raise BadInputError(f"{what} {str(path)!r} is not an {SCHEMA} report (schema: {report.get('schema') if isinstance(report, dict) else None})")
    problem = _shape_problem(report)
    if problem:
        raise BadInputError(f"{what} {str(path)!r} is a malformed {SCHEMA} report: {problem}; regenerate it with edgeport")
    return report


def _shape_problem(report: dict) -> str | None:
    """What is missing or mistyped among the fields ``compare_reports`` reads, or None."""
    for key in ("model", "inputs"):
        if not isinstance(report.get(key), dict):
            return f"'{key}' is not an object"
    for i, r in enumerate(report["results"]):
        if not isinstance(r, dict):
            return f"results[{i}] is not an object"
        for key, kind in (("variant", str), ("runtime", str), ("passed", bool), ("outputs", list)):
            if not isinstance(r.get(key), kind):
                return f"results[{i}].{key} is missing or not a {kind.__name__}"
        for j, o in enumerate(r["outputs"]):
            if not isinstance(o, dict) or not isinstance(o.get("name"), str):
                return f"results[{i}].outputs[{j}] has no name"
            for metric in ("cosine", "max_abs_rel"):
                if not _is_number(o.get(metric)):
                    return f"results[{i}].outputs[{j}].{metric} is missing or not a number"
        for key, fields in (("detections", ("recall",)), ("map", ("map50", "map50_95"))):
            value = r.get(key)
            if value is not None and (not isinstance(value, dict) or not all(_is_number(value.get(f)) for f in fields)):
                return f"results[{i}].{key} lacks {', '.join(fields)}"
    return None


def _is_number(v) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) or v in ("inf", "-inf", "nan")


def write_baseline(report: Path, baseline: Path) -> None:
    """``--update-baseline``: copy the (checked) report over the baseline, atomically."""
    import os
    import tempfile

    data = Path(report).read_bytes()
    target = Path(baseline)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    except OSError as exc:
        raise BadInputError(f"--update-baseline: cannot write {str(baseline)!r} ({exc.strerror or exc}); "
                            f"pass a writable --baseline path") from exc


def _rows(report: dict) -> dict[str, dict]:
    return {f"{r['variant']}/{r['runtime']}": r for r in report["results"]}


def _num(v) -> float:
    if isinstance(v, str):  # JSON has no infinity: the renderer writes "inf"
        return math.inf if v == "inf" else (-math.inf if v == "-inf" else math.nan)
    return float(v)  # Python's json also reads a bare NaN / Infinity


# Metrics where a non-finite value means something broke. (+inf SNR is a bit-exact match.)
FINITE_METRICS = ("max_abs", "mean_abs", "rmse", "cosine", "max_abs_rel", "p99_abs")


def non_finite(report: dict, label: str) -> list[Regression]:
    """Every NaN or Inf metric in a report, as a regression naming the row."""
    out = []
    for r in report["results"]:
        key = f"{r['variant']}/{r['runtime']}"
        for o in r["outputs"]:
            for metric in FINITE_METRICS:
                if metric in o and not math.isfinite(_num(o[metric])):
                    out.append(Regression(key, f"{o['name']} {metric} in the {label}", "finite", _num(o[metric])))
            if "snr_db" in o and math.isnan(_num(o["snr_db"])):
                out.append(Regression(key, f"{o['name']} snr_db in the {label}", "a number", math.nan))
        for section, fields in (("detections", ("recall",)), ("map", ("map50", "map50_95"))):
            for f in fields:
                value = (r.get(section) or {}).get(f)
                if value is not None and not math.isfinite(_num(value)):
                    out.append(Regression(key, f"{f} in the {label}", "finite", _num(value)))
    return out


def compare_reports(report: dict, baseline: dict, tol: CheckTolerance) -> list[Regression]:
    if report["model"].get("outputs") != baseline["model"].get("outputs") or report["inputs"].get("shape") != baseline["inputs"].get("shape"):
        raise BadInputError(
            f"report and baseline describe different models (outputs {report['model'].get('outputs')} vs "
            f"{baseline['model'].get('outputs')}, input {report['inputs'].get('shape')} vs {baseline['inputs'].get('shape')}); "
            f"pass the matching baseline or --update-baseline"
        )
    now_rows, base_rows = _rows(report), _rows(baseline)
    out: list[Regression] = non_finite(report, "report") + non_finite(baseline, "baseline")
    for key, base in base_rows.items():
        now = now_rows.get(key)
        if now is None:
            out.append(Regression(key, "row", "present", "missing"))
            continue
        if base["passed"] and not now["passed"]:
            out.append(Regression(key, "passed", True, False))
        now_outputs = {o["name"]: o for o in now["outputs"]}
        for bo in base["outputs"]:
            no = now_outputs.get(bo["name"])
            if no is None:
                out.append(Regression(key, f"output {bo['name']}", "present", "missing"))
                continue
            if _num(no["cosine"]) < _num(bo["cosine"]) - tol.cosine:
                out.append(Regression(key, f"{bo['name']} cosine", _num(bo["cosine"]), _num(no["cosine"])))
            b_rel, n_rel = _num(bo["max_abs_rel"]), _num(no["max_abs_rel"])
            if n_rel > tol.max_abs_floor and n_rel > tol.max_abs_factor * max(b_rel, tol.max_abs_floor):
                out.append(Regression(key, f"{bo['name']} max_abs/max|ref|", b_rel, n_rel))
        bd, nd = base.get("detections"), now.get("detections")
        if bd and nd and nd["recall"] < bd["recall"] - tol.recall:
            out.append(Regression(key, "boxes found (recall vs PyTorch)", bd["recall"], nd["recall"]))
        bm, nm = base.get("map"), now.get("map")
        if bm and nm:
            for metric in ("map50", "map50_95"):
                if _num(nm[metric]) < _num(bm[metric]) - tol.map:
                    out.append(Regression(key, metric, _num(bm[metric]), _num(nm[metric])))
    n_base = sum(r["passed"] for r in base_rows.values())
    n_now = sum(r["passed"] for r in now_rows.values())
    if n_now < n_base:
        out.append(Regression("all", "passing rows", n_base, n_now))
    return out
