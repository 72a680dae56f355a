"""The renderers only render: every number they show comes from the ``Report``."""

from __future__ import annotations

import json
import math

import pytest

from edgeport.validate.report.render import divergence_lines, render_html, render_json, render_markdown, rows, write_reports
from edgeport.validate.report.schema import SCHEMA, Report, ResultRow


def _report(passed=True, divergence=None) -> Report:
    return Report.from_dict(_data(passed, divergence))


def _data(passed=True, divergence=None) -> dict:
    """The report as its file holds it: the tests below change it there, then read it (``Report.from_dict``)."""
    out = {"name": "p3", "max_abs": 1.5e-6, "mean_abs": 1e-7, "rmse": 2e-7, "cosine": 0.9999991, "snr_db": math.inf,
           "p99_abs": 1e-6, "ref_max_abs": 3.0, "max_abs_rel": 5e-7, "passed": passed, "reasons": [] if passed else ["cosine 0.9 < 0.99999"],
           "tolerance": {"max_abs_rel": 1e-4, "min_cosine": 0.99999}}
    row = ResultRow("float32", "tflite", passed, ms_per_image=1.25, outputs=(out,),
                    detections={"matched": 9, "reference_boxes": 10, "extra": 1, "recall": 0.9}, divergence=divergence)
    return {"schema": SCHEMA, "created": "2026-11-30T00:00:00+00:00", "passed": passed,
            "model": {"arch": "pdet-n", "checkpoint": "m.pt", "layout": "state_dict", "weights_sha256": "ab" * 32, "outputs": ["p3"]},
            "inputs": {"shape": [3, 64, 64], "source": "s"},
            "reference": {"what": "the model"}, "versions": {"edgeport": "0.1.0"}, "artifacts": {"model_float32.tflite": {"bytes": 2048}},
            "results": [ResultRow("reference", "pytorch", True).to_dict(), row.to_dict()]}


def test_rows_take_the_worst_output_and_the_artifact_size():
    (ref, row) = rows(_report())
    assert ref["status"] == "PASS" and ref["max_abs"] is None
    assert row["max_abs"] == 1.5e-6 and row["cosine"] == 0.9999991 and row["boxes"] == "9/10 (+1)" and row["bytes"] == 2048


def test_markdown_shows_verdict_failures_and_numbers():
    md = render_markdown(_report(passed=False))
    assert "**FAILED: no file passes**" in md and "| float32 | tflite | FAIL | 2 |" in md
    assert "- float32/tflite: p3 cosine 0.9 \\< 0.99999" in md
    assert md.index("## Failures") < md.index("| variant |"), "the failure comes first"


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


def test_html_opens_with_the_failures_then_a_table_whose_numbers_do_not_wrap():
    page = render_html(_report(passed=False))
    failures, summary = page.index('id="failures"'), page.index('id="summary"')
    assert failures < summary, "the failure comes before the big table"
    assert "<strong>float32/tflite</strong><ul><li>p3 cosine 0.9 &lt; 0.99999</li></ul>" in page[failures:summary]
    assert "white-space: nowrap" in page and '<div class="scroll"><table id="summary">' in page
    assert 'id="failures"' not in render_html(_report()), "nothing failed: no Failures section"


def test_both_reports_explain_the_columns_ms_per_image_and_the_extra_boxes():
    page, md = render_html(_report()), render_markdown(_report())
    legend = page[page.index('id="legend"'):]
    assert "ms/img: median per image, warm: the second invoke of each image" in legend
    assert "boxes matched M/R (+E)" in legend and "+E: boxes the row finds that PyTorch does not" in legend
    assert "ms/img: median per image, warm: the second invoke of each image" in md
    assert "boxes matched M/R (+E)" in md and "| 9/10 (+1) |" in md


def _with_board_rows(same_run: bool) -> dict:
    report = _data()
    ref = dict(report["results"][1], runtime="tflite-ref", ms_per_image=7.5)
    board = dict(ref, runtime="board:default", verdict={"judge": "emulator", "runnable": True, "reasons": [], "differences": {},
                                                        "arena_bytes": None, "model_bytes": 1})
    if same_run:
        board["same_run_as"] = "tflite-ref"  # as run_parity writes it where the two rows share one run
    report["results"] += [ref, board]
    return report


def test_a_board_row_that_reuses_the_reference_kernels_run_says_so():
    shared = Report.from_dict(_with_board_rows(same_run=True))
    md, page = render_markdown(shared), render_html(shared)
    assert "| float32 | board:default \u2020 | PASS |" in md and "| float32 | tflite-ref | PASS |" in md
    assert "\u2020 same run as tflite-ref" in md and "\u2020 same run as tflite-ref" in page
    apart = Report.from_dict(_with_board_rows(same_run=False))
    assert "\u2020" not in render_markdown(apart) and "same run as" not in render_html(apart)
    said = _data()  # a report whose row names the run it shares is taken at its word
    said["results"][1]["same_run_as"] = "tflite-ref"
    assert "float32 | tflite \u2020 |" in render_markdown(Report.from_dict(said))


