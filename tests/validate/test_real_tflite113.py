"""The tflite-1.13 board's own runtime: what edgeport writes for it runs there, exactly.

The real TensorFlow Lite 1.13.1 lives in its own Python 3.7 environment (`make
setup-tflite113`, run by `.ci/run` where a python3.7 exists). The exact bilinear x2 rewrite
that the installed onnx2tf line writes for `--board tflite-1.13` must load and run there and
match ONNX Runtime within 1e-6 x max|output|; every op version of the file the board profile
accepts only on evidence (`[verified]` in validate/boards/tflite-1.13.toml) is exercised by it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from edgeport.validate.boards import load_board
from edgeport.validate.tflite_model import read_tflite

REPO = Path(__file__).resolve().parents[2]
RUNTIME = REPO / ".venv-tflite113" / "bin" / "python"
pytestmark = pytest.mark.slow


def _runtime() -> str:
    if not RUNTIME.exists():
        pytest.skip("the real TFLite 1.13.1 is not installed: `make setup-tflite113` (needs a python3.7)")
    return str(RUNTIME)


def test_the_tflite_113_rewrite_runs_exactly_on_the_real_runtime(tmp_path, random_checkpoint, cli):
    python = _runtime()
    out = tmp_path / "old"
    proc = cli("convert", str(random_checkpoint("pdet-n-bilinear", 1)), "--imgsz", "96", "--board", "tflite-1.13", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    model = out / "model_float32.tflite"
    x = np.random.default_rng(0).random((1, 3, 96, 96), dtype=np.float32)
    np.save(tmp_path / "x.npy", np.ascontiguousarray(x.transpose(0, 2, 3, 1)))
    run = subprocess.run([python, str(Path(__file__).with_name("tflite113_run.py")), str(model), str(tmp_path / "x.npy"),
                          str(tmp_path / "y.npz")], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    got = np.load(tmp_path / "y.npz")
    assert str(got["version"]) == "1.13.1"
    from edgeport._lazy import require

    ort = require("onnxruntime")
    refs = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"]).run(None, {"images": x})
    outs = [got[k].transpose(0, 3, 1, 2) for k in got.files if k.startswith("out")]
    assert len(outs) == len(refs)
    for ref in refs:
        (y,) = [o for o in outs if o.shape == ref.shape]
        rel = float(np.abs(y - ref).max() / np.abs(ref).max())
        assert rel <= 1e-6, f"TFLite 1.13.1 differs from ONNX Runtime by {rel:.3g} x max|output|"
    # the ops the board profile accepts on evidence alone are those onnx2tf 2.x writes for this
    # rewrite: on that line (Python 3.12+), this very run is their evidence
    from edgeport.convert.to_tflite_pass import installed_backend

    board = load_board("tflite-1.13")
    used = {(o.name, o.version) for o in read_tflite(model).ops}
    exercised = {op for op, v in board.verified.items() if (op, v.max_version) in used}
    if installed_backend().generation >= 2:
        assert exercised == set(board.verified), f"[verified] ops not re-checked on the real runtime: {set(board.verified) - exercised}"
