from __future__ import annotations

import json

import pytest

from edgeport.errors import BadInputError
from edgeport.validate.check import CheckTolerance, compare_reports, load_report


def _report(cos=0.99999, rel=1e-6, passed=True, recall=1.0, map50=0.8):
    out = {"name": "p3", "cosine": cos, "max_abs_rel": rel}
    row = {"variant": "float32", "runtime": "tflite", "passed": passed, "outputs": [out],
           "detections": {"recall": recall}, "map": {"map50": map50, "map50_95": 0.4}}
    return {"schema": "edgeport.parity/1", "model": {"outputs": ["p3"]}, "inputs": {"shape": [3, 64, 64]},
            "results": [{"variant": "reference", "runtime": "pytorch", "passed": True, "outputs": []}, row]}


def test_identical_reports_have_no_regression():
    assert compare_reports(_report(), _report(), CheckTolerance()) == []


@pytest.mark.parametrize(
    "now, metric",
    [
        (_report(cos=0.999), "p3 cosine"),
        (_report(rel=1e-4), "p3 max_abs/max|ref|"),
        (_report(passed=False), "passed"),
        (_report(recall=0.9), "boxes found (recall vs PyTorch)"),
        (_report(map50=0.7), "map50"),
    ],
)
def test_each_regression_is_named_with_baseline_and_now(now, metric):
    regressions = compare_reports(now, _report(), CheckTolerance())
    assert metric in [r.metric for r in regressions]
    text = [str(r) for r in regressions if r.metric == metric][0]
    assert text.startswith("float32/tflite: ") and " -> " in text


def test_small_changes_within_tolerance_and_floor_pass():
    assert compare_reports(_report(cos=0.99998, rel=1.5e-6, map50=0.795), _report(), CheckTolerance()) == []
    # tiny errors never count, however much they grow
    assert compare_reports(_report(rel=9e-7), _report(rel=1e-9), CheckTolerance()) == []


def test_missing_rows_and_fewer_passing_rows():
    now = _report()
    now["results"].pop()
    metrics = [r.metric for r in compare_reports(now, _report(), CheckTolerance())]
    assert "row" in metrics and "passing rows" in metrics


def test_mismatched_or_unreadable_files(tmp_path):
    other = _report()
    other["model"]["outputs"] = ["a", "b"]
    with pytest.raises(BadInputError, match="different models"):
        compare_reports(other, _report(), CheckTolerance())
    (tmp_path / "x.json").write_text("{nope")
    with pytest.raises(BadInputError, match="not readable JSON"):
        load_report(tmp_path / "x.json", "report")
    (tmp_path / "y.json").write_text(json.dumps({"schema": "other/1"}))
    with pytest.raises(BadInputError, match="is not an edgeport.parity/1 report"):
        load_report(tmp_path / "y.json", "baseline")
    assert CheckTolerance.parse(["cosine=1e-3"]).cosine == 1e-3
    with pytest.raises(BadInputError, match="KEY=VALUE"):
        CheckTolerance.parse(["speed=2"])


def test_check_cli_exit_codes(tmp_path, cli):
    base, now = tmp_path / "base.json", tmp_path / "now.json"
    base.write_text(json.dumps(_report()))
    now.write_text(json.dumps(_report(cos=0.99)))
    ok = cli("check", str(base), "--baseline", str(base))
    assert ok.returncode == 0 and "no regression" in ok.stdout
    bad = cli("check", str(now), "--baseline", str(base))
    assert bad.returncode == 1 and "float32/tflite: p3 cosine 0.99999 -> 0.99" in bad.stdout
    assert cli("check", str(now), "--baseline", str(tmp_path / "missing.json")).returncode == 2
    upd = cli("check", str(now), "--baseline", str(tmp_path / "new" / "base.json"), "--update-baseline")
    assert upd.returncode == 0 and json.loads((tmp_path / "new" / "base.json").read_text()) == json.loads(now.read_text())
