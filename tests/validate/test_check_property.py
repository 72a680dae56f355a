"""The gate never exits 0 on a report worse than its baseline (property-based, on real reports).

Each example takes a real report (the committed CI baselines, written by ``edgeport convert``),
applies one to three mutations that make it worse -- a row dropped or failing, a metric worse
beyond its tolerance, NaN, out of range or gone, a section gone, a duplicate, another model, a
new failing row, a board that no longer runs a file, a row that says it passed while one of its
own checks (steps, verdict, repeat, reasons) failed, a step check worse or gone, a key twice in one
object -- mixed with harmless ones (timings, row order, metrics improving, fewer steps, fields the
gate does not know), and runs ``edgeport check`` on it against the original. The gate must exit
non-zero every time; and on the harmless mutations alone it must exit 0, so a gate that refused
everything would fail here too.

The committed baselines predate ``steps``: the fixture adds the check a quantised board row
carries (against the reference kernels on the same file, reported and not gated) to the report
and its baseline alike, so that the mutations of it have something to mutate.
"""

from __future__ import annotations

import copy
import json
import math
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from edgeport import cli
from edgeport.validate.gate.check import CheckTolerance
from edgeport.validate.report.render import json_text

pytestmark = pytest.mark.one_line  # no converter line changes what these test (pyproject.toml)

REPO = Path(__file__).resolve().parents[2]
REAL_REPORTS = sorted((REPO / "ci").glob("parity-baseline*.json"))
TOL = CheckTolerance()


def _gated_outputs(report: dict) -> list[tuple[int, int]]:
    return [(i, j) for i, r in enumerate(report["results"]) for j, _ in enumerate(r["outputs"])]


def _passing_rows(report: dict) -> list[int]:
    return [i for i, r in enumerate(report["results"]) if r["passed"]]


# -- mutations that make a report worse: each takes (report, draw) and changes it in place ------------

def drop_row(r, draw):
    """Every row of one of the baseline's (variant, runtime): a duplicate made by another mutation goes with it
    (a row another mutation added is not the baseline's, so dropping it would undo that mutation)."""
    keys = sorted({(row["variant"], row["runtime"]) for row in r["_baseline"]["results"]})
    key = draw(st.sampled_from(keys))
    r["results"] = [row for row in r["results"] if (row["variant"], row["runtime"]) != key]


def fail_row(r, draw):
    rows = _passing_rows(r)
    r["results"][draw(st.sampled_from(rows))]["passed"] = False


def _baseline_output(r, i, j) -> dict:
    """The baseline's entry for output ``j`` of row ``i`` of the mutated report (rows may be reordered)."""
    row, out = r["results"][i], r["results"][i]["outputs"][j]
    (base_row,) = [b for b in r["_baseline"]["results"] if (b["variant"], b["runtime"]) == (row["variant"], row["runtime"])]
    return next(o for o in base_row["outputs"] if o["name"] == out["name"])


def worse_cosine(r, draw):
    i, j = draw(st.sampled_from(_gated_outputs(r)))
    o = r["results"][i]["outputs"][j]
    # just past the tolerance (what only the baseline comparison catches), or far past it
    o["cosine"] = _baseline_output(r, i, j)["cosine"] - draw(st.one_of(st.floats(TOL.cosine * 1.01, TOL.cosine * 3),
                                                                       st.floats(TOL.cosine * 3, 2.0)))
    if o["cosine"] < -1:
        o["cosine"] = -1.0 if draw(st.booleans()) else o["cosine"]  # in range, or out of it (malformed)


def worse_error(r, draw):
    i, j = draw(st.sampled_from(_gated_outputs(r)))
    o = r["results"][i]["outputs"][j]
    floor, base = TOL.max_abs_floor, _baseline_output(r, i, j)["max_abs_rel"]
    o["max_abs_rel"] = max(base, floor) * TOL.max_abs_factor * draw(st.one_of(st.floats(1.01, 2.0), st.floats(2.0, 1e6))) + floor


