"""The reference kernels' rows in a child process (``validate/parity/tflite_runner.py: run_in_child``): the same
run as in this process, and a kernel that aborts is the row's refusal, not edgeport's end."""

from __future__ import annotations

import numpy as np
import pytest

from edgeport.ops.tflite_graph import Graph, Quant
from edgeport.ops.tflite_run import load_interpreter
from edgeport.validate.parity.runners import Runner, RuntimeRefused
from edgeport.validate.parity.tflite_runner import TFLiteRunner

pytestmark = pytest.mark.slow  # a process per run


def _softmax(tmp_path, width: int):
    """One int8 SOFTMAX over rows of ``width`` values, NHWC (1, 1, 8, width). TFLite's reference
    kernels abort the process on rows of 1,600 (MobileViT's attention at 640 px did)."""
    g = Graph.empty()
    x = g.add_tensor("x", (1, 1, 8, width), "int8", Quant(0.1, 0))
    y = g.add_tensor("y", (1, 1, 8, width), "int8", Quant(1 / 256, -128))
    g.add(g.new_op("SOFTMAX", [x], [y], "SoftmaxOptions", beta=1.0))
    g.set_io([x], [y])
    path = tmp_path / f"softmax_{width}.tflite"
    path.write_bytes(g.to_bytes())
    return path, [(1, width, 1, 8)]


def _inputs(width: int) -> np.ndarray:  # NCHW, as parity gives every runner
    return np.random.default_rng(0).random((2, width, 1, 8), dtype=np.float32)


def test_the_child_computes_what_this_process_computes(tmp_path):
    path, expected = _softmax(tmp_path, 64)
    runner = TFLiteRunner(path, expected, kernels="reference")
    child, here = runner.run(_inputs(64)), Runner.run(TFLiteRunner(path, expected, kernels="reference"), _inputs(64))
    assert len(child.outputs) == 1 and np.array_equal(child.outputs[0], here.outputs[0])
    assert child.repeat_max_abs == 0.0 and len(child.image_ms) == 2


def test_a_kernel_that_aborts_is_the_rows_refusal_and_is_not_run_here_again(tmp_path):
    path, expected = _softmax(tmp_path, 1600)
    with pytest.raises(RuntimeRefused, match=r"reference kernels\) aborted the process running the file \(SIGABRT\)"):
        TFLiteRunner(path, expected, kernels="reference").run(_inputs(1600))
    with pytest.raises(RuntimeError, match="aborted the process"):  # the divergence search, the cross-check: refused, not run
        load_interpreter(path, kernels="reference")
    load_interpreter(path, kernels="optimized")  # XNNPACK's kernels run it here as before
    # nor the files the analyses make from it (every tensor an output; ops alone): they would abort this process
    from edgeport.validate.parity.divergence import every_tensor_values, tflite_intermediates

    x = _inputs(1600)[:1]
    with pytest.raises(RuntimeError, match="aborted the process"):
        tflite_intermediates(path, x, "both", work=tmp_path)
    with pytest.raises(RuntimeError, match="aborted the process"):
        every_tensor_values(path, np.zeros((1, 1, 8, 1600), np.int8), tmp_path)


def test_a_failing_rows_divergence_and_op_errors_share_one_run_of_the_file(tmp_path, monkeypatch):
    """The quantised file with every tensor an output, on the reference kernels, for the first
    image: the divergence's candidates and the op errors' accumulated error are that one run."""
    from edgeport.ops import tflite_run
    from edgeport.validate.parity.divergence import tflite_intermediates
    from edgeport.validate.parity.op_errors import op_errors

    from .test_op_errors import _chain

    fine = Quant(1 / 64, 0)
    (tmp_path / "f.tflite").write_bytes(_chain("float32", {}))
    (tmp_path / "q.tflite").write_bytes(_chain("int8", {"x": fine, "a": fine, "b": Quant(0.25, -128), "c": fine}))
    runs = []
    real = tflite_run.run_tflite
    monkeypatch.setattr(tflite_run, "run_tflite", lambda path, *a, **k: runs.append((path.name, k.get("kernels"))) or real(path, *a, **k))
    x = np.random.default_rng(0).uniform(-1.9, 1.9, (1, 3, 4, 4)).astype(np.float32)
    candidates = tflite_intermediates(tmp_path / "q.tflite", x, "nhwc", work=tmp_path)
    found = op_errors(tmp_path / "q.tflite", tmp_path / "f.tflite", x, tmp_path)
    assert [t.producer for t in candidates] == ["a", "b", "c"] and {e.tensor for e in found} == {"a", "b", "c"}
    on_reference = [name for name, kernels in runs if kernels in (None, "reference")]
    assert on_reference == ["every_tensor_q.tflite", "op_errors_alone.tflite"], runs  # the whole file once, then each op alone
