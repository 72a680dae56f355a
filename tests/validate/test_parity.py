"""run_parity with fake runners: rows, verdicts and divergence decided from what runners return."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from edgeport.validate.parity.result import ResultRow, Verdict
from edgeport.validate.parity.run import ParitySubject, PlannedRow, run_parity
from edgeport.validate.parity.runners import Runner
from edgeport.validate.report.schema import Report, failures


class Doubler(torch.nn.Module):
    def forward(self, x):
        return x[:, :1] * 2.0


class FakeRunner(Runner):
    def __init__(self, runtime: str, scale: float = 2.0, offset: float = 0.0):
        self.runtime, self.scale, self.offset = runtime, scale, offset

    def _run_one(self, x):
        return [x[:, :1] * self.scale + self.offset]


def _run(subject: ParitySubject, rows) -> dict:
    """run_parity on the rows ``rows(subject, shapes)`` lists -- (variant, runner, analysis file,
    emulator verdict) each -- as the report's dictionary."""
    def plan(subject, shapes):
        return [PlannedRow(v, runner.runtime if runner is not None else f"board:{subject.board.name}", runner, file, verdict)
                for v, runner, file, verdict in rows(subject, shapes)]

    result = run_parity(subject, plan=plan)
    return {"results": [r.to_dict() for r in result.rows], "passed": result.passed, "inputs": result.inputs,
            "board_runtime": result.board_runtime}


def _failures(report: dict) -> list:
    """``failures`` of what ``_run`` returns, its rows read as a report reads them."""
    return failures(Report(tuple(ResultRow.from_dict(r, f"results[{i}]") for i, r in enumerate(report["results"]))))


def _subject(tmp_path: Path, **kw) -> ParitySubject:
    rng = np.random.default_rng(0)
    return ParitySubject(reference_module=Doubler(), folded_module=None, onnx_path=None, tflite={}, output_names=("y",),
                         strides=(), inputs=rng.random((2, 3, 8, 8), dtype=np.float32), inputs_source="test", workdir=tmp_path, **kw)


def test_rows_pass_and_fail_on_what_the_runners_compute(tmp_path):
    rows = lambda subject, shapes: [("float32", FakeRunner("exact"), None, None),  # noqa: E731
                                    ("float32", FakeRunner("off", offset=0.1), None, None),
                                    ("int8", FakeRunner("noisy-int8", scale=2.02), None, None)]
    report = _run(_subject(tmp_path), rows)
    by = {r["runtime"]: r for r in report["results"]}
    assert list(by) == ["pytorch", "exact", "off", "noisy-int8"]
    assert by["exact"]["passed"] and by["exact"]["outputs"][0]["max_abs"] == 0.0
    assert not by["off"]["passed"] and "max_abs" in by["off"]["outputs"][0]["reasons"][0]
    assert by["noisy-int8"]["passed"], "int8 is judged on cosine only, and a 1% gain keeps the angle"
    assert not report["passed"] and [f.what for f in _failures(report)] == ["float32/off"]
    assert _failures(report)[0].reasons[0].startswith("y max_abs 0.1 > 0.0001 x max|ref|")
    assert report["inputs"]["count"] == 2 and report["inputs"]["random"] == 2


def test_a_board_that_cannot_run_the_file_is_a_failed_row_with_its_reasons(tmp_path):
    class Board:
        name = "tiny"
        has_real_runtime = False

    verdict = Verdict("emulator", False, ("CONV_2D has no kernel",), model_bytes=1)
    report = _run(_subject(tmp_path, board=Board()), lambda s, shapes: [("int8", None, None, verdict)])
    (row,) = [r for r in report["results"] if r["runtime"] == "board:tiny"]
    assert row["passed"] is False and row["verdict"]["reasons"] == ["CONV_2D has no kernel"] and row["outputs"] == []


