"""The report's typed parts (``validate/report/sections.py``) write back exactly what they were given:
a committed baseline, and what the phases hand ``build_report`` (absent fields stay absent, nulls stay null)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgeport.jsonfile import written
from edgeport.validate.report.render import render_json
from edgeport.validate.report.schema import Report, read_sections

ROOT = Path(__file__).resolve().parents[2]


def _keys(value, at: str = "") -> set[str]:
    """Every key path in a JSON value (list items share their list's path)."""
    if isinstance(value, dict):
        return {k for key, v in value.items() for k in {f"{at}.{key}"} | _keys(v, f"{at}.{key}")}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v, f"{at}[]")}
    return set()


@pytest.mark.parametrize("name", ["parity-baseline.json", "parity-baseline-py312.json"])
def test_a_committed_baseline_is_written_back_as_it_is(name):
    data = json.loads((ROOT / "ci" / name).read_text())
    again = json.loads(render_json(Report.from_dict(data)))
    assert _keys(again) == _keys(data)
    assert {k: again[k] for k in data if k != "results"} == {k: data[k] for k in data if k != "results"}


# the repair pass's record (convert/passes/repair_pass.py): each entry of its log holds its own fields, and
# a float tail's ``worst_cosine`` is absent where no file was written, null where judging it broke
REPAIRS = {
    "int8": {"repaired": True, "passed": True, "file": "model_int8_repaired.tflite", "from": "model_int8.tflite", "ops": 3,
             "float_ops": 2, "reranged": 0, "equalised": None, "fed_at": ["a"], "float_op_names": {"RELU": 1, "RESHAPE": 1},
             "int8_normalised": None, "worst_cosine": 0.9999, "pure_worst_cosine": 0.9,
             "latency": {"runtime": "board:default", "ms_per_image": 1.5, "pure_ms_per_image": 1.25, "ratio": 1.2},
             "applied": [{"repair": "calibration ranges", "tensors": 0, "kept": False},
                         {"repair": "equalisation", "pairs": 2, "passed": False, "worst_cosine": None, "kept": False},
                         {"repair": "bias correction", "error": "ValueError: x", "kept": False},
                         {"repair": "judging a candidate on every row", "passed": False, "failed": ["int8-repaired/tflite"],
                          "float_ops": 1},
                         {"repair": "float tail", "ops": 3, "on": "the pure file", "tried": [
                             {"float_ops": 1, "passed": False, "worst_op": "RELU", "worst_tensor": "b"},
                             {"float_ops": 2, "passed": False, "worst_op": "RELU", "worst_tensor": "b", "worst_cosine": None},
                             {"float_ops": 3, "passed": True, "worst_op": "RESHAPE", "worst_tensor": "y", "worst_cosine": 0.9999}]}],
             "seconds": 1.5, "float_as": "tail"},
    "uint8": {"repaired": False, "why": "the float32 file fails or was not written: a float tail would carry its error"},
}
CONVERTER = {"name": "onnx2tf", "version": "1.28.8", "writer": "tensorflow", "notes": {"int8": "per-tensor"},
             "lowered": {}, "lowered_rules": {"uint8": {"hard_swish": 2}},
             "cross_check": {"name": "litert-torch", "version": "0.10.0", "ran": True, "images": 2, "max_abs_rel": 3e-7,
                             "per_output": [3e-7, 0.0], "tolerance": 1e-5, "agree": True, "first_parting": None}}
SAMPLE = {"row": "int8 / board:default", "image": 0, "reference": [{"box": [1.5, 2.0, 30.25, 40.0], "score": 0.9, "class": 0}],
          "candidate": []}
# validate --data: the board's runtime refused an image past parity's, so its row has no mAP
DATASET = {"source": "d/images/val", "images": 40, "seconds": 3.5, "refused": {"board:b (TFLite 1.13.1)": "refused: x"},
           "rows": {"tflite": {"map50": 0.5, "map50_95": 0.25, "classes": {"0": {"ap50": 0.5, "ap50_95": 0.25, "instances": 9}}}}}


@pytest.mark.parametrize("name, given", [
    ("repairs", REPAIRS), ("converter", CONVERTER), ("sample", SAMPLE),
    ("converter", {"name": "onnx2tf", "cross_check": {"name": "litert-torch", "version": "0.10.0", "ran": False,
                                                       "reason": "it wrote no float32 file: x"}}),
    ("int8_normalised", [[[1, 0, 4, 0.25], [1, 4, 5, 1.0]], []]),
    ("dataset", DATASET),
])
def test_what_a_phase_hands_the_report_is_written_as_it_was_given(name, given):
    assert written(read_sections({name: given})[name]) == given


def test_the_board_gates_verdict_is_the_reports_board_check():
    """The board gate's verdict on a file (``board_verdict``) is the record the report holds and reads back."""
    from edgeport.validate.board.profiles import load_board
    from edgeport.validate.board.verdict import BoardCheck, BoardOp
    from edgeport.validate.report.sections import Board

    check = BoardCheck(runnable=False, reasons=("MEAN v2 needs runtime 1.14.0",), min_runtime_version="1.14.0", size_bytes=2048,
                       ops=(BoardOp(name="MEAN", version=2, count=1, notes=(), needs=None, dtype="int8"),), activation_dtypes=("int8",))
    board = Board.of(load_board("tflite-1.13"), {"int8": check})
    read = read_sections({"board": board.to_dict()})["board"]
    assert read == board and not read.runnable and read.checks["int8"].ops[0].name == "MEAN"
    assert board.to_dict()["checks"]["int8"] == {"runnable": False, "reasons": ["MEAN v2 needs runtime 1.14.0"],
                                                 "min_runtime_version": "1.14.0", "size_bytes": 2048,
                                                 "ops": [{"name": "MEAN", "version": 2, "count": 1, "notes": [], "needs": None,
                                                          "dtype": "int8"}], "activation_dtypes": ["int8"]}



def test_a_runtime_that_refused_an_image_of_the_dataset_fails_the_report():
    data = json.loads((ROOT / "ci" / "parity-baseline.json").read_text())
    assert Report.from_dict(data).passed
    assert not Report.from_dict({**data, "dataset": DATASET}).passed
    assert Report.from_dict({**data, "dataset": {**DATASET, "refused": {}}}).passed


def test_a_refused_image_is_named_as_the_failure_and_the_verdict_says_so_and_the_gate_refuses_a_claimed_pass():
    from edgeport.validate.gate.check import CheckTolerance, compare_reports
    from edgeport.validate.report.render import verdict
    from edgeport.validate.report.schema import failures

    data = json.loads((ROOT / "ci" / "parity-baseline.json").read_text())
    report = Report.from_dict({**data, "dataset": DATASET})
    assert [str(f) for f in failures(report)] == ["dataset board:b (TFLite 1.13.1): refused refused: x"]
    assert verdict(report).startswith("FAILED: ") and verdict(report).endswith(
        "passes parity, but board:b (TFLite 1.13.1) refused images of the dataset")
    claimed = {**data, "dataset": DATASET, "passed": True}
    assert any(r.metric == "passed" for r in compare_reports(claimed, data, CheckTolerance()))
