"""The CI gate's comparator: each regression named with baseline and now; malformed files refused."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest

from edgeport.errors import BadInputError
from edgeport.validate.gate.check import CheckTolerance, check_written, compare_reports, load_report
from edgeport.validate.parity.result import ResultRow, Verdict
from edgeport.validate.report.render import json_text, render_json
from edgeport.validate.report.schema import Report

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


def test_a_row_judged_on_fewer_images_than_the_baselines_proves_less():
    """A diagnostic row on its sample (``ResultRow.images``) is held to a baseline judged on as many or fewer."""
    sampled = make_report()
    sampled["results"][-1]["images"] = 2
    found = [str(r) for r in compare_reports(sampled, make_report(), CheckTolerance())]
    assert found == ["float32/tflite: images judged all -> 2"]
    assert compare_reports(sampled, sampled, CheckTolerance()) == []
    assert compare_reports(make_report(), sampled, CheckTolerance()) == [], "more images than the baseline's is no regression"
    fewer = copy.deepcopy(sampled)
    fewer["results"][-1]["images"] = 1
    assert [r.metric for r in compare_reports(fewer, sampled, CheckTolerance())] == ["images judged"]


def test_a_row_that_fails_its_own_tolerance_fails_whatever_it_says():
    now = make_report(cos=0.9)  # says passed, but cosine 0.9 < its own 0.99999
    regressions = [str(r) for r in compare_reports(now, make_report(), CheckTolerance())]
    assert "float32/tflite: says passed, but output p3 fails its tolerance (cosine 0.9 < 0.99999)" in regressions, regressions
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
        Report.from_dict({"schema": "other/1"}, "baseline")
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


# -- every verdict a row carries is read: its reasons, repeat, verdict and steps --------------------

BOARD = "int8/board:tflite-1.13"
SAME_FILE = "the reference kernels on this file"


def board_report(*, steps_allowed=None, max_steps=0) -> dict:
    """``make_report`` with a quantised board row as edgeport writes one: the emulator's verdict,
    each image invoked twice, no reasons, and its steps against the reference kernels on the same
    file (reported, not gated, as board rows are: ``allowed`` null)."""
    report = make_report()
    row = copy.deepcopy(report["results"][1])
    row.update(variant="int8", runtime="board:tflite-1.13", reasons=[], repeat={"max_abs": 0.0, "passed": True},
               verdict={"judge": "emulator", "runnable": True, "reasons": [], "differences": {}, "arena_bytes": None,
                        "model_bytes": 367624},
               steps=[{"against": SAME_FILE, "max_steps": max_steps, "allowed": steps_allowed, "passed": True}])
    report["results"].append(row)
    return report


def _board_row(report: dict) -> dict:
    return report["results"][2]


def _without_steps(report: dict) -> dict:
    for row in report["results"]:
        row.pop("steps", None)
    return report


def _set(path: tuple, value):
    """A mutation of the board row: ``value`` at ``path`` (keys and indices) inside it."""
    def mutate(report):
        target = _board_row(report)
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value
        return report
    return mutate


# (mutation of the board row, exit code, the line that names it: on stdout for 1, the error for 2)
MUTATIONS = {
    "steps failing, row says passed": (_set(("steps", 0), {"against": SAME_FILE, "max_steps": 50, "allowed": 1, "passed": False}),
                                       1, f"{BOARD}: says passed, but steps against {SAME_FILE} 50 > allowed 1"),
    "steps 'nan'": (_set(("steps",), "nan"), 2, "results[2].steps is missing or not a list"),
    "steps removed from every row": (_without_steps, 1, f"{BOARD}: steps against {SAME_FILE} 0 -> missing"),
    "max_steps raised, not gated": (_set(("steps", 0, "max_steps"), 50), 1, f"{BOARD}: steps against {SAME_FILE} 0 -> 50"),
    "max_steps null": (_set(("steps", 0, "max_steps"), None), 1, f"{BOARD}: steps against {SAME_FILE} 0 -> missing"),
    "verdict not runnable": (_set(("verdict", "runnable"), False), 1,
                             f"{BOARD}: says passed, but the emulator says the file does not run (no reason given)"),
    "verdict gone": (_set(("verdict",), None), 1, f"{BOARD}: verdict runnable -> missing"),
    "repeat differs": (_set(("repeat",), {"max_abs": 0.5, "passed": False}), 1,
                       f"{BOARD}: says passed, but a second invoke answers differently (repeat max_abs 0.5)"),
    "repeat gone": (_set(("repeat",), None), 1, f"{BOARD}: repeat (each image invoked twice) present -> missing"),
    "reasons": (_set(("reasons",), ["missed 9 of PyTorch's 36 boxes (allowed 2)"]), 1,
                f"{BOARD}: says passed, but its reasons say: missed 9 of PyTorch's 36 boxes (allowed 2)"),
    "output reasons": (_set(("outputs", 0, "reasons"), ["channel 3 collapsed to the constant 0"]), 1,
                       f"{BOARD}: says passed, but output p3: channel 3 collapsed to the constant 0"),
    "cosine a rounding past 1": (_set(("outputs", 0, "cosine"), 1.0000000000000002), 2,
                                 "results[2].outputs[0].cosine is 1.0000000000000002, outside [-1.0, 1.0]"),
    "401-digit metric": (_set(("outputs", 0, "max_abs"), 10**400), 2,
                         "results[2].outputs[0].max_abs is an integer of about 401 digits, past the largest float"),
}


@pytest.mark.parametrize("name", MUTATIONS)
def test_every_check_a_row_carries_is_read(tmp_path, run_inproc, name):
    mutate, code, line = MUTATIONS[name]
    base, now = tmp_path / "base.json", tmp_path / "now.json"
    base.write_text(json.dumps(board_report()))
    now.write_text(json.dumps(mutate(board_report())))
    r = run_inproc("check", str(now), "--baseline", str(base))
    assert r.code == code, f"{name}: exit {r.code}, expected {code}\n{r.out}{r.err}"
    lines = r.out.splitlines() if code == 1 else [r.err.strip().splitlines()[-1]]
    assert any(line in x for x in lines), f"{name}: expected the line {line!r}; got:\n{r.out}{r.err}"


def test_a_key_twice_in_a_row_is_bad_input(tmp_path, run_inproc):
    now = tmp_path / "now.json"
    text = json.dumps(board_report())
    # the failing value first: a reader that keeps the last sees a pass
    assert text.count('"runtime": "board:tflite-1.13", "passed": true') == 1
    now.write_text(text.replace('"runtime": "board:tflite-1.13", "passed": true',
                                '"runtime": "board:tflite-1.13", "passed": false, "passed": true'))
    (tmp_path / "base.json").write_text(json.dumps(board_report()))
    r = run_inproc("check", str(now), "--baseline", str(tmp_path / "base.json"))
    assert r.code == 2 and "holds the key 'passed' twice" in r.err, r.out + r.err


@pytest.mark.parametrize("entry, error", [
    ({"max_steps": "nan"}, "max_steps is 'nan', not a non-negative integer or null"),
    ({"max_steps": float("nan")}, "max_steps is nan, not a non-negative integer or null"),
    ({"max_steps": 1.0}, "max_steps is 1.0, not"),
    ({"max_steps": True}, "max_steps is True, not"),
    ({"max_steps": -1}, "max_steps is -1, not"),
    ({"allowed": 0.5}, "allowed is 0.5, not"),
    ({"passed": "yes"}, "passed is missing or not a bool"),
    ({"against": None}, "against is missing or not a str"),
    ({"max_steps": 50, "allowed": 1}, "says passed with max_steps 50 and allowed 1"),
    ({"max_steps": None, "allowed": 1}, "says passed with no run to check against and allowed 1"),
])
def test_a_steps_entry_that_is_not_a_check_is_malformed(entry, error):
    report = board_report()
    _board_row(report)["steps"][0].update(entry)
    with pytest.raises(BadInputError, match="malformed") as exc:
        Report.from_dict(report)
    assert error in str(exc.value)


@pytest.mark.parametrize("mutate, error", [
    (lambda row: row["steps"].append(dict(row["steps"][0])), f"has two entries against '{SAME_FILE}'"),
    (lambda row: row["steps"].append(7), "results[2].steps[1] is missing or not a dict"),
    (lambda row: row["steps"][0].pop("allowed"), "results[2].steps[0].allowed is missing"),
    (lambda row: row.update(repeat={"max_abs": 0.0, "passed": False}), "says passed False with max_abs 0.0"),
    (lambda row: row.update(repeat={"max_abs": 1e-3, "passed": True}), "says passed True with max_abs 0.001"),
    (lambda row: row.update(repeat={"max_abs": -1.0, "passed": False}), "repeat.max_abs is -1.0, outside [0.0, inf]"),
    (lambda row: row["verdict"].update(judge="oracle"), "judge is 'oracle', not one of emulator, runtime, converter"),
    (lambda row: row["verdict"].update(runnable="yes"), "verdict.runnable is missing or not a bool"),
    (lambda row: row["verdict"].update(reasons="none"), "verdict.reasons is missing or not a list"),
    (lambda row: row.update(reasons=[1]), "results[2].reasons[0] is missing or not a str"),
    (lambda row: row.update(reasons=None), "results[2].reasons is missing or not a list"),
    (lambda row: row.update(images=2.0), "results[2].images is 2.0, not a non-negative integer or null"),
    (lambda row: row.update(images=-1), "results[2].images is -1, not a non-negative integer or null"),
    (lambda row: row.update(images=0), "results[2].images is 0: a row is judged on at least one image"),
])
def test_row_checks_that_are_not_checks_are_malformed(mutate, error):
    report = board_report()
    mutate(_board_row(report))
    with pytest.raises(BadInputError, match="malformed") as exc:
        Report.from_dict(report)
    assert error in str(exc.value)


def test_the_malformed_message_shows_the_value_exactly_and_who_wrote_it():
    report = make_report(cos=1.0000000000000002)
    with pytest.raises(BadInputError) as exc:
        Report.from_dict(report, "report 'now.json'")
    msg = str(exc.value)
    assert "cosine is 1.0000000000000002, outside [-1.0, 1.0]" in msg
    assert "edited, or written by another version" in msg and "regenerate" not in msg


def test_steps_may_not_worsen_gated_or_not_beyond_a_rounding():
    def steps(n, allowed=None):
        report = board_report(max_steps=n, steps_allowed=allowed)
        _board_row(report)["steps"][0]["passed"] = allowed is None or n <= allowed
        return report

    assert compare_reports(steps(1), steps(0), CheckTolerance()) == []  # a rounding apart: not worse
    assert compare_reports(steps(0), steps(3), CheckTolerance()) == []  # better
    assert [str(r) for r in compare_reports(steps(3), steps(2), CheckTolerance())] == [f"{BOARD}: steps against {SAME_FILE} 2 -> 3"]
    # gated and failing: the row fails, so the pass is lost, and the steps grew
    worse = [str(r) for r in compare_reports(steps(2, allowed=1), steps(1, allowed=1), CheckTolerance())]
    assert f"{BOARD}: steps against {SAME_FILE} 1 -> 2" in worse and f"{BOARD}: says passed, but steps against {SAME_FILE} 2 > allowed 1" in worse


def test_a_check_the_baseline_never_ran_may_come_or_stay_away():
    base = board_report()
    _board_row(base)["steps"][0].update(max_steps=None, allowed=None)  # that run did not run: nothing to compare
    assert compare_reports(board_report(), base, CheckTolerance()) == []
    assert compare_reports(base, base, CheckTolerance()) == []
    now = board_report()
    _board_row(now)["steps"] = []
    assert [str(r) for r in compare_reports(now, base, CheckTolerance())] == [f"{BOARD}: steps against {SAME_FILE} present -> missing"]
    # reports written before these checks existed carry none of them, and are still read
    old = board_report()
    for key in ("steps", "reasons", "repeat", "verdict"):
        _board_row(old).pop(key)
    assert compare_reports(old, old, CheckTolerance()) == []


def test_a_report_that_fails_honestly_passes_against_itself():
    """A row failing in the report and in its baseline alike is not a regression (``check R
    --baseline R`` passes for every report edgeport writes), however many of its checks failed."""
    report = board_report()
    report["passed"] = False
    row = _board_row(report)
    row.update(passed=False, reasons=["computes 50 quantisation steps apart from the reference kernels on this file (allowed 1)",
                                      "a second invoke of the same image answers differently (max |difference| 0.5)"],
               repeat={"max_abs": 0.5, "passed": False})
    row["steps"] = [{"against": SAME_FILE, "max_steps": 50, "allowed": 1, "passed": False, "first_parting": None}]
    report["results"].append(ResultRow.not_runnable("uint8", "board:tflite-1.13", Verdict("emulator", False, ("no UINT8 ADD",))).to_dict())
    assert compare_reports(report, copy.deepcopy(report), CheckTolerance()) == []


def test_what_edgeport_writes_is_read_as_written():
    """A row as ``ResultRow.to_dict`` writes it (the parity run's reason popped from each step check)
    passes the gate's reader and earns its pass; unknown fields in a section are allowed."""
    out = dict(make_report()["results"][1]["outputs"][0], needed={"max_abs_rel": 1e-6, "min_cosine": 1.0000000000000002},
               reasons=[])
    row = ResultRow("uint8", "tflite-ref", True, ms_per_image=1.5, outputs=(out,),
                    detections={"reference_boxes": 36, "matched": 36, "missed": 0, "extra": 0, "recall": 1.0, "mean_iou": 0.99,
                                "max_score_delta": 0.01, "mean_score_delta": 0.001, "stable_boxes": 34, "missed_stable": 0,
                                "extra_beyond": 0, "noise_floor": 2, "noise_bound": "half a step"},
                    verdict=None, repeat={"max_abs": 0.0, "passed": True},
                    steps=({"against": "its int8 twin on the reference kernels", "max_steps": 1, "allowed": 1, "passed": True},
                           {"against": "a run that was refused", "max_steps": None, "allowed": None, "passed": True}))
    report = make_report()
    report["results"].append(json.loads(json_text(row.to_dict())))
    report["tolerances"] = {"uint8": {"max_abs_rel": None, "min_cosine": 0.99, "boxes": {"fraction": 0.4, "slack": 2}}}
    read = Report.from_dict(report)
    # read back by the types that wrote it: the row is the row written, and written again it is the same JSON
    assert read.results[-1].to_dict()["steps"] == [dict(c) for c in row.steps] and read.results[-1].verdict is None
    assert json.loads(render_json(read))["results"][-1] == report["results"][-1]
    assert read.results[-1].key == "uint8/tflite-ref" and read.results[-1].passed and read.failures(read.results[-1]) == []
    assert compare_reports(report, report, CheckTolerance()) == []


@pytest.mark.parametrize("name", [p.name for p in sorted((Path(__file__).resolve().parents[2] / "ci").glob("parity-baseline*.json"))])
def test_the_committed_baselines_pass_against_themselves(name, run_inproc):
    path = Path(__file__).resolve().parents[2] / "ci" / name
    r = run_inproc("check", str(path), "--baseline", str(path))
    assert r.code == 0, r.out + r.err


# -- boxes above the noise floor ---------------------------------------------------------------------

def _judged(missed_stable=0, extra_beyond=0, stable=30, recall=1.0, boxes=(0.05, 1)) -> dict:
    """A report whose float32 row carries the counts above the noise floor, and the report's box tolerance."""
    r = make_report(recall=recall)
    r["results"][1]["detections"].update(stable_boxes=stable, missed_stable=missed_stable, extra_beyond=extra_beyond,
                                         noise_floor=6)
    r["tolerances"] = {"float32": {"max_abs_rel": 1e-4, "min_cosine": 0.99999,
                                   "boxes": {"fraction": boxes[0], "slack": boxes[1]}}}
    return r


def test_boxes_only_nms_moved_are_no_regression_once_judged_above_the_floor():
    """Raw recall against all of PyTorch's boxes falls by a tenth (a tie broken the other way by
    another converter release); the stable boxes are all found: no regression."""
    assert compare_reports(_judged(recall=0.9), _judged(), CheckTolerance()) == []


@pytest.mark.parametrize("now, what", [
    (_judged(missed_stable=1, stable=30), "stable boxes missed (share of PyTorch's stable boxes)"),  # 0 -> 1/30
    (_judged(extra_beyond=1, stable=30), "boxes beyond the noise floor (share of PyTorch's stable boxes)"),
])
def test_boxes_lost_above_the_floor_are_a_regression(now, what):
    regressions = compare_reports(now, _judged(), CheckTolerance())
    assert [r.metric for r in regressions] == [what], regressions


def test_counts_above_the_floor_missing_where_the_baseline_has_them_are_a_regression():
    now = make_report()
    regressions = compare_reports(now, _judged(), CheckTolerance())
    assert any("noise floor" in r.metric and r.now == "missing" for r in regressions), regressions


def test_a_row_over_its_own_box_tolerance_never_passes_whatever_it_says():
    """2 of 30 stable boxes missed where the report allows max(1, 5 % of 30) = 1: the row says passed
    and its reasons were removed; the gate counts for itself."""
    bad = _judged(missed_stable=2)
    read, ok = Report.from_dict(bad), Report.from_dict(_judged(missed_stable=1))
    assert read.results[1].passed and read.failures(read.results[1]) == ["detections missed_stable 2 > allowed 1 (of 30 stable boxes)"]
    assert ok.failures(ok.results[1]) == []
    regressions = compare_reports(bad, bad, CheckTolerance())
    assert any("missed_stable 2 > allowed 1" in str(r) for r in regressions), regressions


def test_counts_above_the_floor_without_the_reports_box_tolerance_are_malformed():
    """A row that counts boxes above the noise floor is judged by the report's own box tolerance: a
    report without one could not say whether the row earned its pass (fail closed, exit 2)."""
    r = _judged()
    del r["tolerances"]
    with pytest.raises(BadInputError, match="tolerances.float32.boxes is missing"):
        Report.from_dict(r)


@pytest.mark.parametrize("value", ['"nan"', '"inf"', "1e400"])
def test_a_count_of_boxes_that_is_no_number_is_malformed_not_an_internal_error(value, run_inproc, tmp_path):
    """A NaN or infinite count once reached int() in the gate (exit 3)."""
    r = _judged()
    r["results"][1]["detections"]["stable_boxes"] = "COUNT"
    (tmp_path / "r.json").write_text(json.dumps(r).replace('"COUNT"', value))
    (tmp_path / "b.json").write_text(json.dumps(_judged()))
    res = run_inproc("check", str(tmp_path / "r.json"), "--baseline", str(tmp_path / "b.json"))
    assert res.code == 2 and "detections.stable_boxes" in res.err and "a count of boxes is a finite number" in res.err, res.err


def test_a_failing_row_with_nan_is_no_regression_of_itself():
    """A float32 file that outputs NaN: its row fails (exit 1 for convert), and its report -- NaN in a
    row that says it failed -- is still a report check reads and passes against itself."""
    r = make_report(passed=False)
    r["results"][1]["outputs"][0].update(cosine="nan", max_abs="inf", max_abs_rel="inf")
    assert compare_reports(r, r, CheckTolerance()) == []
    passed = make_report()
    regressions = compare_reports(r, passed, CheckTolerance())
    assert regressions and any(x.metric == "passed" for x in regressions), regressions


@pytest.mark.parametrize("fields, error", [
    ({"stages": 5}, "stages is missing or not a list"),
    ({"stages": True}, "stages is missing or not a list"),
    ({"stages": [{"name": "fold_bn", "seconds": "fast"}]}, "stages[0].seconds is 'fast', not a number"),
    ({"board": {"checks": {}, "dtypes": 5}}, "board.dtypes is missing or not a list"),
    ({"board": {"checks": {}, "dtypes": [1]}}, "board.dtypes[0] is missing or not a str"),
    ({"board": {"checks": {"int8": {"runnable": True, "size_bytes": "1 MB"}}}}, "board.checks.int8.size_bytes is missing or not an int"),
    ({"board": {"checks": {"int8": {"reasons": []}}}}, "board.checks.int8.runnable is missing"),
    ({"board_runtime": {"real": "yes"}}, "board_runtime.real is missing or not a bool"),
    ({"artifacts": {"model.onnx": {"bytes": 1.5}}}, "artifacts.model.onnx.bytes is missing or not an int"),
    ({"versions": {"torch": 2}}, "versions.torch is missing or not a str"),
    ({"sample": {"row": "int8 / tflite", "reference": [{"box": [0, 0, 1, 1], "score": 0.9, "class": "person"}]}},
     "sample.reference[0].class is missing or not an int"),
    ({"upsample": {"sites": [{"where": "neck.up", "scale": 2}]}}, "upsample.sites[0].scale is missing or not a list"),
    ({"int8_normalised": [[[1, 0, 4, "x"]]]}, "int8_normalised[0][0][3] is 'x', not a number"),
    ({"converter": {"name": "onnx2tf", "notes": {"int8": ["per-tensor"]}}}, "converter.notes.int8 is missing or not a str"),
    ({"converter": {"name": "onnx2tf", "cross_check": {"ran": True, "first_parting": {"index": 1.5}}}},
     "converter.cross_check.first_parting.index is missing or not an int"),
    ({"repairs": {"int8": {"repaired": True, "latency": {"ratio": "1.2x"}}}}, "repairs.int8.latency.ratio is '1.2x', not a number"),
    ({"repairs": {"int8": {"repaired": False, "applied": [{"repair": "float tail", "tried": [{"passed": 1}]}]}}},
     "repairs.int8.applied[0].tried[0].passed is missing or not a bool"),
    ({"model": {"arch": 7, "weights_sha256": "ab" * 32, "outputs": ["p3"]}}, "model.arch is missing or not a str"),
    ({"inputs": {"shape": [3, "64", 64]}}, "inputs.shape[1] is missing or not an int"),
])
def test_fields_the_gate_does_not_judge_are_still_read_as_their_type(fields, error):
    """A part of the report of the wrong type -- however deep -- is bad input in one line naming the field, not a crash."""
    with pytest.raises(BadInputError, match="malformed") as exc:
        Report.from_dict({**make_report(), **fields})
    assert error in str(exc.value) and "\n" not in str(exc.value)


def test_a_report_the_gate_would_refuse_is_never_written():
    """Every report edgeport writes passes ``check R --baseline R``: before a command writes one
    (``check_written``), it is read back as the gate reads it and checked against itself. One that
    claims a pass its own output does not earn (a bug, never the user's input) is an internal error."""
    good = Report.from_dict(make_report())
    check_written(dataclasses.replace(good, claimed=None))
    with pytest.raises(RuntimeError, match="regression of itself: float32/tflite"):
        check_written(Report.from_dict(make_report(cos=0.5)))  # under its own min_cosine, while the row says passed
    row = good.results[1]
    over = dataclasses.replace(row, outputs=(dict(row.outputs[0], cosine=1.0000000000000002),))  # an unclamped cosine
    with pytest.raises(RuntimeError, match="outside"):
        check_written(dataclasses.replace(good, results=(good.results[0], over)))


def test_an_older_reports_null_tolerances_and_a_report_built_in_memory_are_read():
    assert compare_reports({**make_report(), "tolerances": None}, make_report(), CheckTolerance()) == []
    read = Report.from_dict(make_report())
    built = dataclasses.replace(read, claimed=None)  # as the pipeline holds it: what it says is what it decided
    assert built.says_passed and compare_reports(built, read, CheckTolerance()) == []
    failing = Report.from_dict(make_report(cos=0.5, passed=False))
    assert compare_reports(dataclasses.replace(failing, claimed=None), read, CheckTolerance())


def _repaired_report(repaired_cos: float, repaired_says: bool = True) -> dict:
    """float32 passes; int8 fails (cosine 0.95); int8-repaired at ``repaired_cos``, saying it passed
    (``repaired_says``); the report says it passed where the repaired file stands in."""
    report = make_report()
    q_tol = {"max_abs_rel": None, "min_cosine": 0.99}

    def row(variant: str, cos: float, passed: bool) -> dict:
        out = dict(report["results"][1]["outputs"][0], cosine=cos, tolerance=q_tol, passed=cos >= 0.99)
        return {"variant": variant, "runtime": "tflite", "passed": passed, "outputs": [out]}

    report["results"] += [row("int8", 0.95, False), row("int8-repaired", repaired_cos, repaired_says)]
    report["repairs"] = {"int8": {"repaired": True, "passed": repaired_says, "ops": 10, "float_ops": 2}}  # (no row timed)
    report["passed"] = Report.from_dict({**report, "passed": True}).passed
    return report


def test_a_repaired_twin_that_passes_stands_in_for_its_failing_file():
    report = _repaired_report(0.999)
    read = Report.from_dict(report)
    assert report["passed"] and read.repaired == ["int8"] and read.says_passed
    assert compare_reports(report, copy.deepcopy(report), CheckTolerance()) == []
    # a repaired file that fails too stands in for nothing: the run failed
    failing = _repaired_report(0.95, repaired_says=False)
    assert not failing["passed"] and Report.from_dict(failing).repaired == []


def test_a_repaired_twin_that_claims_a_pass_its_numbers_refuse_stands_in_for_nothing():
    report = _repaired_report(0.95)  # says it passed, at cosine 0.95 < 0.99
    report["passed"] = True
    found = [str(r) for r in compare_reports(report, make_report(), CheckTolerance())]
    assert any("int8-repaired/tflite: says passed" in f for f in found)
    assert any(f.startswith("report: passed") and "int8/tflite" in f for f in found)


def test_only_a_quantised_file_with_a_twin_on_every_runtime_is_stood_in_for():
    # a float32 "repaired" row stands in for nothing: float32 is not repaired
    report = make_report()
    report["results"][1]["passed"] = False
    report["results"].append(dict(copy.deepcopy(report["results"][1]), variant="float32-repaired", passed=True))
    assert Report.from_dict({**report, "passed": False}).repaired == []
    # a repaired file judged on fewer runtimes than its pure file stands in for nothing
    partial = _repaired_report(0.999)
    partial["results"].append(dict(copy.deepcopy(partial["results"][2]), runtime="board:default"))
    read = Report.from_dict({**partial, "passed": False})
    assert read.repaired == [] and not read.passed


def test_each_output_is_held_to_the_stricter_of_its_own_tolerance_and_the_reports():
    """A row that lowers its own tolerance is still held to the report's for its variant, and each
    channel entry to the report's per-channel one; a stricter own tolerance holds too."""
    report = make_report(cos=0.9995)
    report["tolerances"] = {"float32": {"max_abs_rel": 1e-4, "min_cosine": 0.9999}, "channels": {"min_cosine": 0.98}}
    report["results"][1]["outputs"][0]["tolerance"] = {"max_abs_rel": None, "min_cosine": -1.0}
    read = Report.from_dict({**report, "passed": True})
    assert read.failures(read.results[1]) == ["output p3 fails its tolerance (cosine 0.9995 < 0.9999)"] and not read.passed
    channels = dict(report["results"][1]["outputs"][0], name="p3[channels]", cosine=0.985)
    report["results"][1]["outputs"] = [channels]
    read = Report.from_dict(report)
    assert read.failures(read.results[1]) == [] and read.passed  # 0.985 >= the channels' 0.98, not the variant's 0.9999
    report["results"][1]["outputs"][0]["tolerance"] = {"max_abs_rel": None, "min_cosine": 0.99}  # its own, stricter
    read = Report.from_dict(report)
    assert read.failures(read.results[1]) == ["output p3[channels] fails its tolerance (cosine 0.985 < 0.99)"]


@pytest.mark.parametrize("tolerance, error", [
    ({"min_cosine": 1.5}, "tolerances.float32.min_cosine is 1.5, outside"),
    ({"min_cosine": "nan"}, "tolerances.float32.min_cosine is 'nan': not a finite number"),
    ({"max_abs_rel": -1}, "tolerances.float32.max_abs_rel is -1.0, outside"),
    ({"max_abs_rel": "x"}, "tolerances.float32.max_abs_rel is 'x', not a number"),
])
def test_a_tolerance_that_is_no_number_in_range_is_malformed(tolerance, error):
    with pytest.raises(BadInputError, match="malformed") as exc:
        Report.from_dict({**make_report(), "tolerances": {"float32": tolerance}})
    assert error in str(exc.value)


def test_a_report_whose_tolerances_are_laxer_than_the_baselines_regresses():
    base = {**make_report(), "tolerances": {"float32": {"max_abs_rel": 1e-4, "min_cosine": 0.99999}}}
    lax = {**make_report(), "tolerances": {"float32": {"max_abs_rel": 1e-2, "min_cosine": None}}}
    found = {str(r) for r in compare_reports(lax, base, CheckTolerance())}
    assert found == {"tolerances.float32: max_abs_rel 0.0001 -> 0.01", "tolerances.float32: min_cosine 0.99999 -> ungated"}
    stricter = {**make_report(), "tolerances": {"float32": {"max_abs_rel": 1e-5, "min_cosine": 0.999999}}}
    assert compare_reports(stricter, base, CheckTolerance()) == []


def _repaired_of(report: dict, **changes) -> dict:
    """``report`` (``_repaired_report``) with its repaired row changed, the report's verdict as it would be."""
    report = copy.deepcopy(report)
    report["results"][-1].update(changes)
    report["passed"] = Report.from_dict({**report, "passed": True, "repaired": []}).passed
    return report


@pytest.mark.parametrize("changes, why", [
    ({"images": 2}, "int8-repaired/tflite is judged on the first 2 images, int8/tflite on every input"),
    ({"outputs": []}, "int8-repaired/tflite compares 0 outputs ([]), int8/tflite 1"),
    ({"detections": {"recall": 1.0}}, "int8-repaired/tflite holds the sections {'detections': ['recall']}, int8/tflite {}"),
    ({"runtime": "tflite-ref"}, "int8-repaired has no row on tflite, where int8 has one"),
])
def test_a_twin_judged_otherwise_than_its_pure_file_stands_in_for_nothing(changes, why):
    report = _repaired_of(_repaired_report(0.999), **changes)
    read = Report.from_dict(report)
    assert read.stand_in_refusal("int8") == why and read.repaired == [] and not read.passed
    claimed = {**report, "repaired": ["int8"]}  # a report that says the repaired file stands in all the same
    with pytest.raises(BadInputError, match="repaired names 'int8', but its repaired file does not stand in for it"):
        Report.from_dict(claimed)


def test_a_twin_stands_in_where_the_board_runs_it_only():
    report = _repaired_report(0.999)
    report["board"] = {"name": "b", "checks": {"int8": {"runnable": True}, "int8-repaired": {"runnable": False}}}
    read = Report.from_dict({**report, "repaired": []})
    assert read.stand_in_refusal("int8") == "b cannot run int8-repaired" and not read.passed


def test_a_repaired_file_mostly_in_float_or_no_faster_than_float32_is_no_quantised_file():
    """More than half its ops in float, more than 1.25x the pure file's time, or no faster than the float32
    file on the board's runtime (its real runtime's row, else XNNPACK's; where that runtime runs the pure file
    no faster than float32, the pure file's time alone speaks), or silent about its float ops: the repaired
    file stands in for nothing, the report fails, and the verdict names float32 as the file that passes."""
    from edgeport.validate.report.render import verdict

    report = _repaired_report(0.999)
    report["repairs"]["int8"].update(ops=10, float_ops=6)
    read = Report.from_dict({**report, "passed": False, "repaired": []})
    assert read.stand_in_refusal("int8") == "int8-repaired runs 6 of its 10 ops in float: more than half is no quantised file"
    assert not read.passed and verdict(read).startswith("FAILED: no quantised file passes; model_float32.tflite (float32; ")
    report["repairs"]["int8"].update(float_ops=5)
    for row, ms in zip(report["results"][1:], (2.0, 1.0, 3.0)):  # float32, int8, int8-repaired on XNNPACK
        row["ms_per_image"] = ms
    read = Report.from_dict({**report, "passed": False, "repaired": []})
    assert read.stand_in_refusal("int8") == "int8-repaired is no faster than float32 (3 ms/img against 2 on tflite)"
    report["results"][3]["ms_per_image"] = 1.5  # faster than float32, but 1.5x the pure file's time
    read = Report.from_dict({**report, "passed": False, "repaired": []})
    assert read.stand_in_refusal("int8") == "int8-repaired takes 1.50x its pure file's time on tflite (1.5 against 1 ms/img)"
    report["results"][3]["ms_per_image"] = 1.2
    read = Report.from_dict({**report, "passed": True})
    assert read.passed and verdict(read).startswith("PASSED: ship model_int8_repaired.tflite (int8 with 5 of 10 ops in float; ")
    # a runtime that runs the pure file no faster than float32 (TFLite 1.13.1's uint8 kernels on an x86
    # host) says nothing of the board's speed: the repaired file is held to its pure file's time there
    for row, ms in zip(report["results"][1:], (2.0, 2.4, 2.9)):
        row["ms_per_image"] = ms
    assert Report.from_dict({**report, "passed": True}).stand_in_refusal("int8") is None
    report["results"][3]["ms_per_image"] = 3.1
    read = Report.from_dict({**report, "passed": False, "repaired": []})
    assert read.stand_in_refusal("int8") == "int8-repaired takes 1.29x its pure file's time on tflite (3.1 against 2.4 ms/img)"
    # the three timed against each other, interleaved, in one process: that timing decides, not the rows'
    report["repairs"]["int8"]["latency"] = {"runtime": "tflite", "ms_per_image": 2.5, "pure_ms_per_image": 2.4,
                                            "float32_ms_per_image": 2.2, "ratio": 1.04, "interleaved": True}
    assert Report.from_dict({**report, "passed": True}).stand_in_refusal("int8") is None
    report["repairs"]["int8"]["latency"].update(ms_per_image=2.3, pure_ms_per_image=2.0)
    assert Report.from_dict({**report, "passed": False, "repaired": []}).stand_in_refusal("int8") == \
        "int8-repaired is no faster than float32 (2.3 ms/img against 2.2 on tflite)"
    report["repairs"]["int8"]["latency"].update(ms_per_image=2.1, pure_ms_per_image=1.1)
    assert Report.from_dict({**report, "passed": False, "repaired": []}).stand_in_refusal("int8") == \
        "int8-repaired takes 1.91x its pure file's time on tflite (2.1 against 1.1 ms/img)"
    del report["repairs"]
    assert "says nothing of the ops it runs in float" in Report.from_dict({**report, "passed": False, "repaired": []}).stand_in_refusal("int8")


def test_boxes_further_from_pytorchs_than_the_baselines_are_a_regression():
    """The box centres' mean distance may grow by a quarter, or a quarter of a pixel, whichever is more."""
    def with_boxes(px: float) -> dict:
        report = make_report()
        report["results"][1]["detections"]["box_centre_px"] = px
        return report

    assert compare_reports(with_boxes(1.2), with_boxes(1.0), CheckTolerance()) == []
    assert compare_reports(with_boxes(0.3), with_boxes(0.1), CheckTolerance()) == []  # a quarter of a pixel
    (found,) = compare_reports(with_boxes(1.3), with_boxes(1.0), CheckTolerance())
    assert str(found) == "float32/tflite: box centres' mean distance from PyTorch's (px) 1 -> 1.3"
    (gone,) = compare_reports(make_report(), with_boxes(1.0), CheckTolerance())
    assert "missing" in str(gone)


def _with_dataset(map50_95: float, images: int = 500, rows=("tflite", "board:b (TFLite 1.13.1)"), source="d/images/val",
                  fingerprint=None) -> dict:
    report = make_report()
    report["dataset"] = {"source": source, "fingerprint": fingerprint, "images": images, "seconds": 9.0, "refused": {}, "rows": {
        row: {"map50": 0.6, "map50_95": map50_95, "classes": {}} for row in rows}}
    return report


def test_the_whole_sets_map_may_not_fall_and_is_compared_on_the_same_images_only():
    base = _with_dataset(0.40)
    assert compare_reports(_with_dataset(0.395), base, CheckTolerance()) == [], "within the map tolerance (0.01)"
    fell = compare_reports(_with_dataset(0.38), base, CheckTolerance())
    assert sorted(str(r) for r in fell) == ["dataset board:b (TFLite 1.13.1): map50_95 0.4 -> 0.38",
                                            "dataset tflite: map50_95 0.4 -> 0.38"]
    lost = compare_reports(_with_dataset(0.40, rows=("tflite",)), base, CheckTolerance())
    assert {(r.row, r.now) for r in lost} == {("dataset board:b (TFLite 1.13.1)", "missing")}
    other = compare_reports(_with_dataset(0.40, images=100), base, CheckTolerance())
    assert [(r.row, r.now) for r in other] == [("dataset", "100 images of d/images/val")]
    assert [(r.row, r.now) for r in compare_reports(make_report(), base, CheckTolerance())] == [("dataset", "missing")]
    assert compare_reports(_with_dataset(0.1), make_report(), CheckTolerance()) == [], "a baseline without one compares none"


def test_the_whole_set_is_known_by_its_fingerprint_not_its_folders_name():
    base = _with_dataset(0.40, fingerprint="a" * 64)
    moved = _with_dataset(0.40, source="/elsewhere/d/images/val", fingerprint="a" * 64)
    assert compare_reports(moved, base, CheckTolerance()) == [], "the same images and labels, reached another way"
    edited = compare_reports(_with_dataset(0.40, fingerprint="b" * 64), base, CheckTolerance())
    assert [(r.row, r.now) for r in edited] == [("dataset", "500 images of d/images/val (set bbbbbbbbbbbb)")]
    assert [r.row for r in compare_reports(_with_dataset(0.40), base, CheckTolerance())] == ["dataset"], "no fingerprint: not shown the same"


@pytest.mark.parametrize("change, error", [
    (lambda d: d["rows"]["tflite"].update(map50=7.5), "dataset.rows.tflite.map50 is 7.5, outside"),
    (lambda d: d["rows"]["tflite"].update(classes={"0": {"ap50": 0.5, "ap50_95": -3, "instances": 4}}),
     "dataset.rows.tflite.classes.0.ap50_95 is -3.0, outside"),
    (lambda d: d["rows"]["tflite"].update(classes={"0": {"ap50": 0.5, "ap50_95": 0.3, "instances": -5}}),
     "dataset.rows.tflite.classes.0.instances is -5.0, outside"),
    (lambda d: d.update(images=0), "dataset.images is 0.0, outside"),
    (lambda d: d["refused"].update(tflite="images 1-16: no"), "dataset.rows and dataset.refused both name ['tflite']"),
])
def test_a_whole_set_score_out_of_range_is_malformed(change, error):
    report = _with_dataset(0.40)
    change(report["dataset"])
    with pytest.raises(BadInputError, match="malformed") as exc:
        Report.from_dict(report)
    assert error in str(exc.value)
