"""The CI gate's comparator: each regression named with baseline and now; malformed files refused."""

from __future__ import annotations

import json

import pytest

from edgeport.errors import BadInputError
from edgeport.validate.gate.check import CheckTolerance, compare_reports, load_report, parse_report

from ..conftest import make_report


def test_identical_reports_have_no_regression():
    assert compare_reports(make_report(), make_report(), CheckTolerance()) == []


@pytest.mark.parametrize(
    "now, metric",
    [
        (make_report(cos=0.999), "p3 cosine"),
        (make_report(rel=9e-5), "p3 max_abs/max|ref|"),
        (make_report(passed=False), "passed"),
        (make_report(recall=0.9), "boxes found (recall vs PyTorch)"),
        (make_report(extra=9), "boxes that PyTorch also finds (precision vs PyTorch)"),
        (make_report(map50=0.7), "map50"),
    ],
)
def test_each_regression_is_named_with_baseline_and_now(now, metric):
    regressions = compare_reports(now, make_report(), CheckTolerance())
    assert metric in [r.metric for r in regressions]
    text = [str(r) for r in regressions if r.metric == metric][0]
    assert text.startswith("float32/tflite: ") and " -> " in text


def test_small_changes_within_tolerance_and_floor_pass():
    assert compare_reports(make_report(cos=0.99999, rel=1.5e-6, map50=0.795), make_report(), CheckTolerance()) == []
    # tiny errors never count, however much they grow
    assert compare_reports(make_report(rel=9e-7), make_report(rel=1e-9), CheckTolerance()) == []


def test_missing_rows_and_fewer_passing_rows():
    now = make_report()
    now["results"].pop()
    metrics = [r.metric for r in compare_reports(now, make_report(), CheckTolerance())]
    assert "row" in metrics and "passing rows" in metrics


def test_a_row_that_fails_its_own_tolerance_fails_whatever_it_says():
    now = make_report(cos=0.9)  # says passed, but cosine 0.9 < its own 0.99999
    regressions = [str(r) for r in compare_reports(now, make_report(), CheckTolerance())]
    assert any("passed (by its own tolerance)" in r for r in regressions), regressions
    assert any(r.startswith("report: passed claimed") for r in regressions), regressions


@pytest.mark.parametrize("field, value", [("arch", "pdet-s"), ("weights_sha256", "cd" * 32), ("outputs", ["a", "b"])])
def test_reports_of_different_models_are_refused(field, value):
    other = make_report()
    other["model"][field] = value
    with pytest.raises(BadInputError, match="different models"):
        compare_reports(other, make_report(), CheckTolerance())


def test_unreadable_files_and_tolerances(tmp_path):
    (tmp_path / "x.json").write_text("{nope")
    with pytest.raises(BadInputError, match="not readable JSON"):
        load_report(tmp_path / "x.json", "report")
    with pytest.raises(BadInputError, match="is not an edgeport.parity/2 report"):
        parse_report({"schema": "other/1"}, "baseline")
    assert CheckTolerance.parse(["cosine=1e-3"]).cosine == 1e-3
    with pytest.raises(BadInputError, match="KEY=VALUE"):
        CheckTolerance.parse(["speed=2"])


def test_check_cli_exit_codes(tmp_path, run_inproc):
    base, now = tmp_path / "base.json", tmp_path / "now.json"
    base.write_text(json.dumps(make_report()))
    now.write_text(json.dumps(make_report(cos=0.989999)))
    ok = run_inproc("check", str(base), "--baseline", str(base))
    assert ok.returncode == 0 and "no regression" in ok.stdout
    bad = run_inproc("check", str(now), "--baseline", str(base))
    assert bad.returncode == 1 and "float32/tflite: p3 cosine 0.999999 -> 0.989999" in bad.stdout
    assert run_inproc("check", str(now), "--baseline", str(tmp_path / "missing.json")).returncode == 2
    upd = run_inproc("check", str(now), "--baseline", str(tmp_path / "new" / "base.json"), "--update-baseline")
    assert upd.returncode == 0 and json.loads((tmp_path / "new" / "base.json").read_text()) == json.loads(now.read_text())
