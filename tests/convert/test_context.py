"""The run's context owns what a pass starts in the background (``convert/context.py``), and a
real convert leaves no child and no thread of its own running, however it ends."""

from __future__ import annotations

import sys
import threading

import psutil
import pytest

from edgeport.convert.context import RunContext

SLEEPER = [sys.executable, "-c", "import sys, time; sys.stdin.readline(); time.sleep(60)"]


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def _ours() -> list[str]:
    """edgeport's threads still alive (every thread edgeport starts is named ``edgeport-...``)."""
    return [t.name for t in threading.enumerate() if t.name.startswith("edgeport")]


def test_close_ends_every_end_the_latest_first_even_where_one_raises():
    ended = []
    run = RunContext()
    run.own(lambda: ended.append("first"))
    run.own(lambda: (_ for _ in ()).throw(RuntimeError("this end broke")))
    run.own(lambda: ended.append("last"))
    with pytest.raises(RuntimeError, match="this end broke"):
        run.close()
    assert ended == ["last", "first"]
    run.own(lambda: ended.append("after"))  # handed over once the run has ended: ended at once
    assert ended[-1] == "after"


def test_a_warm_child_is_taken_once_and_a_child_nothing_took_ends_with_the_run():
    before = _children()
    with RunContext(warm=True) as run:
        run.warm(SLEEPER, {})
        run.warm(SLEEPER, {})
        (first, second) = _children() - before
        taken = run.take(SLEEPER, "job")
        assert taken is not None and taken.running() and taken.proc.pid in (first, second)
        assert run.take(SLEEPER, "job").proc.pid != taken.proc.pid and run.take(SLEEPER, "job") is None
        fresh = run.child(SLEEPER, {}, "job")  # none waits: a fresh one
        assert fresh.proc.pid not in (first, second)
    assert _children() - before == set(), "no child outlives its run"
    with RunContext(warm=False) as library:  # edgeport as a library starts no process it was not asked for
        library.warm(SLEEPER, {})
        assert _children() - before == set()


@pytest.mark.slow
@pytest.mark.parametrize("fails_in", [None, "export_onnx", "int8_fixes"])
def test_a_convert_leaves_no_child_or_thread_running(fails_in, tmp_path, monkeypatch, demo_ckpt, run_inproc):
    """The demo converted as the command runs it (the converter's child warm, its calibration files
    written ahead, parity's runs beside the conversion): when it passes, and when a pass fails after
    the background work began, nothing of it runs on once ``convert`` returns."""
    import edgeport._lazy
    from edgeport.convert.pipeline import PIPELINE

    monkeypatch.setattr(edgeport._lazy, "is_one_shot", lambda: True)  # as the edgeport command: children start warm
    if fails_in is not None:
        (failing,) = [p for p in PIPELINE if p.name == fails_in]

        def broken(*args, **kwargs):
            raise RuntimeError(f"{fails_in} broke")

        monkeypatch.setattr(type(failing), "run", broken)
    before = _children()
    r = run_inproc("convert", demo_ckpt, "--imgsz", "64", "--out", tmp_path / "out")
    assert r.code == (0 if fails_in is None else 3), r.err[-2000:]
    assert _children() - before == set(), "a child outlived the run"
    assert _ours() == [], f"threads outlived the run: {_ours()}"
