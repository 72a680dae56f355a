"""Parity's runs that need nothing the conversion makes, run while the converter's child works.

A conversion spends most of its time in a child process -- onnx2tf's int8 run calibrates on one
core, litert-torch converts in its own environment -- while edgeport's own process waits on it.
Parity's runs of PyTorch (the reference and the folded model), of ONNX Runtime, and of the
float32 file on the optimised kernels need only the model, the graph, the parity inputs and that
file, so ``ToTFLitePass`` starts them then, one at a time on a thread of their own, and parity
takes their outputs instead of running them again (``run.execute``). A run is taken only for
the same inputs and the same ``Runner.cache_key`` (the same bytes on the same kernels; the same
module object), so a file that changed after its run was started is run again in parity.

Each run is timed as parity times its runs (``runners.Runner.run``), beside the converter's
child instead of beside another row. On YOLOv8n at 640 px (onnx2tf 2.x: a float32 run of 3 s
beside an int8 run of 22 s, calibrating on one core), one convert each: ``to_tflite`` 24.7 s and
``parity`` 9.7 s before, 26.1 s and 5.6 s after (the runs beside it slow the children a little);
zoo_bench's figures are in docs/measured.md. On a machine whose cores are all busy (the test
suite's two workers) it saves nothing: the same work, done earlier.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future, wait

import numpy as np

from edgeport.validate.parity.runners import Runner, Stopped, TorchRunner

RANDOM_INPUTS = 2  # noise images after the real ones: a tensor path no real image exercises


def parity_inputs(images: np.ndarray, seed: int) -> np.ndarray:
    """What every parity row runs on: the real images, then ``RANDOM_INPUTS`` of seeded noise."""
    rng = np.random.default_rng(seed + 7)
    noise = rng.random((RANDOM_INPUTS, *images.shape[1:]), dtype=np.float32)
    return np.concatenate([images, noise])


class EarlyRuns:
    """Runs started before parity, on ``inputs`` (``parity_inputs``), in order, on a daemon thread
    that lives while it has runs to do."""

    def __init__(self, inputs: np.ndarray):
        self.inputs = inputs
        self._runs: dict[object, Future] = {}
        self._models: list[Future] = []  # the PyTorch runs: they read the modules
        self._stop = threading.Event()
        self._jobs: deque = deque()
        self._lock = threading.Lock()
        self._working = False

    def start(self, runner: Runner) -> Future:
        """Queue ``runner``'s run on every input (once per ``cache_key``); its future."""
        with self._lock:
            if runner.cache_key in self._runs:
                return self._runs[runner.cache_key]
            self._runs[runner.cache_key] = future = Future()
            if isinstance(runner, TorchRunner):
                self._models.append(future)
            self._jobs.append((runner, future))
            if not self._working:
                self._working = True
                threading.Thread(target=self._work, name="edgeport-early-parity", daemon=True).start()
        return future

    def _work(self) -> None:
        while True:
            with self._lock:
                if not self._jobs:
                    self._working = False
                    return
                runner, future = self._jobs.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                # PyTorch on its own threads, as in parity: on one, its outputs differ in the last
                # bits (another order of sums), and so would the report's figures from validate's
                future.set_result(runner.run(self.inputs, self._stop))
            except BaseException as exc:  # noqa: BLE001 -- its taker raises it, as parity's own run would
                future.set_exception(exc)

    def taken(self, runner: Runner, inputs: np.ndarray) -> Future | None:
        """The run of ``runner`` on ``inputs`` started here, or None: parity runs it itself (a run
        never started, or stopped by ``close``, is not one)."""
        if inputs.shape != self.inputs.shape or not np.array_equal(inputs, self.inputs):
            return None
        future = self._runs.get(runner.cache_key)
        if future is None:
            return None
        if self._stop.is_set():
            wait([future])  # closed: a run in progress stops at its next image
        if future.cancelled() or (future.done() and isinstance(future.exception(), Stopped)):
            return None
        return future

    def models_done(self) -> None:
        """Wait until no run here reads a PyTorch module (a later pass may trace it: ``--cross-check``)."""
        for future in self._models:
            wait([future])

    def close(self) -> None:
        """Stop at the next image; what has not started never starts."""
        self._stop.set()
        for future in list(self._runs.values()):
            future.cancel()
