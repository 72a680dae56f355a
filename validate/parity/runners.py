"""Runners: each runs one back end on a batch of NCHW float inputs and returns NCHW outputs.

A runner knows nothing about tolerances or reports. It declares what it is -- its label, fixed
when it is made, and its capabilities as class attributes -- and returns float32 outputs (int8
models are dequantised in ``tensors.py``) with its median latency per image. A runtime invokes
every image twice: the first invoke's outputs are the row's; the second is the one timed, warm (a
first invoke may also load the interpreter and warm its caches: its time is a lottery), and
compared with the first: an interpreter that keeps state between invokes (TFLite 1.13.1's CONV_2D
with a runtime filter is right on the first invoke only) answers differently, and the row says so.
PyTorch, which checks no repeat, invokes only its first images twice, for its time (``timed_images``).
"""

from __future__ import annotations

import abc
import hashlib
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Iterable

import numpy as np


class RuntimeRefused(Exception):
    """The runtime itself refused to load or run the model (its own message): a verdict on the
    model, reported as a failed row, never an internal error."""


@dataclass(frozen=True)
class RunOutput:
    outputs: list[np.ndarray]  # per model output, (N, ...) float32 (NCHW for 4-D)
    ms_per_image: float  # the median per image, warm: each timed image's second invoke
    image_ms: tuple[float, ...] = ()  # each timed image's warm time, where the runner timed images one by one
    repeat_max_abs: float | None = None  # the largest difference between an image's two invokes; None: invoked once
    reported: str | None = None  # what a board's runtime called itself, where that is not what its label says

    @staticmethod
    def joined(parts: list["RunOutput"]) -> "RunOutput":
        """The run of a batch split into consecutive ``parts``, as one run (a part that ran no image adds nothing)."""
        parts = [p for p in parts if p.outputs]
        times = tuple(t for p in parts for t in p.image_ms)
        repeats = [p.repeat_max_abs for p in parts if p.repeat_max_abs is not None]
        return RunOutput([np.concatenate([p.outputs[k] for p in parts]) for k in range(len(parts[0].outputs))],
                         statistics.median(times), times, max(repeats) if repeats else None)


class Shares:
    """The images of one run, shared by a runner taking them from the first and a helper
    (``Runner.helper``) from the last, each image once. ``helper_took``: the helper's images, so a
    helper that fails leaves them to the runner (``run.execute``)."""

    def __init__(self, count: int):
        self._lock = threading.Lock()
        self._low, self._high = 0, count
        self.helper_took: list[int] = []

    def left(self) -> int:
        with self._lock:
            return self._high - self._low

    def close(self) -> None:
        """No more images for either: one of them failed."""
        with self._lock:
            self._high = self._low

    def from_first(self):
        while True:
            with self._lock:
                if self._low >= self._high:
                    return
                self._low += 1
                i = self._low - 1
            yield i

    def from_last(self):
        while True:
            with self._lock:
                if self._low >= self._high:
                    return
                self._high -= 1
                i = self._high
                self.helper_took.append(i)
            yield i


class Stopped(Exception):
    """A run was asked to stop between two images: parity is ending early (an interrupt, an error)."""


