"""ms/img is warm: each image's second invoke is the one timed (the first may load the runtime)."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from edgeport.validate.parity.runners import Runner, TorchRunner

COLD_S = 0.2


class ColdStart(Runner):
    """Slow on its first invoke of each image (an interpreter that loads, allocates, pages in)."""

    runtime = "cold"

    def __init__(self):
        self.seen: set[bytes] = set()

    def _run_one(self, x):
        key = x.tobytes()
        if key not in self.seen:
            self.seen.add(key)
            time.sleep(COLD_S)
        return [x[:, :1] * 2.0]


class SlowFirstCall(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.threads: list[int] = []

    def forward(self, x):
        self.calls += 1
        self.threads.append(torch.get_num_threads())
        if self.calls == 1:
            time.sleep(COLD_S)
        return x[:, :1] * 2.0


@pytest.fixture
def threads():
    """PyTorch on two threads, whatever the suite set (tests/conftest.py: one), so that the timed
    invoke's one thread is told apart from the others'."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield 2
    torch.set_num_threads(before)


def test_a_runtime_row_times_each_images_second_invoke():
    x = np.random.default_rng(0).random((3, 3, 4, 4), dtype=np.float32)
    run = ColdStart().run(x)
    assert len(run.image_ms) == 3 and max(run.image_ms) < COLD_S * 1e3 / 4, run.image_ms
    assert run.ms_per_image < COLD_S * 1e3 / 4 and run.repeat_max_abs == 0.0
    np.testing.assert_array_equal(run.outputs[0], x[:, :1] * 2.0)


def test_pytorch_is_timed_warm_on_one_thread_and_keeps_no_repeat_check(threads):
    module = SlowFirstCall()
    run = TorchRunner(module).run(np.zeros((2, 3, 4, 4), np.float32))
    assert module.threads == [threads, 1, threads, 1], "each image's second invoke is the timed one, on one thread"
    assert torch.get_num_threads() == threads, "PyTorch's threads are given back"
    assert max(run.image_ms) < COLD_S * 1e3 / 4, run.image_ms
    assert run.repeat_max_abs is None, "PyTorch is the reference: no repeat check"


def test_pytorch_is_timed_on_its_first_images_and_computes_every_one(threads):
    module = SlowFirstCall()
    x = np.random.default_rng(1).random((TorchRunner.timed_images + 2, 3, 4, 4), dtype=np.float32)
    run = TorchRunner(module).run(x)
    assert module.threads == [threads, 1] * TorchRunner.timed_images + [threads, threads], \
        "a second, timed invoke for the first images only"
    assert len(run.image_ms) == TorchRunner.timed_images
    np.testing.assert_array_equal(run.outputs[0], x[:, :1] * 2.0)


def test_a_runtime_that_checks_repeats_invokes_every_image_twice_whatever_it_times():
    class Checked(ColdStart):
        timed_images = 1  # ignored: a repeat check needs every image's second invoke

    x = np.random.default_rng(2).random((3, 3, 4, 4), dtype=np.float32)
    run = Checked().run(x)
    assert len(run.image_ms) == 3 and run.repeat_max_abs == 0.0


def test_the_reference_kernels_on_a_diagnostic_sample_invoke_each_image_once(tmp_path):
    """``Runner.once``: one invoke an image, timed, no repeat check -- the reference kernels' sample
    (they load nothing on a first invoke); their rows on every input, and every other runtime's,
    invoke twice and check repeats. The two runs are not one run (``cache_key``)."""
    from edgeport.validate.parity.tflite_runner import TFLiteRunner

    calls = []

    class Counted(ColdStart):
        def _run_one(self, x):
            calls.append(1)
            time.sleep(0.01)
            return [x[:, :1] * 2.0]

    x = np.random.default_rng(0).random((2, 3, 4, 4), dtype=np.float32)
    once = Counted()
    once.once = True
    run = once.run(x)
    assert len(calls) == 2 and run.repeat_max_abs is None and len(run.image_ms) == 2 and run.ms_per_image >= 10
    calls.clear()
    assert Counted().run(x).repeat_max_abs == 0.0 and len(calls) == 4

    path = tmp_path / "m.tflite"
    path.write_bytes(b"any bytes: only hashed here")
    sample = TFLiteRunner(path, [], kernels="reference", images=2)
    every = TFLiteRunner(path, [], kernels="reference")
    optimised = TFLiteRunner(path, [], images=2)
    assert sample.once and not every.once and not optimised.once
    assert sample.cache_key != every.cache_key and sample.split(2)[1].once