def test_divergence_is_computed_for_failing_rows_only(tmp_path):
    exported = []
    subject = _subject(tmp_path, export_reference=exported.append)
    report = _run(subject, lambda s, shapes: [("float32", FakeRunner("exact"), Path("unused.tflite"), None)])
    assert exported == [] and report["results"][1]["divergence"] is None


class RefusingBoard(Runner):
    """A board's own runtime that refuses the file, as TFLite 1.13.1 refuses CONV_2D v2."""

    runtime = "board:old (TFLite 1.13.1)"
    board_runtime = True

    def _run_one(self, x):
        from edgeport.validate.parity.runners import RuntimeRefused

        raise RuntimeRefused("TFLite 1.13.1 refused the model: Didn't find op for builtin opcode 'CONV_2D' version '2'")


def test_the_board_runtime_is_the_judge_of_its_row(tmp_path):
    class Old:
        name = "old"
        has_real_runtime = True
        install = runner = None

    rows = lambda subject, shapes: [("float32", FakeRunner("board:old (emulated)"), None, None),  # noqa: E731
                                    ("float32", RefusingBoard(), None, None)]
    report = _run(_subject(tmp_path, board=Old()), rows)
    by = {r["runtime"]: r for r in report["results"]}
    assert by["board:old (emulated)"]["passed"]
    refused = by["board:old (TFLite 1.13.1)"]
    assert refused["passed"] is False and refused["verdict"]["judge"] == "runtime"
    assert refused["verdict"]["reasons"] == ["TFLite 1.13.1 refused the model: Didn't find op for builtin opcode 'CONV_2D' version '2'"]
    assert not report["passed"] and report["board_runtime"] == {"real": False, "via": None, "install": None, "refused": ["float32"]}


def test_a_failing_board_runtime_row_has_its_divergence_located_on_the_emulator(tmp_path, monkeypatch):
    from edgeport.validate.parity import run as parity

    class OffBoard(FakeRunner):
        board_runtime = True

    monkeypatch.setattr(parity, "_reference_tensors", lambda subject, x: {"fake": True})
    monkeypatch.setattr(parity, "_divergence", lambda ref, path, x, tol: {"found": False, "file": str(path)})
    rows = lambda subject, shapes: [("float32", OffBoard("board:old (TFLite 1.13.1)", offset=0.1), Path("emulated.tflite"), None)]  # noqa: E731
    (_, row) = _run(_subject(tmp_path), rows)["results"]
    assert row["divergence"] == {"found": False, "file": "emulated.tflite",
                                 "located_on": "the emulator: the board's runtime exposes no intermediate tensors"}


def test_failing_rows_on_one_file_share_one_divergence_analysis(tmp_path, monkeypatch):
    """int8 on the optimised kernels, the reference kernels and an emulator that changes nothing
    (its file the same bytes, copied): failing rows on one file's bytes, one analysis (it reruns
    the file with every intermediate kept); a file of other bytes has its own."""
    from edgeport.validate.parity import run as parity

    analysed = []
    monkeypatch.setattr(parity, "_reference_tensors", lambda subject, x: {"fake": True})
    monkeypatch.setattr(parity, "_divergence", lambda ref, path, x, tol: analysed.append(path.name) or {"file": path.name})
    a, b, copied = tmp_path / "a.tflite", tmp_path / "b.tflite", tmp_path / "emulator" / "a.tflite"
    a.write_bytes(b"one file")
    b.write_bytes(b"another")
    copied.parent.mkdir()
    copied.write_bytes(a.read_bytes())
    off = lambda runtime: FakeRunner(runtime, offset=0.5)  # noqa: E731
    rows = lambda subject, shapes: [("float32", off("tflite"), a, None),  # noqa: E731
                                    ("float32", off("tflite-ref"), a, None),
                                    ("float32", off("board:x"), b, None),
                                    ("float32", off("board:y"), copied, None)]
    report = _run(_subject(tmp_path), rows)
    assert analysed == ["a.tflite", "b.tflite"]
    assert [r["divergence"] for r in report["results"][1:]] == [{"file": "a.tflite"}, {"file": "a.tflite"}, {"file": "b.tflite"},
                                                                {"file": "a.tflite"}]


