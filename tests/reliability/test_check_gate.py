"""`edgeport check`: NaN is a regression, bad tolerances and malformed files are bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..conftest import make_report
from .conftest import assert_one_line, inventory


def _report(cosine=0.999999, rel=1e-6, **extra) -> dict:
    """The gate's smallest report, its float32 row's output with ``cosine`` and ``rel`` as given
    (numbers, or the strings a report may hold)."""
    report = make_report()
    report["results"][1]["outputs"][0].update(cosine=cosine, max_abs_rel=rel, **extra)
    return report


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def write(name: str, data) -> Path:
        path = tmp_path / name
        path.write_text(data if isinstance(data, str) else json.dumps(data))
        return path

    write("base.json", _report())
    return write


def test_a_clean_report_passes(files, run_inproc):
    files("now.json", _report())
    r = run_inproc("check", "now.json", "--baseline", "base.json")
    assert r.code == 0 and "no regression" in r.out, r.err


def test_nan_cosine_in_the_report_is_a_regression(files, run_inproc, tmp_path):
    files("now.json", json.dumps(_report()).replace('"cosine": 0.999999', '"cosine": NaN'))
    before = inventory(tmp_path)
    r = run_inproc("check", "now.json", "--baseline", "base.json")
    assert r.code == 1 and "float32/tflite: p3 cosine in the report" in r.out, r.out + r.err
    assert inventory(tmp_path) == before


def test_string_nan_relative_error_is_a_regression(files, run_inproc):
    files("now.json", _report(rel="nan"))
    r = run_inproc("check", "now.json", "--baseline", "base.json")
    assert r.code == 1 and "p3 max_abs_rel in the report" in r.out, r.out


def test_infinite_error_is_a_regression(files, run_inproc):
    files("now.json", _report(rel="inf"))
    r = run_inproc("check", "now.json", "--baseline", "base.json")
    assert r.code == 1 and "max_abs_rel" in r.out


def test_nan_in_the_baseline_is_a_regression(files, run_inproc):
    files("base.json", _report(cosine="nan"))
    files("now.json", _report())
    r = run_inproc("check", "now.json", "--baseline", "base.json")
    assert r.code == 1 and "cosine in the baseline" in r.out


@pytest.mark.parametrize("tol", ["cosine=nan", "cosine=-1", "map=inf", "recall=abc"])
def test_bad_tolerances_are_bad_input(files, run_inproc, tol):
    files("now.json", _report())
    r = run_inproc("check", "now.json", "--baseline", "base.json", "--tolerance", tol)
    assert_one_line(r, 2, "--tolerance")


def test_a_malformed_report_with_the_schema_tag_is_bad_input(files, run_inproc):
    bad = _report()
    del bad["results"][0]["outputs"]
    files("now.json", bad)
    assert_one_line(run_inproc("check", "now.json", "--baseline", "base.json"), 2, "malformed", "results[0].outputs")


def test_a_binary_file_is_bad_input(files, run_inproc, tmp_path):
    (tmp_path / "now.json").write_bytes(bytes(range(256)) * 4)
    assert_one_line(run_inproc("check", "now.json", "--baseline", "base.json"), 2, "not text")


def test_an_unwritable_baseline_target_is_bad_input(files, run_inproc, tmp_path):
    files("now.json", _report())
    before = inventory(tmp_path)
    r = run_inproc("check", "now.json", "--baseline", "base.json/inside.json", "--update-baseline")
    assert_one_line(r, 2, "cannot write")
    assert inventory(tmp_path) == before


def test_update_baseline_replaces_it_atomically(files, run_inproc, tmp_path):
    files("now.json", _report(cosine=0.9999999))
    r = run_inproc("check", "now.json", "--baseline", "base.json", "--update-baseline")
    assert r.code == 0
    assert json.loads((tmp_path / "base.json").read_text())["results"][1]["outputs"][0]["cosine"] == 0.9999999
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base.json", "now.json"]


# -- the gate fails closed: each way it once exited 0 on a worse report ----------------------------


def _check(files, run_inproc, now: dict, base: dict | None = None):
    files("now.json", now)
    if base is not None:
        files("base.json", base)
    return run_inproc("check", "now.json", "--baseline", "base.json")


def test_a_failing_row_followed_by_a_passing_duplicate_is_refused(files, run_inproc):
    now = make_report()
    failing = json.loads(json.dumps(now["results"][1]))
    failing["passed"] = False
    now["results"].insert(1, failing)
    assert_one_line(_check(files, run_inproc, now), 2, "repeats the row 'float32/tflite'")


def test_a_failing_output_hidden_by_a_passing_one_of_the_same_name_is_refused(files, run_inproc):
    now = make_report()
    row = now["results"][1]
    bad = dict(row["outputs"][0], cosine=0.5, passed=False)
    row["outputs"].insert(0, bad)
    assert_one_line(_check(files, run_inproc, now), 2, "two outputs named 'p3'")


def test_a_new_failing_row_fails_the_gate(files, run_inproc):
    now = make_report()
    now["passed"] = False
    now["results"].append({"variant": "int8", "runtime": "tflite", "passed": False, "outputs": []})
    r = _check(files, run_inproc, now)
    assert r.code == 1 and "int8/tflite: new row absent -> failing" in r.out, r.out + r.err


def test_detections_gone_where_the_baseline_had_them_fails(files, run_inproc):
    base = make_report(recall=0.0)
    now = make_report()
    now["results"][1]["detections"] = None
    r = _check(files, run_inproc, now, base)
    assert r.code == 1 and "float32/tflite: detections present -> missing" in r.out, r.out + r.err


def test_a_baseline_metric_missing_from_the_report_fails(files, run_inproc):
    now = make_report()
    del now["results"][1]["outputs"][0]["rmse"]
    r = _check(files, run_inproc, now)
    assert r.code == 1 and "p3 rmse" in r.out and "-> missing" in r.out, r.out + r.err


def test_an_empty_baseline_proves_nothing(files, run_inproc):
    base = make_report()
    base["results"] = []
    now = make_report(passed=False)
    assert_one_line(_check(files, run_inproc, now, base), 2, "baseline holds no rows")


@pytest.mark.parametrize("field, value", [("max_abs_rel", -1e308), ("cosine", 1e308), ("cosine", -1.5), ("max_abs", -1.0)])
def test_metrics_out_of_range_are_refused(files, run_inproc, field, value):
    now = make_report()
    now["results"][1]["outputs"][0][field] = value
    assert_one_line(_check(files, run_inproc, now), 2, field, "outside")


def test_nan_strings_in_boxes_and_map_are_regressions_not_crashes(files, run_inproc):
    now = make_report()
    now["results"][1]["detections"]["recall"] = "nan"
    now["results"][1]["map"]["map50"] = "nan"
    r = _check(files, run_inproc, now)
    assert r.code == 1 and "detections recall in the report" in r.out and "map50" in r.out, r.out + r.err


def test_deeply_nested_json_is_bad_input(files, run_inproc):
    files("now.json", "[" * 100_000 + "]" * 100_000)
    assert_one_line(run_inproc("check", "now.json", "--baseline", "base.json"), 2, "now.json")


def test_a_five_thousand_digit_integer_is_bad_input(files, run_inproc):
    files("now.json", json.dumps(make_report()).replace('"max_abs_rel": 1e-06', '"max_abs_rel": ' + "9" * 5000))
    assert_one_line(run_inproc("check", "now.json", "--baseline", "base.json"), 2, "now.json")


def test_update_baseline_writes_through_a_symlink(files, run_inproc, tmp_path):
    (tmp_path / "baselines").mkdir()
    real = tmp_path / "baselines" / "real.json"
    real.write_text(json.dumps(make_report()))
    (tmp_path / "link.json").symlink_to(real)
    files("now.json", make_report(cos=0.9999991))
    r = run_inproc("check", "now.json", "--baseline", "link.json", "--update-baseline")
    assert r.code == 0, r.err
    assert (tmp_path / "link.json").is_symlink(), "the link was replaced by a file"
    assert json.loads(real.read_text())["results"][1]["outputs"][0]["cosine"] == 0.9999991


def test_a_malformed_report_is_never_accepted_as_a_baseline(files, run_inproc, tmp_path):
    bad = make_report()
    bad["results"].append(bad["results"][1])
    files("now.json", bad)
    before = inventory(tmp_path)
    assert_one_line(run_inproc("check", "now.json", "--baseline", "base.json", "--update-baseline"), 2, "repeats the row")
    assert inventory(tmp_path) == before


@pytest.mark.parametrize("where, old, new", [
    # the failing value first: the standard reader keeps the last, and would see a pass
    ("a row", '"runtime": "tflite", "passed": true', '"runtime": "tflite", "passed": false, "passed": true'),
    ("the report", '"schema": "edgeport.parity/2", "passed": true', '"schema": "edgeport.parity/2", "passed": false, "passed": true'),
    ("an output", '"name": "p3", "cosine": 0.999999', '"name": "p3", "cosine": 0.5, "cosine": 0.999999'),
])
def test_a_key_twice_in_one_object_is_bad_input(files, run_inproc, tmp_path, where, old, new):
    text = json.dumps(make_report())
    assert text.count(old) == 1, where
    files("now.json", text.replace(old, new))
    before = inventory(tmp_path)
    assert_one_line(run_inproc("check", "now.json", "--baseline", "base.json"), 2, "now.json", "twice")
    # as a baseline too, and never accepted as one
    assert_one_line(run_inproc("check", "base.json", "--baseline", "now.json"), 2, "now.json", "twice")
    assert_one_line(run_inproc("check", "now.json", "--baseline", "base.json", "--update-baseline"), 2, "twice")
    assert inventory(tmp_path) == before


@pytest.mark.parametrize("field", ["max_abs_rel", "cosine", "max_abs"])
def test_an_integer_past_the_largest_float_is_bad_input_not_a_crash(files, run_inproc, field):
    now = make_report()
    now["results"][1]["outputs"][0][field] = 10**400  # 401 digits: JSON reads it, float() overflows
    files("now.json", now)
    assert_one_line(run_inproc("check", "now.json", "--baseline", "base.json"), 2, "now.json", f"outputs[0].{field}",
                    "about 401 digits")
    files("base.json", now)
    files("now.json", make_report())
    assert_one_line(run_inproc("check", "now.json", "--baseline", "base.json"), 2, "base.json", "about 401 digits")


@pytest.mark.parametrize("what, content", [
    ("a checkpoint", b"PK\x03\x04 a torch zip"),
    ("notes", b"my notes\n"),
    ("JSON of another kind", b'{"schema": "someone/1"}'),
])
def test_update_baseline_never_writes_over_a_file_that_is_not_a_report(files, run_inproc, tmp_path, what, content):
    """Directly, or through a symlink to it: the file stays, byte for byte (exit 2, one line)."""
    files("now.json", _report(cosine=0.9999999))
    (tmp_path / "model.pt").write_bytes(content)
    (tmp_path / "link.json").symlink_to(tmp_path / "model.pt")
    before = inventory(tmp_path)
    for baseline in ("model.pt", "link.json"):
        r = run_inproc("check", "now.json", "--baseline", baseline, "--update-baseline")
        assert_one_line(r, 2, "is not an edgeport report", "writes only over a report")
    assert inventory(tmp_path) == before
    # a new path, or a report (of an older schema too), is written
    assert run_inproc("check", "now.json", "--baseline", "new.json", "--update-baseline").code == 0
    (tmp_path / "old.json").write_text(json.dumps({"schema": "edgeport.parity/1", "results": []}))
    assert run_inproc("check", "now.json", "--baseline", "old.json", "--update-baseline").code == 0
    assert (tmp_path / "old.json").read_bytes() == (tmp_path / "new.json").read_bytes() == (tmp_path / "now.json").read_bytes()
