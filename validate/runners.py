"""Runners: each runs one back end on a batch of NCHW float inputs and returns NCHW outputs.

A runner knows nothing about tolerances or reports. Every runner returns float32 outputs
(int8 models are dequantised in ``tensors.py``) and its median latency per image.
"""

from __future__ import annotations

import abc
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np


class RuntimeRefused(Exception):
    """The runtime itself refused to load or run the model (its own message): a verdict on the
    model, reported as a failed row, never an internal error."""


@dataclass(frozen=True)
class RunOutput:
    outputs: list[np.ndarray]  # per model output, (N, C, H, W) float32
    ms_per_image: float  # the median
    image_ms: tuple[float, ...] = ()  # each image's time, where the runner timed images one by one

    @staticmethod
    def joined(parts: list["RunOutput"]) -> "RunOutput":
        """The run of a batch split into consecutive ``parts``, as one run."""
        times = tuple(t for p in parts for t in p.image_ms)
        return RunOutput([np.concatenate([p.outputs[k] for p in parts]) for k in range(len(parts[0].outputs))],
                         statistics.median(times), times)


class Stopped(Exception):
    """A run was asked to stop between two images: parity is ending early (an interrupt, an error)."""


class Runner(abc.ABC):
    runtime: str  # "pytorch", "onnxruntime", "tflite", ...
    #: runs on one thread (or in a child process), so it can run beside other such rows, one per
    #: core, and still time itself truly; PyTorch uses every core itself and runs alone
    side_by_side: bool = True

    def split(self, parts: int) -> list["Runner"]:
        """Runners that together compute this one's run, each on a share of the images, side by
        side: for the slow ones (the reference kernels). By default, this runner alone."""
        return [self]

    @abc.abstractmethod
    def _run_one(self, x: np.ndarray) -> list[np.ndarray]:
        """One image, ``(1, 3, H, W)`` float32 -> outputs with batch 1."""

    def run(self, inputs: np.ndarray, stop: threading.Event | None = None) -> RunOutput:
        per_image, times = [], []
        for i in range(inputs.shape[0]):
            if stop is not None and stop.is_set():
                raise Stopped(self.runtime)
            t0 = time.perf_counter()
            per_image.append(self._run_one(np.ascontiguousarray(inputs[i : i + 1], dtype=np.float32)))
            times.append((time.perf_counter() - t0) * 1e3)
        outputs = [np.concatenate([img[k] for img in per_image]).astype(np.float32) for k in range(len(per_image[0]))]
        return RunOutput(outputs, statistics.median(times), tuple(times))


class TorchRunner(Runner):
    runtime = "pytorch"
    side_by_side = False

    def __init__(self, module):
        self.module = module.eval()

    def _run_one(self, x):
        from edgeport.models.inference import forward

        return forward(self.module, x)


class OnnxRuntimeRunner(Runner):
    runtime = "onnxruntime"

    def __init__(self, path: Path):
        from edgeport._lazy import require

        ort = require("onnxruntime", purpose="ONNX Runtime parity")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self.input_name = self.session.get_inputs()[0].name

    def _run_one(self, x):
        return self.session.run(None, {self.input_name: x})