def test_a_normalised_int8_file_is_compared_in_the_model_units(tmp_path):
    """A file whose channel was divided by 4 (convert/converters/int8_groups.py): parity multiplies it back.
    (float32 here: int8 is judged on cosine, which a uniform factor leaves at 1.)"""
    quarter = FakeRunner("tflite", scale=2.0 / 4.0)  # the reference doubles; this file returns a quarter of that
    rows = lambda subject, shapes: [("float32", quarter, None, None)]  # noqa: E731
    plain = _run(_subject(tmp_path), rows)
    assert not plain["results"][1]["passed"]
    restored = _run(_subject(tmp_path, normalised={"float32": [[(1, 0, 1, 4.0)]]}), rows)
    assert restored["results"][1]["passed"] and restored["results"][1]["outputs"][0]["max_abs"] < 1e-6


def test_a_variant_the_converter_did_not_write_is_a_failed_row_that_says_why(tmp_path):
    why = "onnx2tf failed (exit 1): StrictFullIntegerQuantizationError: Unsupported op: PADV2"
    report = _run(_subject(tmp_path, not_converted={"int8": why}), lambda s, shapes: [("float32", FakeRunner("tflite"), None, None)])
    by = {(r["variant"], r["runtime"]): r for r in report["results"]}
    assert by[("float32", "tflite")]["passed"]
    row = by[("int8", "converter")]
    assert row["passed"] is False and row["outputs"] == [] and row["verdict"]["reasons"] == [why]
    assert not report["passed"] and [str(f) for f in _failures(report)] == [f"int8/converter: {why}"]


def test_a_file_the_runtime_cannot_prepare_is_its_refusal_not_a_crash(tmp_path):
    from edgeport.validate.parity.runners import RuntimeRefused
    from edgeport.validate.parity.tflite_runner import TFLiteRunner

    bad = tmp_path / "model_float32.tflite"
    bad.write_bytes(b"TFL3 but not a flatbuffer model")
    with pytest.raises(RuntimeRefused, match=r"^LiteRT \(optimized kernels\) refused the file: "):
        TFLiteRunner(bad, [(1, 1, 8, 8)]).run(np.zeros((1, 3, 8, 8), np.float32))


class _Meeting(Runner):
    """A runner whose every image waits until ``others`` runners reach the same point: it
    returns only when they run at the same time (a timeout breaks the barrier instead)."""

    def __init__(self, runtime: str, barrier, active: list, side_by_side: bool = True):
        self.runtime, self.barrier, self.active, self.side_by_side = runtime, barrier, active, side_by_side

    def _run_one(self, x):
        self.active.append(self.runtime)
        try:
            if self.barrier is not None:
                self.barrier.wait(timeout=10)
            else:
                assert self.active == [self.runtime], f"{self.runtime} ran beside {self.active}"
            return [x[:, :1] * 2.0]
        finally:
            self.active.remove(self.runtime)


def test_single_threaded_rows_run_side_by_side_and_pytorch_alone(tmp_path, monkeypatch):
    import threading

    import edgeport.validate.parity.run as parity

    monkeypatch.setattr(parity, "_workers", lambda: 2)
    active: list = []
    both = threading.Barrier(2)
    rows = lambda subject, shapes: [("folded", _Meeting("torch-like", None, active, side_by_side=False), None, None),  # noqa: E731
                                    ("float32", _Meeting("a", both, active), None, None),
                                    ("int8", _Meeting("b", both, active), None, None)]
    report = _run(_subject(tmp_path), rows)
    assert [r["runtime"] for r in report["results"]] == ["pytorch", "torch-like", "a", "b"]
    assert report["passed"], [r for r in report["results"] if not r["passed"]]


