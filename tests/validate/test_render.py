"""The renderers only render: every number they show comes from the report dictionary."""

from __future__ import annotations

import json
import math

from edgeport.validate.report.render import divergence_lines, render_json, render_markdown, rows
from edgeport.validate.report.schema import SCHEMA, ResultRow


def _report(passed=True, divergence=None) -> dict:
    out = {"name": "p3", "max_abs": 1.5e-6, "mean_abs": 1e-7, "rmse": 2e-7, "cosine": 0.9999991, "snr_db": math.inf,
           "p99_abs": 1e-6, "ref_max_abs": 3.0, "max_abs_rel": 5e-7, "passed": passed, "reasons": [] if passed else ["cosine 0.9 < 0.99999"]}
    row = ResultRow("float32", "tflite", passed, ms_per_image=1.25, outputs=(out,),
                    detections={"matched": 9, "reference_boxes": 10, "extra": 1, "recall": 0.9}, divergence=divergence)
    return {"schema": SCHEMA, "created": "2026-11-30T00:00:00+00:00", "passed": passed,
            "model": {"arch": "pdet-n", "checkpoint": "m.pt", "layout": "state_dict"}, "inputs": {"shape": [3, 64, 64], "source": "s"},
            "reference": {"what": "the model"}, "versions": {"edgeport": "0.1.0"}, "artifacts": {"model_float32.tflite": {"bytes": 2048}},
            "results": [ResultRow("reference", "pytorch", True).to_dict(), row.to_dict()]}


def test_rows_take_the_worst_output_and_the_artifact_size():
    (ref, row) = rows(_report())
    assert ref["status"] == "PASS" and ref["max_abs"] is None
    assert row["max_abs"] == 1.5e-6 and row["cosine"] == 0.9999991 and row["boxes"] == "9/10 (+1)" and row["bytes"] == 2048


def test_markdown_shows_verdict_failures_and_numbers():
    md = render_markdown(_report(passed=False))
    assert "**FAILED**" in md and "| float32 | tflite | FAIL | 2 |" in md
    assert "- float32 on tflite, output p3: cosine 0.9 \\< 0.99999" in md


def test_json_writes_non_finite_numbers_as_strings():
    data = json.loads(render_json(_report()))
    assert data["results"][1]["outputs"][0]["snr_db"] == "inf"


def test_divergence_lines_only_for_rows_where_it_was_found():
    first = {"reference": "/neck/up/Resize", "reference_type": "Resize", "candidate": "t7", "candidate_type": "RESIZE_BILINEAR",
             "max_abs_rel": 0.22, "cosine": 0.97, "index": 3}
    found = {"found": True, "first": first, "criterion": "max_abs <= 0.0001 x max|ref|", "curve": []}
    assert divergence_lines(_report()) == []
    (line,) = divergence_lines(_report(passed=False, divergence=found))
    assert "first divergence at reference node `/neck/up/Resize` (Resize); closest RESIZE_BILINEAR `t7`" in line


def test_log_axes_are_labelled_in_plain_text():
    """Not mathtext: its parser takes 0.06 s to build, the report's two plots 0.15 s -> 0.09 s."""
    import re

    from edgeport.validate.report.figures import _figure, plain_log_ticks

    def labels(scale, ys):
        fig, ax = _figure((4, 3))
        ax.plot(range(len(ys)), ys)
        ax.set(yscale=scale)
        plain_log_ticks(ax.yaxis)
        fig.canvas.draw()
        major = [t.get_text() for t in ax.get_yticklabels()]
        minor = [t.get_text() for t in ax.yaxis.get_minorticklabels() if t.get_text()]
        assert all(re.fullmatch(r"0|1|10|100|1000|[1-9]e\u2212?\d+", t) for t in major + minor), (major, minor)
        return set(major), set(minor)

    # matplotlib's versions choose the axis's range slightly differently: what must be there, is
    major, minor = labels("log", [1e-7, 0.3])
    assert {"1e\u22127", "1e\u22124", "1e\u22121", "1"} <= major and not minor
    major, minor = labels("log", [2e-7, 6e-7])  # less than a decade: the minor ticks say where
    assert "1e\u22126" in major and {"2e\u22127", "4e\u22127"} <= minor
    major, minor = labels("symlog", [0, 10, 1e5])
    assert {"0", "1", "10", "1000", "1e4", "1e5"} <= major


def test_the_cross_check_in_one_sentence():
    from edgeport.validate.report.render import cross_check_line

    base = {"name": "litert-torch", "version": "0.10.0", "ran": True, "images": 2, "tolerance": 1e-5}
    agree = cross_check_line({**base, "agree": True, "max_abs_rel": 3e-7, "first_parting": None})
    assert "agrees" in agree and "3e-07 x max|output|" in agree
    first = {"op": "CONV_2D", "tensor": "head/conv", "other_op": "CONV_2D", "other_tensor": "x;52", "max_abs_rel": 0.02, "index": 3}
    parts = cross_check_line({**base, "agree": False, "max_abs_rel": 0.05, "first_parting": first})
    assert "PARTS" in parts and "first part at CONV_2D `head/conv`" in parts and "x;52" in parts
    nowhere = cross_check_line({**base, "agree": False, "max_abs_rel": 0.05, "first_parting": None})
    assert "no intermediate tensor pairs up" in nowhere
    skipped = cross_check_line({"name": "onnx2tf", "version": "1.28.8", "ran": False, "reason": "it wrote no float32 file: x"})
    assert skipped == "onnx2tf 1.28.8: not compared: it wrote no float32 file: x"
