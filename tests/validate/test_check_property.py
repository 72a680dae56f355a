"""The gate never exits 0 on a report worse than its baseline (property-based, on real reports).

Each example takes a real report (the committed CI baselines, written by ``edgeport convert``),
applies one to three mutations that make it worse -- a row dropped or failing, a metric worse
beyond its tolerance, NaN, out of range or gone, a section gone, a duplicate, another model, a
new failing row, a board that no longer runs a file -- mixed with harmless ones (timings, row
order, metrics improving), and runs ``edgeport check`` on it against the original. The gate must
exit non-zero every time; and on the harmless mutations alone it must exit 0, so a gate that
refused everything would fail here too.
"""

from __future__ import annotations

import copy
import json
import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgeport import cli
from edgeport.validate.gate.check import CheckTolerance
from edgeport.validate.report.render import render_json

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


WORSE = [drop_row, fail_row, worse_cosine, worse_error, non_finite, out_of_range, drop_metric, drop_output, duplicate_row,
         duplicate_output, drop_section, fewer_boxes, another_model, new_failing_row, board_refuses, report_fails]


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


HARMLESS = [new_timings, reorder_rows, better_metrics]


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
    return True


def _exit_code(now: dict, base: dict) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "now.json").write_text(render_json(now))
        (Path(tmp) / "base.json").write_text(render_json(base))
        try:
            return cli.main(["check", str(Path(tmp) / "now.json"), "--baseline", str(Path(tmp) / "base.json")])
        except SystemExit as exc:
            return int(exc.code)


@pytest.fixture(scope="module", params=[p.name for p in REAL_REPORTS])
def real_report(request) -> dict:
    return json.loads((REPO / "ci" / request.param).read_text())


def _never_exits_0_on_worse(real_report, data, capsys):
    now = copy.deepcopy(real_report)
    for mutation in data.draw(st.lists(st.sampled_from(HARMLESS), max_size=2), label="harmless"):
        mutation(now, data.draw)
    worse = [m for m in WORSE if _applicable(m, now)]
    now["_baseline"] = real_report  # what the worse values are worse than
    for mutation in data.draw(st.lists(st.sampled_from(worse), min_size=1, max_size=3), label="worse"):
        if _applicable(mutation, now):
            mutation(now, data.draw)
    del now["_baseline"]
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