def test_a_refusal_in_a_side_by_side_run_is_its_rows_verdict(tmp_path):
    from edgeport.validate.parity.runners import RuntimeRefused

    class Refuses(FakeRunner):
        def _run_one(self, x):
            raise RuntimeRefused("no kernel for HARD_SWISH")

    rows = lambda subject, shapes: [("float32", Refuses("picky"), None, None), ("float32", FakeRunner("exact"), None, None)]  # noqa: E731
    by = {r["runtime"]: r for r in _run(_subject(tmp_path), rows)["results"]}
    assert by["picky"]["passed"] is False and by["picky"]["verdict"]["reasons"] == ["no kernel for HARD_SWISH"]
    assert by["exact"]["passed"]


def test_a_run_asked_to_stop_stops_before_its_next_image():
    import threading

    from edgeport.validate.parity.runners import Stopped

    stop = threading.Event()
    runner = FakeRunner("exact")
    assert runner.run(np.zeros((2, 3, 4, 4), np.float32), stop).outputs[0].shape == (2, 1, 4, 4)
    stop.set()
    with pytest.raises(Stopped):
        runner.run(np.zeros((2, 3, 4, 4), np.float32), stop)


def test_a_slow_runs_images_are_shared_out_and_joined_in_order(tmp_path, monkeypatch):
    import edgeport.validate.parity.run as parity

    monkeypatch.setattr(parity, "_workers", lambda: 2)
    shares: list = []

    class Slow(FakeRunner):
        def split(self, parts):
            return [Slow(self.runtime, self.scale) for _ in range(parts)]

        def run(self, inputs, stop=None):
            shares.append(inputs.shape[0])
            return super().run(inputs, stop)

    rows = lambda subject, shapes: [("float32", Slow("slow-ref"), None, None)]  # noqa: E731
    report = _run(_subject(tmp_path), rows)
    (row,) = [r for r in report["results"] if r["runtime"] == "slow-ref"]
    assert sorted(shares) == [2, 2], "two real images and two random ones, two each"
    assert row["passed"] and row["outputs"][0]["max_abs"] == 0.0, "the shares joined back in image order"


def test_the_reference_kernels_split_and_the_optimised_do_not(tmp_path):
    from edgeport.validate.parity.tflite_runner import TFLiteRunner

    model = tmp_path / "m.tflite"
    model.write_bytes(b"not loaded until run")
    ref = TFLiteRunner(model, [(1, 1, 2, 2)], kernels="reference")
    parts = ref.split(3)
    assert len(parts) == 3 and parts[0] is ref and len({id(p) for p in parts}) == 3
    assert {p.cache_key for p in parts} == {ref.cache_key} and all(p.kernels == "reference" for p in parts)
    fast = TFLiteRunner(model, [(1, 1, 2, 2)])
    assert fast.split(3) == [fast]
    helper = fast.helper()
    assert helper is not fast and helper.cache_key == fast.cache_key and helper.kernels == "optimized"
    assert ref.helper() is None, "the reference kernels take fixed shares, in child processes"


def test_a_row_left_alone_is_joined_by_a_helper_taking_its_last_images(tmp_path, monkeypatch):
    import threading
    import time

    import edgeport.validate.parity.run as parity

    monkeypatch.setattr(parity, "_workers", lambda: 2)
    ran: dict = {"first": [], "helper": []}
    lock = threading.Lock()

    class Alone(FakeRunner):
        def __init__(self, runtime, who="first"):
            super().__init__(runtime)
            self.who = who

        def helper(self):
            return Alone(self.runtime, "helper")

        def _run_one(self, x):
            time.sleep(0.1)  # slow enough that the helper, on the free core, takes a share
            with lock:
                ran[self.who].append(float(x[0, 0, 0, 0]))
            return super()._run_one(x)

    rows = lambda subject, shapes: [("float32", Alone("fast-alone"), None, None)]  # noqa: E731
    report = _run(_subject(tmp_path), rows)
    (row,) = [r for r in report["results"] if r["runtime"] == "fast-alone"]
    assert ran["first"] and ran["helper"], ran
    assert len(set(ran["first"]) | set(ran["helper"])) == 4 and not set(ran["first"]) & set(ran["helper"]), "each image once"
    assert row["passed"] and row["outputs"][0]["max_abs"] == 0.0, "the two shares joined back in image order"
    assert row["repeat"]["passed"], "each share checks its own images' repeats"