def non_finite(r, draw):
    i, j = draw(st.sampled_from(_gated_outputs(r)))
    metric = draw(st.sampled_from(["cosine", "max_abs_rel", "max_abs", "rmse", "mean_abs", "p99_abs"]))
    r["results"][i]["outputs"][j][metric] = draw(st.sampled_from([math.nan, math.inf, "nan", "inf"]))


def out_of_range(r, draw):
    i, j = draw(st.sampled_from(_gated_outputs(r)))
    metric, value = draw(st.sampled_from([("cosine", 1.5), ("cosine", 1e308), ("max_abs_rel", -1e308), ("max_abs", -1.0),
                                          ("cosine", "0.9")]))
    r["results"][i]["outputs"][j][metric] = value


def drop_metric(r, draw):
    i, j = draw(st.sampled_from(_gated_outputs(r)))
    o = r["results"][i]["outputs"][j]
    o.pop(draw(st.sampled_from(sorted(k for k in o if k in ("cosine", "max_abs_rel", "max_abs", "rmse", "mean_abs", "p99_abs", "snr_db")))))


def drop_output(r, draw):
    i, j = draw(st.sampled_from(_gated_outputs(r)))
    r["results"][i]["outputs"].pop(j)


def duplicate_row(r, draw):
    i = draw(st.integers(0, len(r["results"]) - 1))
    dup = copy.deepcopy(r["results"][i])
    dup["passed"] = draw(st.booleans())
    r["results"].insert(draw(st.integers(0, len(r["results"]))), dup)


def duplicate_output(r, draw):
    i, j = draw(st.sampled_from(_gated_outputs(r)))
    outs = r["results"][i]["outputs"]
    outs.insert(draw(st.integers(0, len(outs))), dict(outs[j], cosine=0.0, passed=False))


def drop_section(r, draw):
    rows = [i for i, row in enumerate(r["results"]) if row.get("detections") or row.get("map")]
    i = draw(st.sampled_from(rows))
    section = draw(st.sampled_from([s for s in ("detections", "map") if r["results"][i].get(s)]))
    r["results"][i][section] = None if draw(st.booleans()) else r["results"][i].pop(section) and None


def fewer_boxes(r, draw):
    rows = [i for i, row in enumerate(r["results"]) if row.get("detections")]
    d = r["results"][draw(st.sampled_from(rows))]["detections"]
    if "stable_boxes" in d:  # judged above the noise floor: boxes lost or added beyond what NMS alone moves
        field = draw(st.sampled_from(["missed_stable", "extra_beyond"]))
        d[field] = d[field] + max(1, math.ceil((TOL.recall * 1.01) * max(d["stable_boxes"], 1)) + draw(st.integers(0, 5)))
        return
    if draw(st.booleans()):
        d["recall"] = max(0.0, d["recall"] - draw(st.floats(TOL.recall * 1.01, 1.0))) if d["recall"] > TOL.recall * 1.01 else "nan"
    else:
        d["extra"] = d["extra"] + max(1, round((d["matched"] + d["extra"]) * draw(st.floats(0.05, 3.0))))


def another_model(r, draw):
    section, field = draw(st.sampled_from([("model", "arch"), ("model", "weights_sha256"), ("model", "outputs"), ("inputs", "shape")]))
    r[section][field] = draw(st.sampled_from(["other", ["x"], [1, 2, 3], None]))


def new_failing_row(r, draw):
    r["results"].append({"variant": draw(st.sampled_from(["int8", "float16", "float32"])), "runtime": "board:elsewhere",
                         "passed": False, "outputs": []})
    r["passed"] = draw(st.booleans())


def board_refuses(r, draw):
    checks = r["board"]["checks"]
    checks[draw(st.sampled_from(sorted(checks)))]["runnable"] = False


def report_fails(r, draw):
    r["passed"] = False


def _rows_with(r, field) -> list[int]:
    return [i for i, row in enumerate(r["results"]) if row.get(field)]


def _step_rows(r) -> list[int]:
    """Rows whose steps are still a list of entries (another mutation may have made them a string)."""
    return [i for i, row in enumerate(r["results"])
            if isinstance(row.get("steps"), list) and row["steps"] and all(isinstance(s, dict) for s in row["steps"])]


