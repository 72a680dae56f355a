"""``failures`` and ``gate``: the one list of what failed, and the terminal's one line, name each
failing check with its value and its threshold."""

from __future__ import annotations

import pytest

from edgeport.errors import ParityGateError
from edgeport.validate.parity.result import ResultRow, Verdict
from edgeport.validate.report.schema import Failure, Report, failures, gate
from edgeport.validate.report.sections import Board, BoardCheck


def _output(name: str, *reasons: str) -> dict:
    return {"name": name, "max_abs": 0.1, "passed": not reasons, "reasons": list(reasons)}


def _report(*rows: ResultRow, board: Board | None = None) -> Report:
    return Report((ResultRow("reference", "pytorch", True), *rows), board=board)


def test_a_row_that_failed_only_its_outputs_names_each_check_value_and_threshold():
    row = ResultRow("int8", "tflite", False, outputs=(_output("output0"), _output("output0[scores]", "cosine 0.971234 < 0.99")))
    report = _report(row)
    assert failures(report) == [Failure("int8/tflite", ("output0[scores] cosine 0.971234 < 0.99",))]
    with pytest.raises(ParityGateError) as err:
        gate("out", report)
    assert str(err.value) == "gate failed: int8/tflite: output0[scores] cosine 0.971234 < 0.99; artifacts and report in out/"


def test_every_kind_of_check_in_order_outputs_row_steps_repeat_verdict():
    steps = ({"against": "the reference kernels on this file", "max_steps": 4, "allowed": 1, "passed": False},
             {"against": "its int8 twin on the reference kernels", "max_steps": 0, "allowed": 1, "passed": True})
    row = ResultRow("uint8", "board:old", False, outputs=(_output("y", "max_abs 0.003 > 0.0001 x max|ref| (3)"),),
                    reasons=("missed 3 of PyTorch's 10 boxes (allowed 1)",), steps=steps,
                    repeat={"max_abs": 0.5, "passed": False})
    (f,) = failures(_report(row))
    assert f.reasons == ("y max_abs 0.003 > 0.0001 x max|ref| (3)", "missed 3 of PyTorch's 10 boxes (allowed 1)",
                         "computes 4 steps apart from the reference kernels on this file (allowed 1)",
                         "a second invoke of the same image answers differently (max |difference| 0.5)")
    # what the row's reasons already say (parity writes a failed step or repeat there too) is not said twice
    said = ResultRow("uint8", "board:old", False, steps=steps, repeat={"max_abs": 0.5, "passed": False},
                     reasons=("computes 4 quantisation steps apart from the reference kernels on this file (allowed 1)",
                              "a second invoke of the same image answers differently (max |difference| 0.5): state"))
    assert failures(_report(said))[0].reasons == said.reasons
    refused = ResultRow.not_runnable("int8", "board:old (TFLite 1.13.1)", Verdict("runtime", False, ("unknown op MEAN v2",)))
    assert failures(_report(refused)) == [Failure("int8/board:old (TFLite 1.13.1)", ("unknown op MEAN v2",))]


def test_the_gate_line_is_bounded_and_names_what_was_written():
    many = ResultRow("int8", "tflite", False, outputs=tuple(_output(f"o{i}", f"cosine 0.{i} < 0.99") for i in range(5)))
    rows = [ResultRow("float32", f"rt{i}", False, reasons=(f"reason {i}",)) for i in range(6)]
    board = Board(name="mcu", checks={"int8": BoardCheck(runnable=False, reasons=("needs 300,000 bytes of RAM",))})
    with pytest.raises(ParityGateError) as err:
        gate("out", _report(many, *rows, board=board), what="report")
    line = str(err.value)
    assert line.startswith("gate failed: int8/tflite: o0 cosine 0.0 < 0.99; o1 cosine 0.1 < 0.99; o2 cosine 0.2 < 0.99; "
                           "and 2 more | float32/rt0: reason 0 | ")
    assert line.endswith(" | float32/rt3: reason 3 | and 3 more; report in out/"), line
    assert "\n" not in line
    gate("out", _report(ResultRow("float32", "tflite", True)))  # a passing report: no error