def test_a_helper_that_fails_leaves_its_images_to_the_runner_and_decides_nothing(tmp_path, monkeypatch):
    import time

    import edgeport.validate.parity.run as parity
    from edgeport.validate.parity.runners import RuntimeRefused

    monkeypatch.setattr(parity, "_workers", lambda: 2)
    ran: list = []

    class Main(FakeRunner):
        def helper(self):
            return Broken(self.runtime)

        def _run_one(self, x):
            time.sleep(0.1)
            ran.append(float(x[0, 0, 0, 0]))
            return super()._run_one(x)

    class Broken(FakeRunner):
        def _run_one(self, x):
            raise RuntimeRefused("out of memory for a second interpreter")

    rows = lambda subject, shapes: [("float32", Main("main"), None, None)]  # noqa: E731
    (row,) = [r for r in _run(_subject(tmp_path), rows)["results"] if r["runtime"] == "main"]
    assert row["passed"] and row["outputs"][0]["max_abs"] == 0.0, row
    from collections import Counter

    assert sorted(Counter(ran).values()) == [2, 2, 2, 2], "every image run by the runner once (two invokes: the repeat check)"


def test_a_runner_that_fails_ends_its_helpers_share():
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from edgeport.validate.parity.run import _share
    from edgeport.validate.parity.runners import RuntimeRefused, Shares

    started, helper_ran = threading.Event(), []

    class Refuses(FakeRunner):
        def _run_one(self, x):
            started.wait(5)
            raise RuntimeRefused("no kernel")

    class Helper(FakeRunner):
        def _run_one(self, x):
            helper_ran.append(1)
            started.set()
            threading.Event().wait(0.2)
            return super()._run_one(x)

    x, shares = np.zeros((20, 3, 2, 2), np.float32), Shares(20)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(_share, Refuses("r"), x, threading.Event(), shares, first=True)
        helper = pool.submit(_share, Helper("r"), x, threading.Event(), shares, first=False)
        with pytest.raises(RuntimeRefused):
            first.result()
        helper.result()
    assert len(helper_ran) <= 2, "the helper stopped at its next image"


def test_shares_from_both_ends_take_each_image_once_and_a_late_helper_runs_none():
    from edgeport.validate.parity.runners import RunOutput, Shares

    shares = Shares(5)
    first, last = shares.from_first(), shares.from_last()
    taken = [next(first), next(last), next(first), next(last), next(first)]
    assert taken == [0, 4, 1, 3, 2] and next(last, None) is None and next(first, None) is None
    x = np.arange(3 * 3 * 2 * 2, dtype=np.float32).reshape(3, 3, 2, 2)
    everything = FakeRunner("r").run(x, indices=Shares(3).from_first())
    late = FakeRunner("r").run(x, indices=iter(()))
    assert late.outputs == [] and late.image_ms == ()
    joined = RunOutput.joined([everything, late])
    assert np.array_equal(joined.outputs[0], x[:, :1] * 2.0) and len(joined.image_ms) == 3


class Stateful(FakeRunner):
    """An interpreter that keeps state between invokes: right the first time, off the second
    (TFLite 1.13.1's CONV_2D with a runtime filter)."""

    def __init__(self, runtime):
        super().__init__(runtime)
        self.calls = 0

    def _run_one(self, x):
        self.calls += 1
        return [x[:, :1] * 2.0 + (0.0 if self.calls % 2 else 0.5)]


