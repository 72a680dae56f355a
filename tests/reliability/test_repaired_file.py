"""A repaired file stands in for its failing quantised file only where its rows prove it: a report
whose repaired rows were edited -- a cosine under a tolerance the row lowered for itself, no outputs,
one image -- never passes the gate, and the files stay as they were.

The report is a real one: the repair pass on a file whose middle grid is too coarse writes a repaired file
with a float tail (``tests/convert/test_tflite_passes.py``), and the report is written as convert
writes it."""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import pytest

from edgeport.validate.report.assemble import build_report
from edgeport.validate.report.render import render_json

from ..convert.test_tflite_passes import COARSE, FINE, _long_chain, _repaired
from .conftest import assert_kept, assert_one_line, inventory


@pytest.fixture(scope="module")
def repaired(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("repair")
    fine = {n: FINE for n in "xabc"}
    _, result = _repaired(tmp, _long_chain("int8", {**fine, "d": COARSE, "y": COARSE}), _long_chain("float32", {}))
    after = result.value
    # timed as a board times them (a 4x4 model's own times are noise): the repaired file faster than float32
    ms = {"int8": 1.0, "int8-repaired": 1.2, "float32": 3.0}
    rows = tuple(replace(r, ms_per_image=ms.get(r.variant, r.ms_per_image)) for r in after.parity.rows)
    report = build_report(replace(after.parity, rows=rows), model={"arch": "relu", "weights_sha256": "0" * 64, "outputs": ["y"]},
                          board=after.gated.board, artifacts={}, repairs=after.repairs)
    assert report.passed and report.repaired == ["int8"]
    assert any(not r.passed for r in report.results if r.variant == "int8")
    return json.loads(render_json(report))


def _repaired_rows(report: dict) -> list[dict]:
    return [r for r in report["results"] if r["variant"] == "int8-repaired"]


def _cosine_under_its_own_tolerance(report: dict) -> None:
    for o in _repaired_rows(report)[0]["outputs"]:
        o.update(cosine=0.5, tolerance=dict(o["tolerance"], min_cosine=-1.0))


def _no_outputs(report: dict) -> None:
    for row in _repaired_rows(report):
        row["outputs"] = []


def _one_image(report: dict) -> None:
    for row in _repaired_rows(report):
        row["images"] = 1


@pytest.mark.parametrize("edit", [_cosine_under_its_own_tolerance, _no_outputs, _one_image])
def test_an_edited_repaired_file_stands_in_for_nothing(repaired, edit, tmp_path, run_inproc, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "baseline.json").write_text(json.dumps(repaired))
    assert run_inproc("check", "baseline.json", "--baseline", "baseline.json").code == 0  # the real report passes itself
    edited = copy.deepcopy(repaired)
    edit(edited)
    (tmp_path / "report.json").write_text(json.dumps(edited))
    before = inventory(tmp_path)
    r = run_inproc("check", "report.json", "--baseline", "baseline.json")
    assert r.code in (1, 2), r
    if r.code == 2:
        assert_one_line(r, 2, "int8-repaired", "does not stand in")
    else:
        assert "int8" in r.out + r.err
    assert_kept(before, inventory(tmp_path))


def test_an_edited_repaired_file_fails_the_gate_even_where_the_report_drops_its_claim(repaired, tmp_path, run_inproc, monkeypatch):
    """Without its ``repaired`` list the report cannot be refused as malformed; the gate still
    finds the pure file's failing rows, which the edited repaired file no longer stands in for."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "baseline.json").write_text(json.dumps(repaired))
    edited = copy.deepcopy(repaired)
    _cosine_under_its_own_tolerance(edited)
    del edited["repaired"]
    (tmp_path / "report.json").write_text(json.dumps(edited))
    r = run_inproc("check", "report.json", "--baseline", "baseline.json")
    assert r.code == 1 and "report: passed claimed, with int8/" in r.out + r.err, r
