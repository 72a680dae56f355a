"""Parity's runs that need nothing the conversion makes, run while the converter's child works.

A conversion spends most of its time in a child process -- onnx2tf's int8 run calibrates on one
core, litert-torch converts in its own environment -- while edgeport's own process waits on it.
Parity's runs of PyTorch (the reference and the folded model), of ONNX Runtime, and of the
float32 file on the optimised kernels need only the model, the graph, the parity inputs and that
file, so ``ToTFLitePass`` starts them then, one at a time on a thread of their own, and parity
takes their outputs instead of running them again (``run.execute``). A run is taken only for
the same inputs and the same ``Runner.cache_key`` (the same bytes on the same kernels; the same
module object), so a file that changed after its run was started is run again in parity.

Each run is timed as in parity (``runners.Runner.run``), beside the converter's child instead of
another row (what it saves: docs/measured.md). On a machine whose cores are all busy (the test
suite's two workers) it saves nothing: the same work, done earlier.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import CancelledError, Future
from typing import Callable

import numpy as np

from edgeport.validate.parity.runners import Runner, RunOutput, RuntimeRefused, TorchRunner

RANDOM_INPUTS = 2  # noise images after the real ones: a tensor path no real image exercises


def parity_inputs(images: np.ndarray, seed: int) -> np.ndarray:
    """What every parity row runs on: the real images, then ``RANDOM_INPUTS`` of seeded noise."""
    rng = np.random.default_rng(seed + 7)
    noise = rng.random((RANDOM_INPUTS, *images.shape[1:]), dtype=np.float32)
    return np.concatenate([images, noise])


class EarlyRuns:
    """Runs started before parity, on ``inputs`` (``parity_inputs``), in order, on a daemon thread
    that lives while it has runs to do; ``close`` stops it at parity's end, or the run's (``convert/context.RunContext``)."""

    def __init__(self, inputs: np.ndarray):
        self.inputs = inputs
        self._runs: dict[object, tuple[Runner, Future]] = {}  # the runner kept: its key may be its module's id
        self._made: dict[object, tuple[Callable, Future]] = {}  # run -> ``start``'s ``then``, and what it made of its outputs
        self._stop = threading.Event()
        self._jobs: deque = deque()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self, runner: Runner, then: Callable[[RunOutput], object] | None = None) -> Future:
        """Queue ``runner``'s run on every input, or its first ``images`` (once per ``cache_key``); its future.
        ``then``: called on this thread with the run's outputs, once they are in; what it returns is
        ``made``'s (what parity would otherwise compute from the run, after the conversion: the reference's boxes and floors)."""
        with self._lock:
            if runner.cache_key in self._runs:
                return self._runs[runner.cache_key][1]
            future: Future = Future()
            if self._stop.is_set():
                future.cancel()
                return future
            self._runs[runner.cache_key] = (runner, future)
            if then is not None:
                self._made[runner.cache_key] = (then, Future())
            self._jobs.append((runner, future))
            if self._thread is None:
                thread = threading.Thread(target=self._work, name="edgeport-early-parity", daemon=True)
                try:
                    thread.start()
                except BaseException:  # no thread (the process's limit): nothing queued here will run
                    self._jobs.clear()
                    for _, queued in self._runs.values():
                        queued.cancel()
                    raise
                self._thread = thread
        return future

    def _work(self) -> None:
        while True:
            with self._lock:
                if not self._jobs or self._stop.is_set():
                    self._thread = None
                    return
                runner, future = self._jobs.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                # PyTorch on its own threads, as in parity: on one, its outputs differ in the last
                # bits (another order of sums), and so would the report's figures from validate's
                future.set_result(runner.run(self.inputs[: runner.images], self._stop))
            except BaseException as exc:  # noqa: BLE001 -- parity decides what it means (``taken``)
                future.set_exception(exc)
            then, made = self._made.get(runner.cache_key, (None, None))
            if made is not None and made.set_running_or_notify_cancel():
                try:
                    made.set_result(then(future.result()))
                except BaseException as exc:  # noqa: BLE001 -- parity computes it itself (``made``)
                    made.set_exception(exc)

    def taken(self, runner: Runner, inputs: np.ndarray, images: int | None = None) -> Future | None:
        """The run of ``runner`` on the first ``images`` of ``inputs`` (None: all) started here, or
        None: parity runs it itself. Taken are a finished run and a runtime's refusal (its verdict on
        the file); a run stopped, never started, on fewer inputs (a diagnostic's sample, where a row
        of the same run needs them all), or that failed otherwise (beside the converter, on another
        thread) is run again."""
        if inputs.shape != self.inputs.shape or not np.array_equal(inputs, self.inputs):
            return None
        ran, future = self._runs.get(runner.cache_key, (None, None))
        if future is None or (ran.images is not None and (images is None or images > ran.images)):
            return None
        try:
            failed = future.exception()  # waits for it (``wait`` would wait forever on one cancelled before it ran)
        except CancelledError:
            return None
        return future if failed is None or isinstance(failed, RuntimeRefused) else None

    def made(self, runner: Runner, inputs: np.ndarray) -> object | None:
        """What ``start``'s ``then`` made of the run ``taken`` gives for ``runner`` on ``inputs`` (waiting
        for it), or None: none was asked, the run is not taken, or ``then`` failed (parity computes it)."""
        _, future = self._made.get(runner.cache_key, (None, None))
        if future is None or self.taken(runner, inputs) is None:
            return None
        try:
            return future.result()
        except (CancelledError, Exception):  # noqa: BLE001 -- the same computed again, by parity
            return None

    def models_done(self) -> None:
        """Wait until no run here reads a PyTorch module (a later pass may trace it: ``--cross-check``)."""
        for runner, future in list(self._runs.values()):
            if isinstance(runner, TorchRunner):
                try:
                    future.exception()
                except CancelledError:  # never ran
                    pass

    def close(self) -> None:
        """Stop at the next image and wait for it; what has not started never starts."""
        self._stop.set()
        with self._lock:
            thread = self._thread
            for future in [f for _, f in self._runs.values()] + [f for _, f in self._made.values()]:
                future.cancel()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