def test_a_runtime_that_answers_an_image_differently_the_second_time_fails_its_row(tmp_path):
    report = _run(_subject(tmp_path), lambda s, shapes: [("float32", Stateful("stale"), None, None),
                                                        ("float32", FakeRunner("steady"), None, None)])
    by = {r["runtime"]: r for r in report["results"]}
    stale = by["stale"]
    assert stale["outputs"][0]["passed"], "the first invokes are right"
    assert not stale["passed"] and stale["repeat"]["passed"] is False and stale["repeat"]["max_abs"] == pytest.approx(0.5)
    assert "a second invoke of the same image answers differently (max |difference| 0.5)" in stale["reasons"][0]
    assert by["steady"]["passed"] and by["steady"]["repeat"] == {"max_abs": 0.0, "passed": True}
    assert by["pytorch"]["repeat"] is None, "the reference is invoked once"


# -- boxes judged above the model's own noise floor ------------------------------------------------------

def _busy_output() -> np.ndarray:
    """A yolov8 output (1, 5, 230) as a busy detector's: 60 confident boxes, 150 whose scores tie within
    2e-7 so that the max-detections cut (100) keeps 40 of them by a hair, 20 at the 0.25 threshold."""
    rng = np.random.default_rng(0)
    out = np.zeros((1, 5, 230), np.float32)
    ys, xs = np.divmod(np.arange(230), 16)
    out[0, 0], out[0, 1], out[0, 2:4] = 15 + 30 * xs, 15 + 30 * ys, 20
    out[0, 4, :60] = rng.uniform(0.8, 0.95, 60)
    out[0, 4, 60:210] = 0.4 + rng.uniform(-2e-7, 2e-7, 150)
    out[0, 4, 210:] = 0.25 + rng.uniform(-2e-7, 2e-7, 20)
    return out


class Busy(torch.nn.Module):
    def forward(self, x):
        return torch.from_numpy(_busy_output()).expand(x.shape[0], -1, -1) + 0 * x.mean()


class Transformed(Runner):
    """The busy output, changed by ``f`` (the runtime's arithmetic)."""

    def __init__(self, runtime: str, f):
        self.runtime, self.f = runtime, f

    def _run_one(self, x):
        return [self.f(_busy_output()).astype(np.float32)]


def test_boxes_only_nms_moved_never_fail_a_row_and_lost_boxes_still_do(tmp_path):
    """A float row within 1e-6 of PyTorch (folding BN) moves 20-odd of its 100 boxes across the
    max-detections cut: above the noise floor it misses none. An int8 file whose scores came out a
    quarter of what they should be keeps every cosine at 1 (a scale), and loses every confident box:
    it fails on boxes alone. The same file rounded to 8 bits over each group's range passes."""
    jitter = np.random.default_rng(5).uniform(-1e-6, 1e-6, (1, 5, 230))

    def scores_quartered(o):
        o = o.copy()
        o[:, 4] *= 0.25
        return o

    def rounded(o):
        lo, hi = o[:, 4].min(), o[:, 4].max()
        o = o.copy()
        o[:, 4] = lo + np.round((o[:, 4] - lo) / (hi - lo) * 255) / 255 * (hi - lo)
        return o

    rows = lambda s, shapes: [("float32", Transformed("folded-like", lambda o: o * (1 + jitter)), None, None),  # noqa: E731
                              ("int8", Transformed("broken-int8", scores_quartered), None, None),
                              ("int8", Transformed("rounded-int8", rounded), None, None)]
    subject = _subject(tmp_path, head="yolov8")
    subject = ParitySubject(**{**subject.__dict__, "reference_module": Busy()})
    report = _run(subject, rows)
    by = {r["runtime"]: r for r in report["results"]}
    near = by["folded-like"]
    assert near["detections"]["missed"] > 5, "the fixture moves boxes that only the cut decided"
    assert near["passed"] and near["detections"]["missed_stable"] == 0 and near["detections"]["extra_beyond"] == 0, near
    assert near["detections"]["stable_boxes"] == 120  # 60 confident boxes on each of the two images
    broken = by["broken-int8"]
    assert all(o["passed"] for o in broken["outputs"]), "every tensor check passes: only the boxes tell"
    assert not broken["passed"] and broken["reasons"][0].startswith("missed 120 of PyTorch's 120 stable boxes (allowed 48;"), \
        broken["reasons"]
    assert by["rounded-int8"]["passed"], by["rounded-int8"]