class Runner(abc.ABC):
    """One back end. ``runtime`` is the row's label, set once when the runner is made."""

    runtime: str
    #: runs on one thread (or in a child process), so it can run beside other such rows, one per
    #: core, and still time itself truly; PyTorch uses every core itself and runs alone
    side_by_side: ClassVar[bool] = True
    #: the board's own runtime: its word on whether the file runs is final
    board_runtime: ClassVar[bool] = False
    #: report any difference between an image's two invokes (a runtime, not the reference)
    repeats: ClassVar[bool] = True
    #: how many of the first images get the second, timed invoke; None, or a runner checking repeats: every one
    timed_images: ClassVar[int | None] = None
    #: how many of the inputs (the first ones) its row needs; None: all. A run shared by several rows
    #: (``cache_key``) computes what the most demanding of them needs (``run.execute``)
    images: int | None = None
    #: one invoke an image, the one timed, and no repeat check: for the reference kernels (their first
    #: invoke loads nothing, and they are slow) on a diagnostic sample, whose file the rows on every input
    #: check for repeats; for a check's run, which needs only the outputs (``onnx2tf.fast_run_differs``); and
    #: for validate --data's whole set (``dataset_score``)
    once: bool = False

    @property
    def cache_key(self) -> object:
        """Rows whose runners share a key compute the same thing and share one run."""
        return id(self)

    def split(self, parts: int) -> list["Runner"]:
        """Runners that together compute this one's run, each on a share of the images, side by
        side: for the slow ones (the reference kernels)."""
        return [self]

    def helper(self) -> "Runner | None":
        """A runner computing what this one does (its own interpreter), to take this run's last
        images on a core that comes free while it runs (``Shares``); None: this runner alone."""
        return None

    def prepare(self) -> None:  # noqa: B027 -- optional: most runners load nothing ahead
        """Load what the first image would (a helper does, before it takes one): by default nothing."""

    @abc.abstractmethod
    def _run_one(self, x: np.ndarray) -> list[np.ndarray]:
        """One image, ``(1, 3, H, W)`` float32 -> outputs with batch 1."""

    def _run_timed(self, x: np.ndarray) -> list[np.ndarray]:
        """An image's second, timed invoke: by default as the first."""
        return self._run_one(x)

    def run(self, inputs: np.ndarray, stop: threading.Event | None = None, indices: Iterable[int] | None = None) -> RunOutput:
        """Every image, or those ``indices`` yields (a share: ``Shares``), in the images' order."""
        per_image, times, repeat = {}, {}, None
        for i in range(inputs.shape[0]) if indices is None else indices:
            if stop is not None and stop.is_set():
                raise Stopped(self.runtime)
            x = np.ascontiguousarray(inputs[i : i + 1], dtype=np.float32)
            t0 = time.perf_counter()
            first = [np.array(o, dtype=np.float32) for o in self._run_one(x)]  # copies: a runtime may reuse its buffers
            per_image[i] = first
            if self.once:
                times[i] = (time.perf_counter() - t0) * 1e3
                continue
            if not self.repeats and self.timed_images is not None and i >= self.timed_images:
                continue
            t0 = time.perf_counter()
            second = self._run_timed(x)  # warm: the one timed
            times[i] = (time.perf_counter() - t0) * 1e3
            if self.repeats:
                diff = max(_difference(a, np.asarray(b, np.float32)) for a, b in zip(first, second))
                repeat = diff if repeat is None else max(repeat, diff)
        if not per_image:
            return RunOutput([], float("nan"))  # a share that found every image taken
        ran = sorted(per_image)
        outputs = [np.concatenate([per_image[i][k] for i in ran]).astype(np.float32) for k in range(len(per_image[ran[0]]))]
        timed = [times[i] for i in sorted(times)]
        return RunOutput(outputs, statistics.median(timed), tuple(timed), repeat)


def _difference(a: np.ndarray, b: np.ndarray) -> float:
    """The largest |a - b|, where NaN matches NaN (a NaN output fails its row by itself) and a
    NaN against a number is infinitely different."""
    both_nan = np.isnan(a) & np.isnan(b)
    diff = np.abs(np.where(both_nan, 0.0, a.astype(np.float64) - b.astype(np.float64)))
    return float(np.max(np.nan_to_num(diff, nan=np.inf), initial=0.0))


class TorchRunner(Runner):
    side_by_side = False
    repeats = False  # PyTorch is the reference, or the folded model beside it
    # its time on the first images only: a second invoke of every image is a tenth of parity's time
    timed_images = 3

    def __init__(self, module, *, runtime: str = "pytorch"):
        self.module = module.eval()
        self.runtime = runtime

    @property
    def cache_key(self) -> object:
        """The same module object computes the same thing (``early.EarlyRuns`` keeps it alive)."""
        return ("pytorch", id(self.module))

    def _run_one(self, x):
        from edgeport.models.inference import forward

        return forward(self.module, x)

    def _run_timed(self, x):
        """On one thread, like every other runtime here (and a board): PyTorch's own threads
        on a busy machine make its time a lottery, the medians of ``folded`` and ``reference``
        swapping places between runs (docs/measured.md). The outputs are the first invoke's, on every thread."""
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return self._run_one(x)
        finally:
            torch.set_num_threads(threads)


class OnnxRuntimeRunner(Runner):
    """Loads its session on first use (a run taken from ``early.EarlyRuns`` never loads one)."""

    def __init__(self, path: Path, *, runtime: str = "onnxruntime"):
        from edgeport._lazy import require

        self.ort = require("onnxruntime", purpose="ONNX Runtime parity")
        self.path, self.runtime, self.session = Path(path), runtime, None
        self._key = ("onnxruntime", hashlib.sha256(self.path.read_bytes()).hexdigest())

    @property
    def cache_key(self) -> object:
        """The same graph computes the same thing."""
        return self._key

    def _run_one(self, x):
        if self.session is None:
            opts = self.ort.SessionOptions()
            opts.intra_op_num_threads = 1
            self.session = self.ort.InferenceSession(str(self.path), opts, providers=["CPUExecutionProvider"])
            self.input_name = self.session.get_inputs()[0].name
        return self.session.run(None, {self.input_name: x})