def _baseline_steps(r, row) -> dict:
    """The baseline's steps entries of the mutated report's ``row``, by ``against``."""
    base = [b for b in r["_baseline"]["results"] if (b["variant"], b["runtime"]) == (row["variant"], row["runtime"])]
    return {s["against"]: s for b in base for s in b.get("steps") or [] if isinstance(s, dict)}


def steps_fail(r, draw):
    """A step check that failed, in a row that may still say it passed."""
    row = r["results"][draw(st.sampled_from(_step_rows(r)))]
    j = draw(st.integers(0, len(row["steps"]) - 1))
    row["steps"][j] = dict(row["steps"][j], allowed=1, passed=False,
                           max_steps=draw(st.one_of(st.integers(2, 10**6), st.none())))


def steps_not_counts(r, draw):
    """Steps that are not a count, or not a list."""
    row = r["results"][draw(st.sampled_from(_step_rows(r)))]
    if draw(st.booleans()):
        row["steps"] = draw(st.sampled_from(["nan", None, {}, 1]))
    else:
        entry = row["steps"][draw(st.integers(0, len(row["steps"]) - 1))]
        entry[draw(st.sampled_from(["max_steps", "allowed"]))] = draw(st.sampled_from([math.nan, "nan", "inf", 1.5, 1.0, -1, True]))


def steps_gone(r, draw):
    """Step checks the baseline has, gone: every row's, one row's, one entry, or its count (null)."""
    how = draw(st.sampled_from(["every row", "row", "entry", "null"] if _step_rows(r) else ["every row"]))
    if how == "every row":
        for row in r["results"]:
            row.pop("steps", None)
        return
    row = r["results"][draw(st.sampled_from(_step_rows(r)))]
    j = draw(st.integers(0, len(row["steps"]) - 1))
    if how == "row":
        row.pop("steps") if draw(st.booleans()) else row.update(steps=[])
    elif how == "entry":
        row["steps"].pop(j)
    else:
        row["steps"][j]["max_steps"] = None


def steps_raised(r, draw):
    """More steps than the baseline's, beyond a rounding, where they are only reported (not gated)."""
    rows = [i for i in _step_rows(r) if any(s.get("against") in _baseline_steps(r, r["results"][i]) for s in r["results"][i]["steps"])]
    row = r["results"][draw(st.sampled_from(rows))]
    entry = draw(st.sampled_from([s for s in row["steps"] if s.get("against") in _baseline_steps(r, row)]))
    before = _baseline_steps(r, row)[entry["against"]]["max_steps"] or 0
    entry["max_steps"] = max(before, 1) + draw(st.integers(1, 10**6))
    entry["allowed"] = None


def verdict_refuses(r, draw):
    row = r["results"][draw(st.sampled_from([i for i in _rows_with(r, "verdict") if r["results"][i]["verdict"]["runnable"]]))]
    how = draw(st.sampled_from(["not runnable", "gone", "another judge"]))
    if how == "not runnable":
        row["verdict"] = dict(row["verdict"], runnable=False, reasons=draw(st.sampled_from([[], ["RESIZE_BILINEAR v3 > v1"]])))
    elif how == "gone":
        row["verdict"] = None
    else:
        row["verdict"] = dict(row["verdict"], judge="oracle")


def repeat_differs(r, draw):
    row = r["results"][draw(st.sampled_from(_rows_with(r, "repeat")))]
    how = draw(st.sampled_from(["differs", "says failed", "says passed", "gone"]))
    if how == "differs":  # consistent, and failing
        row["repeat"] = {"max_abs": draw(st.one_of(st.floats(1e-12, 1e3), st.sampled_from(["nan", "inf"]))), "passed": False}
    elif how == "says failed":  # contradicts its own number
        row["repeat"] = {"max_abs": 0.0, "passed": False}
    elif how == "says passed":
        row["repeat"] = {"max_abs": draw(st.floats(1e-12, 1e3)), "passed": True}
    else:
        row["repeat"] = None if draw(st.booleans()) else row.pop("repeat") and None