def test_a_step_count_over_non_finite_outputs_is_said_not_raised():
    """A board that answers NaN (or infinity) on a quantised file: the step check says it has no count,
    and is not an internal error; gated, it fails."""
    from edgeport.validate.parity.run import _Steps

    ref = [np.zeros((1, 4), np.float32)]
    for bad in (np.nan, np.inf):
        got = [np.full((1, 4), bad, np.float32)]
        ungated = _Steps("the reference kernels on this file", ref, [0.1], gated=False).compare(got)
        assert ungated["passed"] and ungated["max_steps"] is None and "non-finite" in ungated["reason"]
        gated = _Steps("its int8 twin on the reference kernels", ref, [0.1]).compare(got)
        assert not gated["passed"] and gated["max_steps"] is None


def test_a_row_that_shows_another_rows_run_says_which(tmp_path):
    """A board emulator that changes nothing in the file runs it on the reference kernels, as
    tflite-ref does: one run, two rows, and the second says whose run it shows."""
    shared = FakeRunner("tflite-ref")
    report = _run(_subject(tmp_path), lambda s, shapes: [("float32", shared, None, None), ("float32", shared, None, None),
                                                        ("float32", FakeRunner("other"), None, None)])
    rows = report["results"][1:]
    assert [r["same_run_as"] for r in rows] == [None, "tflite-ref", None]


def test_two_rows_of_one_run_are_compared_once_and_report_alike(tmp_path, monkeypatch):
    """A board that runs the file as tflite does shows tflite's run (``same_run_as``): its outputs are
    compared with PyTorch's once per variant, and both rows carry the same figures."""
    from edgeport.validate.parity import run as parity_run

    compared = []
    comparisons = parity_run.comparisons
    monkeypatch.setattr(parity_run, "comparisons", lambda *a: compared.append(a[-1]) or comparisons(*a))
    shared = Transformed("tflite", lambda o: o * (1 + 1e-7))
    subject = replace(_subject(tmp_path, head="yolov8"), reference_module=Busy())
    report = _run(subject, lambda s, shapes: [("float32", shared, None, None), ("float32", shared, None, None),
                                              ("int8", shared, None, None)])
    assert compared == ["float32", "int8"]
    first, second, quantised = report["results"][1:]
    assert second["same_run_as"] == "tflite" and first["detections"]["stable_boxes"] == 120
    for key in ("outputs", "detections", "error_histogram", "passed"):
        assert first[key] == second[key], key
    assert quantised["outputs"] != first["outputs"], "another variant: compared on its own tolerances"


class Counting(FakeRunner):
    """Records how many images each run was given."""

    def __init__(self, runtime: str, images=None, key=None, scale: float = 2.0):
        super().__init__(runtime, scale)
        self.images, self.key, self.given = images, key, []

    @property
    def cache_key(self):
        return self.key if self.key is not None else id(self)

    def run(self, inputs, stop=None):
        self.given.append(inputs.shape[0])
        return super().run(inputs, stop)


