"""Parity's runs started while the converter works (validate/parity/early.py): parity takes them
where they are its own runs -- the same runner key on the same inputs -- and runs the rest."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from edgeport.validate.parity.early import EarlyRuns, parity_inputs
from edgeport.validate.parity.run import ParitySubject, PlannedRow, run_parity
from edgeport.validate.parity.runners import Runner, RuntimeRefused, TorchRunner


class Doubler(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x[:, :1] * 2.0


class Keyed(Runner):
    """Computes ``scale * x``; counts its runs; ``cache_key`` as given."""

    def __init__(self, runtime: str, key, scale: float = 2.0, gate: threading.Event | None = None):
        self.runtime, self.key, self.scale, self.gate, self.runs = runtime, key, scale, gate, 0
        self.started = threading.Event()

    @property
    def cache_key(self):
        return self.key

    def run(self, inputs, stop=None):
        self.runs += 1
        self.started.set()
        if self.gate is not None:
            self.gate.wait(10)
        return super().run(inputs, stop)

    def _run_one(self, x):
        return [x[:, :1] * self.scale]


def _subject(tmp_path: Path, **kw) -> ParitySubject:
    rng = np.random.default_rng(0)
    return ParitySubject(reference_module=Doubler(), folded_module=None, onnx_path=None, tflite={}, output_names=("y",),
                         strides=(), inputs=rng.random((2, 3, 8, 8), dtype=np.float32), inputs_source="test", workdir=tmp_path, **kw)


def _rows(report) -> list[tuple]:
    return [(r.variant, r.runtime, r.passed, tuple(o["max_abs"] for o in r.outputs)) for r in report.rows]


def test_parity_takes_the_runs_started_early_and_reports_what_it_would_have(tmp_path):
    subject = _subject(tmp_path)
    plain = run_parity(subject, plan=lambda s, shapes: [PlannedRow("float32", "tflite", Keyed("tflite", "k", 2.5))])
    module = Doubler()
    early = EarlyRuns(parity_inputs(subject.inputs, subject.seed))
    early.start(TorchRunner(module))
    started = Keyed("tflite", "k", 2.5)
    early.start(started)
    again = Keyed("tflite", "k", 2.5)  # parity's own runner of the same thing: not run
    report = run_parity(replace(subject, reference_module=module, early=early),
                        plan=lambda s, shapes: [PlannedRow("float32", "tflite", again)])
    assert _rows(report) == _rows(plain)
    assert module.calls == 4 + 3 and started.runs == 1 and again.runs == 0  # one run: 4 inputs, 3 of them timed


def test_a_run_on_other_inputs_or_of_another_key_is_parity_own(tmp_path):
    subject = _subject(tmp_path)
    other_inputs = EarlyRuns(parity_inputs(subject.inputs, subject.seed + 1))  # other noise images
    other_inputs.start(Keyed("tflite", "k"))
    other_key = EarlyRuns(parity_inputs(subject.inputs, subject.seed))
    other_key.start(Keyed("tflite", "another file"))
    for early in (other_inputs, other_key):
        mine = Keyed("tflite", "k")
        run_parity(replace(subject, early=early), plan=lambda s, shapes, mine=mine: [PlannedRow("float32", "tflite", mine)])
        assert mine.runs == 1


def test_a_diagnostics_early_run_is_taken_only_for_its_sample(tmp_path):
    """A diagnostic runner (``run.diagnostic``: the first ``DIAGNOSTIC_IMAGES`` inputs) runs only
    those early; parity takes that run for a row of the sample, and runs every input itself where a
    row of the same run needs them all."""
    from edgeport.validate.parity.run import DIAGNOSTIC_IMAGES, diagnostic

    subject = _subject(tmp_path)
    inputs = parity_inputs(subject.inputs, subject.seed)
    early = EarlyRuns(inputs)
    sampled = diagnostic(Keyed("onnxruntime", "graph"))
    early.start(sampled)
    sampled_row = diagnostic(Keyed("onnxruntime", "graph"))
    report = run_parity(replace(subject, early=early), plan=lambda s, shapes: [PlannedRow("onnx", "onnxruntime", sampled_row)])
    assert sampled.runs == 1 and sampled_row.runs == 0, "the early run is the row's"
    (row,) = [r for r in report.rows if r.variant == "onnx"]
    assert row.images == DIAGNOSTIC_IMAGES < len(inputs)
    whole = Keyed("onnxruntime", "graph")  # the same run, a row on every input
    run_parity(replace(subject, early=early), plan=lambda s, shapes: [PlannedRow("onnx", "onnxruntime", whole)])
    assert whole.runs == 1, "a sample is not every input: parity runs it"


def test_a_run_stopped_or_never_started_is_parity_own(tmp_path):
    subject = _subject(tmp_path)
    early = EarlyRuns(parity_inputs(subject.inputs, subject.seed))
    gate = threading.Event()
    busy = Keyed("tflite", "busy", gate=gate)
    early.start(busy)
    queued = Keyed("tflite-ref", "queued")
    early.start(queued)
    assert busy.started.wait(10)  # (on a loaded machine the thread may not have begun it yet)
    threading.Timer(0.2, gate.set).start()
    early.close()  # the busy run stops at its next image (close waits for it); the queued one never starts
    assert busy.runs == 1 and not [t for t in threading.enumerate() if t.name == "edgeport-early-parity"]
    mine, theirs = Keyed("tflite", "busy"), Keyed("tflite-ref", "queued")
    report = run_parity(replace(subject, early=early), plan=lambda s, shapes: [PlannedRow("float32", "tflite", mine),
                                                                              PlannedRow("float32", "tflite-ref", theirs)])
    assert mine.runs == 1 and theirs.runs == 1 and queued.runs == 0
    assert all(r.passed for r in report.rows)


def test_a_tflite_file_changed_after_its_run_started_is_run_again(tmp_path):
    """The optimised kernels' run is keyed by the file's bytes: a pass that rewrites the file
    (lowering for a board) gets a run of the file it wrote."""
    pytest.importorskip("ai_edge_litert")
    from edgeport.validate.parity.tflite_runner import TFLiteRunner

    a, b = tmp_path / "a.tflite", tmp_path / "b.tflite"
    a.write_bytes(b"one")
    b.write_bytes(b"two")
    assert TFLiteRunner(a, []).cache_key != TFLiteRunner(b, []).cache_key
    b.write_bytes(b"one")
    assert TFLiteRunner(a, []).cache_key == TFLiteRunner(b, []).cache_key


class Refusing(Keyed):
    def _run_one(self, x):
        raise RuntimeRefused("no kernel for this op")


class Failing(Keyed):
    def _run_one(self, x):
        raise MemoryError("beside the converter")


@pytest.mark.parametrize("early_kind", [Refusing, Failing])
def test_an_early_refusal_is_the_rows_and_any_other_failure_is_run_again(tmp_path, early_kind):
    """A runtime's refusal early is its verdict on the file, the row's refusal; any other failure
    on the early thread (memory, a model that runs only on the main thread) is parity's to run,
    and to report."""
    subject = _subject(tmp_path)
    early = EarlyRuns(parity_inputs(subject.inputs, subject.seed))
    early.start(early_kind("tflite", "k"))
    mine = Keyed("tflite", "k")
    report = run_parity(replace(subject, early=early), plan=lambda s, shapes: [PlannedRow("float32", "tflite", mine)])
    (row,) = report.rows[1:]
    if early_kind is Refusing:
        assert mine.runs == 0 and not row.passed and "no kernel for this op" in " ".join(row.verdict.reasons)
    else:
        assert mine.runs == 1 and row.passed


def test_the_pipeline_closes_what_no_parity_took(tmp_path):
    """A pass that fails between the conversion and parity: the pipeline's end closes the runs
    started (the run's context owns them), so none outlives it; a run asked for after that never starts."""
    from types import SimpleNamespace

    from edgeport.convert.base import run_pipeline
    from edgeport.convert.context import RunContext
    from edgeport.errors import PassCheckError

    subject = _subject(tmp_path)
    early = EarlyRuns(parity_inputs(subject.inputs, subject.seed))
    config = SimpleNamespace(context=RunContext())
    config.context.own(early.close)

    class Failing:
        name = "failing"

        def run(self, value, config):
            raise RuntimeError("a pass after the conversion")

    with pytest.raises(PassCheckError):
        run_pipeline(config, (Failing(),))
    assert early.start(Keyed("tflite", "late")).cancelled()


class Boxes(torch.nn.Module):
    """A yolov8 output (1, 5, 64): eight confident boxes, the rest near the threshold."""

    def forward(self, x):
        rng = np.random.default_rng(1)
        out = np.zeros((1, 5, 64), np.float32)
        ys, xs = np.divmod(np.arange(64), 8)
        out[0, 0], out[0, 1], out[0, 2:4] = 20 + 40 * xs, 20 + 40 * ys, 30
        out[0, 4] = 0.25 + rng.uniform(-1e-6, 1e-6, 64)
        out[0, 4, :8] = rng.uniform(0.8, 0.9, 8)
        return torch.from_numpy(out).expand(x.shape[0], -1, -1) + 0 * x.mean()


class BoxesRun(Keyed):
    """``Boxes``' outputs, times ``scale``: a file that computes what the model does."""

    def _run_one(self, x):
        return [Boxes()(torch.from_numpy(x)).numpy() * self.scale]


def test_the_reference_judged_while_the_converter_works_is_parity_own(tmp_path, monkeypatch):
    """The reference's boxes and noise floors, made from its early run while the converter works
    (``start``'s ``then``: ``judged_reference``), are what parity judges the rows against: the same
    report, and no floor measured again. A ``then`` that failed is computed by parity."""
    from functools import partial

    from edgeport.models.heads import resolve_head
    from edgeport.validate.parity import run as parity_run
    from edgeport.validate.parity.run import judged_reference

    measured = []
    stability = parity_run.stability
    monkeypatch.setattr(parity_run, "stability", lambda *a, **k: measured.append(threading.current_thread().name) or stability(*a, **k))
    subject = replace(_subject(tmp_path, head="yolov8"), reference_module=Boxes())
    rows = lambda s, shapes: [PlannedRow("float32", "tflite", BoxesRun("tflite", "f", 1.0)),  # noqa: E731
                              PlannedRow("int8", "tflite", BoxesRun("tflite", "q", 0.999))]

    plain = run_parity(subject, plan=rows)
    assert len(measured) == 2, "one floor per bound: float32's and int8's"
    assert all(r.detections["stable_boxes"] for r in plain.rows[1:]), "rows judged on boxes, above the floor"
    head = resolve_head("yolov8", [(1, 5, 64)], (), subject.hints)
    for then, where in ((partial(judged_reference, n_real=2, head=head, variants=("float32", "int8")), "edgeport-early-parity"),
                        (lambda run: 1 / 0, threading.current_thread().name)):
        measured.clear()
        early = EarlyRuns(parity_inputs(subject.inputs, subject.seed))
        early.start(TorchRunner(subject.reference_module), then=then)
        report = run_parity(replace(subject, early=early), plan=rows)
        assert _rows(report) == _rows(plain)
        assert [r.detections for r in report.rows] == [r.detections for r in plain.rows]
        assert set(measured) == {where} and len(measured) >= 2, "every floor measured early, or by parity where ``then`` failed"
        early.close()