def test_a_row_judged_on_a_sample_says_so_in_every_rendering():
    import io

    from rich.console import Console

    from edgeport.validate.report.render import print_table

    data = _with_board_rows(same_run=False)
    data["results"][-2]["images"] = 2  # the reference kernels' row, a diagnostic (run.DIAGNOSTIC_IMAGES)
    data["inputs"].update(count=8, random=2)
    report = Report.from_dict(data)
    md, page = render_markdown(report), render_html(report)
    assert "| float32 | tflite-ref \u2021 | PASS |" in md and "| float32 | board:default | PASS |" in md
    said = "\u2021 judged on the first 2 of the 8 images only"
    assert said in md and said in page
    console = Console(file=io.StringIO(), width=240)
    print_table(report, console)
    assert "tflite-ref (first 2 images)" in console.file.getvalue()
    assert "\u2021" not in render_markdown(Report.from_dict(_with_board_rows(same_run=False)))
    # the legend names the kinds of sampled row the report has, and no other
    assert "reference kernels where no board row runs them" in md and "folded model" not in md
    data["results"][-2].pop("images")
    data["results"][0].update(variant="folded", runtime="pytorch", images=2)
    md = render_markdown(Report.from_dict(data))
    assert "the folded model and the ONNX graph" in md and "reference kernels where" not in md


@pytest.mark.parametrize("reference, candidate, says", [
    ([], [], "sample image: no detections, from PyTorch or from int8 / board:default"),
    ([{"box": [1, 1, 5, 5], "score": 0.9, "class": 0}], [], "sample image: PyTorch (green) vs int8 / board:default: no detections"),
    ([{"box": [1, 1, 5, 5], "score": 0.9, "class": 0}], [{"box": [1, 1, 5, 6], "score": 0.8, "class": 0}],
     "sample image: PyTorch (green) vs int8 / board:default (red)"),
])
def test_a_sample_image_without_boxes_says_no_detections(reference, candidate, says):
    import numpy as np

    from edgeport.validate.report.render import make_figures

    report = Report.from_dict({**_data(), "sample": {"row": "int8 / board:default", "image": 0, "reference": reference,
                                                     "candidate": candidate}})
    figures = make_figures(report, np.zeros((3, 8, 8), np.float32))
    (title,) = [name for name in figures if name.startswith("sample image")]
    assert title == says and figures[title].startswith(b"\x89PNG")
    assert f"<figcaption>{says}</figcaption>" in render_html(report, figures)


CONTROL = "\x1b[31m"
BELL = "\x07"


def test_control_bytes_from_files_reach_neither_report(tmp_path):
    """A tensor name or a reason holding ESC, BEL or a C1 control byte: report.md and report.html
    show each as its escape (as stdout does), never the byte."""
    import re

    report = _data(passed=False)
    out = report["results"][1]["outputs"][0]
    out["name"] = f"p3{CONTROL}red{BELL}\x9b"
    out["reasons"] = [f"cosine 0.9 < 0.99999 {CONTROL}{BELL}"]
    report["results"][1]["runtime"] = f"tflite{BELL}"
    report["results"][1]["reasons"] = [f"missed 3 of PyTorch's 10 boxes{CONTROL}"]
    report["model"]["arch"] = f"pdet{CONTROL}"
    report["stages"] = [{"name": "fold_bn", "seconds": 0.1, "changed": True, "summary": f"folded{BELL}"}]
    report["sample"] = {"row": f"float32 / tflite{BELL}", "image": 0, "reference": [], "candidate": []}
    import numpy as np

    write_reports(Report.from_dict(report), tmp_path, np.zeros((3, 8, 8), np.float32))
    unsafe = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # every C0 (but tab and newline) and C1 control
    for name in ("report.html", "report.md"):
        text = (tmp_path / name).read_text()
        assert "\x1b" not in text and "\x07" not in text and not unsafe.search(text), (name, unsafe.findall(text))
        assert "\\x1b" in text and "\\x07" in text, f"{name} shows the escapes"
    page = (tmp_path / "report.html").read_text()
    assert "p3\\x1b[31mred\\x07\\x9b cosine 0.9 &lt; 0.99999" in page


def test_each_repair_tried_is_said_with_what_it_did():
    from edgeport.validate.report.render import repair_lines

    from .test_report_sections import REPAIRS

    repaired, not_repaired = repair_lines(Report.from_dict({**_data(), "repairs": REPAIRS}))
    assert repaired.startswith("`int8` failed its gate; `model_int8_repaired.tflite` 2 of 3 ops in float (tail) (the float32 "
                               "file's RELU 1, RESHAPE 1) and PASSES every row: worst cosine 0.9000 -> "
                               "0.9999; it takes 1.20x the pure file's time on board:default (1.50 vs 1.25 ms/img). Tried: ")
    tried = repaired.split("Tried: ")[1].split("; ")
    assert tried[:3] == ["calibration ranges: no grid the float values show wrong",
                         "equalisation: 2 convolution pairs, converted again, worst cosine -, not kept",
                         "bias correction could not run (ValueError: x)"]
    assert tried[-2:] == ["a candidate with 1 ops in float that passed on TFLite's kernels failed on int8-repaired/tflite",
                          "float tail of the pure file (worst cosine): 1 ops -, 2 ops -, 3 ops pass"]
    assert not_repaired == f"`uint8` failed its gate and was not repaired ({REPAIRS['uint8']['why']}); tried: nothing"


def test_the_tables_title_shows_a_users_path_as_text_not_markup():
    """validate names the file given (``--tflite``): rich would read its ``[/]`` as a closing tag and raise."""
    import io

    from rich.console import Console

    from edgeport.validate.report.render import print_table

    data = _with_board_rows(same_run=False)
    data["artifacts"] = {"model_float32.tflite": {"bytes": 10, "path": "runs/a[/]b.tflite"}}
    console = Console(file=io.StringIO(), width=240)
    print_table(Report.from_dict(data), console)
    assert "a[/]b.tflite" in console.file.getvalue()