def test_a_diagnostic_row_runs_and_is_judged_on_its_sample_only(tmp_path):
    """A runner that needs the first two inputs computes two of the four, and its row says so: its
    numbers are the sample's against the reference's same images, and no mAP on so few."""
    sampled, full = Counting("tflite-ref", images=2, scale=2.5), Counting("tflite")
    report = _run(_subject(tmp_path), lambda s, shapes: [("float32", full, None, None), ("float32", sampled, None, None)])
    assert full.given == [4] and sampled.given == [2]
    by = {r["runtime"]: r for r in report["results"]}
    assert by["tflite"]["images"] is None and by["tflite-ref"]["images"] == 2
    assert not by["tflite-ref"]["passed"], "a sample still fails on what it computes wrong"
    ref = 2.0 * _subject(tmp_path).inputs[:2, :1]  # the two real images: the sample holds no random input
    assert by["tflite-ref"]["outputs"][0]["max_abs"] == pytest.approx(float(np.abs(0.25 * ref).max()), rel=1e-6)
    assert by["tflite-ref"]["map"] is None


def test_a_run_shared_by_a_sampled_row_and_a_full_one_computes_every_input(tmp_path):
    """The board's emulator on the reference kernels (an unchanged file) is the tflite-ref run: the
    run computes what its most demanding row needs, and the diagnostic row is then judged on all."""
    diagnostic, board = Counting("tflite-ref", images=2, key="same"), Counting("board:b", key="same")
    report = _run(_subject(tmp_path), lambda s, shapes: [("float32", diagnostic, None, None), ("float32", board, None, None)])
    assert diagnostic.given + board.given == [4]
    assert all(r["images"] is None for r in report["results"][1:])


def test_the_default_boards_emulator_is_the_optimised_kernels_run(tmp_path):
    """The default board is a current TFLite: its emulator runs the file on the optimised kernels, so
    its row is the tflite row's run; the reference kernels' row is a diagnostic on the sample."""
    from edgeport.validate.board.profiles import load_board
    from edgeport.validate.parity.run import DIAGNOSTIC_IMAGES, plan_rows

    from ..ops.test_lowering import unary

    model = tmp_path / "m.tflite"
    model.write_bytes(unary("RELU", (1, 8, 8, 1)))  # planned, never run here
    (tmp_path / "m.onnx").write_bytes(b"planned, never loaded")
    subject = _subject(tmp_path, board=load_board("default"))
    subject = ParitySubject(**{**subject.__dict__, "tflite": {"float32": model, "int8": model}, "folded_module": Doubler(),
                               "onnx_path": tmp_path / "m.onnx"})
    planned = plan_rows(subject, [(1, 1, 8, 8)])
    rows = {(r.variant, r.runtime): r.runner for r in planned}
    assert ("folded", "pytorch") in rows and ("onnx", "onnxruntime") in rows
    assert rows[("int8", "board:default")].cache_key == rows[("int8", "tflite")].cache_key
    assert rows[("int8", "tflite-ref")].images == DIAGNOSTIC_IMAGES and rows[("int8", "tflite")].images is None
    # the folded model's and the ONNX graph's rows: diagnostics too; every TFLite row runs every input
    assert all(rows[k].images == DIAGNOSTIC_IMAGES for k in rows if k[0] in ("folded", "onnx"))
    assert all(rows[k].images is None for k in rows if k[1] in ("tflite", "board:default"))
    # float32's reference kernels agree with the optimised ones within float rounding: no diagnostic row
    assert [r.runtime for r in planned if r.variant == "float32"] == ["tflite", "board:default"]
    subject = replace(subject, folded_module=None, onnx_path=None)
    old = {(r.variant, r.runtime): r.runner for r in plan_rows(replace(subject, board=load_board("tflite-1.13")), [(1, 1, 8, 8)])}
    emulated = old[("float32", "board:tflite-1.13 (emulated)")]
    assert emulated.kernels == "reference" and emulated.images is None, "an old board's emulator: every image"
    for variant in ("float32", "int8"):
        assert old[(variant, "tflite-ref")].images is None, "a board that runs the reference kernels: their rows on every image too"
