"""`edgeport check`: NaN is a regression, bad tolerances and malformed files are bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import assert_one_line, inventory


def _report(cosine=0.99999, rel=1e-6, **extra) -> dict:
    out = {"name": "p3", "cosine": cosine, "max_abs_rel": rel, "max_abs": 1e-6, "mean_abs": 1e-7, "rmse": 1e-7,
           "p99_abs": 1e-6, "snr_db": "inf", **extra}
    return {"schema": "edgeport.parity/1", "passed": True, "model": {"outputs": ["p3"]}, "inputs": {"shape": [3, 64, 64]},
            "results": [{"variant": "float32", "runtime": "tflite", "passed": True, "outputs": [out],
                         "detections": {"recall": 1.0}, "map": None}]}


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
    files("now.json", json.dumps(_report()).replace('"cosine": 0.99999', '"cosine": NaN'))
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
    assert json.loads((tmp_path / "base.json").read_text())["results"][0]["outputs"][0]["cosine"] == 0.9999999
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base.json", "now.json"]