def row_reasons(r, draw):
    """A reason the row failed, in a row that may still say it passed."""
    row = r["results"][draw(st.integers(0, len(r["results"]) - 1))]
    row["reasons"] = list(row.get("reasons") or []) + [draw(st.sampled_from(["missed 9 of PyTorch's 36 boxes (allowed 2)",
                                                                             "", "a second invoke answers differently"]))]


# a key twice in one object can be written only as text: a mutation puts this marker first in the
# object, holding the duplicate as JSON text, and ``_exit_code`` writes it out as that key
DUPLICATE = "__duplicate_key__"


def duplicate_key(r, draw):
    """A key twice in one object -- the report, a row, or an output -- the other value first, so a
    reader that keeps the last sees the original."""
    where = draw(st.sampled_from(["report", "row", "output"] if _gated_outputs(r) else ["report", "row"]))
    if where == "report":
        target = r
    elif where == "row":
        target = r["results"][draw(st.integers(0, len(r["results"]) - 1))]
    else:
        i, j = draw(st.sampled_from(_gated_outputs(r)))
        target = r["results"][i]["outputs"][j]
    key = draw(st.sampled_from(sorted(k for k in target if k not in ("_baseline", DUPLICATE))))
    hidden = {"passed": False, "cosine": 0.5, "runnable": False}.get(key, target[key])
    items = list(target.items())
    target.clear()
    target[DUPLICATE] = f"{json.dumps(key)}: {json.dumps(hidden)}"
    target.update(items)


WORSE = [drop_row, fail_row, worse_cosine, worse_error, non_finite, out_of_range, drop_metric, drop_output, duplicate_row,
         duplicate_output, drop_section, fewer_boxes, another_model, new_failing_row, board_refuses, report_fails,
         steps_fail, steps_not_counts, steps_gone, steps_raised, verdict_refuses, repeat_differs, row_reasons, duplicate_key]


# -- harmless mutations -------------------------------------------------------------------------------

def new_timings(r, draw):
    for row in r["results"]:
        if row.get("ms_per_image") is not None:
            row["ms_per_image"] = draw(st.floats(0.01, 1e4))


def reorder_rows(r, draw):
    r["results"] = draw(st.permutations(r["results"]))


def better_metrics(r, draw):
    for row in r["results"]:
        for o in row["outputs"]:
            if isinstance(o["cosine"], float) and math.isfinite(o["cosine"]):
                o["cosine"] = o["cosine"] + (1.0 - o["cosine"]) * draw(st.floats(0.0, 1.0))
            if isinstance(o["max_abs_rel"], float) and math.isfinite(o["max_abs_rel"]):
                o["max_abs_rel"] *= draw(st.floats(0.0, 1.0))


def fewer_steps(r, draw):
    for row in r["results"]:
        for entry in row.get("steps") or []:
            if entry["max_steps"] is not None:
                entry["max_steps"] = draw(st.integers(0, entry["max_steps"]))


def unknown_fields(r, draw):
    """Fields a newer edgeport may add within the schema version: allowed, and not read. (Fields the
    gate reads are not unknown: stable_boxes, missed_stable and extra_beyond once were, and setting
    them here made a report better than its baseline, which the worse mutations then failed to undo.)"""
    for row in r["results"]:
        if row.get("detections"):
            row["detections"].update(boxes_per_image=draw(st.integers(0, 5)), nms_kind="greedy")
        for entry in row.get("steps") or []:
            entry["first_parting"] = None


HARMLESS = [new_timings, reorder_rows, better_metrics, fewer_steps, unknown_fields]


def _applicable(mutation, report) -> bool:
    if mutation is fail_row or mutation is drop_row:
        return bool(_passing_rows(report)) or mutation is drop_row
    if mutation is drop_section or mutation is fewer_boxes:
        return any(row.get("detections") or (row.get("map") and mutation is drop_section) for row in report["results"])
    if mutation is board_refuses:
        return any(c["runnable"] for c in (report.get("board") or {}).get("checks", {}).values())
    if mutation in (worse_cosine, worse_error, non_finite, out_of_range, drop_metric, drop_output, duplicate_output):
        return bool(_gated_outputs(report))
    if mutation is report_fails:
        return report["passed"]
    if mutation in (steps_fail, steps_not_counts):
        return bool(_step_rows(report))
    if mutation is steps_gone:
        return True  # "every row" needs none; the others draw from _step_rows only when there is one
    if mutation is steps_raised:
        return any(s.get("against") in _baseline_steps(report, report["results"][i]) for i in _step_rows(report)
                   for s in report["results"][i]["steps"])
    if mutation is verdict_refuses:
        return any(row["verdict"]["runnable"] for row in report["results"] if row.get("verdict"))
    if mutation is repeat_differs:
        return bool(_rows_with(report, "repeat"))
    return True


def _with_duplicates(text: str) -> str:
    """``json_text``'s text with each ``DUPLICATE`` marker written out as the key it holds."""
    return re.sub(rf'"{DUPLICATE}": ("(?:[^"\\]|\\.)*")', lambda m: json.loads(m.group(1)), text)


def _exit_code(now: dict, base: dict) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "now.json").write_text(_with_duplicates(json_text(now)))
        (Path(tmp) / "base.json").write_text(json_text(base))
        try:
            return cli.main(["check", str(Path(tmp) / "now.json"), "--baseline", str(Path(tmp) / "base.json")])
        except SystemExit as exc:
            return int(exc.code)


# what a quantised board row carries (``validate/parity/run.py``): its steps against the reference
# kernels on the same file, reported and not gated
BOARD_STEPS = {"against": "the reference kernels on this file", "max_steps": 1, "allowed": None, "passed": True}


@pytest.fixture(scope="module", params=[p.name for p in REAL_REPORTS])
def real_report(request) -> dict:
    report = json.loads((REPO / "ci" / request.param).read_text())
    boards = [row for row in report["results"] if row["variant"] in ("int8", "uint8") and row["runtime"].startswith("board:")]
    assert boards, f"{request.param} has no quantised board row to carry steps"
    for row in boards:
        row.setdefault("steps", [dict(BOARD_STEPS)])
    return report


def _never_exits_0_on_worse(real_report, data, capsys):
    now = copy.deepcopy(real_report)
    for mutation in data.draw(st.lists(st.sampled_from(HARMLESS), max_size=2), label="harmless"):
        mutation(now, data.draw)
    harmless = copy.deepcopy(now)
    now["_baseline"] = real_report  # what the worse values are worse than
    worse = [m for m in WORSE if _applicable(m, now)]
    for mutation in data.draw(st.lists(st.sampled_from(worse), min_size=1, max_size=3), label="worse"):
        if _applicable(mutation, now):
            mutation(now, data.draw)
    del now["_baseline"]
    # two that cancel out (an output duplicated, then that copy dropped) leave a report no worse
    assume(now != harmless)
    code = _exit_code(now, real_report)
    captured = capsys.readouterr()
    assert code != 0, f"the gate passed a worse report:\n{captured.out}"


def _passes_no_worse(real_report, data, capsys):
    now = copy.deepcopy(real_report)
    for mutation in data.draw(st.lists(st.sampled_from(HARMLESS), max_size=3), label="harmless"):
        mutation(now, data.draw)
    code = _exit_code(now, real_report)
    captured = capsys.readouterr()
    assert code == 0, f"exit {code}:\n{captured.out}{captured.err}"


def _settings(examples: int):
    return settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


# a few examples in the fast suite; many in the full one
@_settings(10)
@given(data=st.data())
def test_the_gate_never_exits_0_on_a_worse_report(real_report, data, capsys):
    _never_exits_0_on_worse(real_report, data, capsys)


@_settings(5)
@given(data=st.data())
def test_the_gate_passes_what_is_no_worse(real_report, data, capsys):
    _passes_no_worse(real_report, data, capsys)


@pytest.mark.slow
@_settings(400)
@given(data=st.data())
def test_the_gate_never_exits_0_on_a_worse_report_thoroughly(real_report, data, capsys):
    _never_exits_0_on_worse(real_report, data, capsys)


@pytest.mark.slow
@_settings(100)
@given(data=st.data())
def test_the_gate_passes_what_is_no_worse_thoroughly(real_report, data, capsys):
    _passes_no_worse(real_report, data, capsys)
