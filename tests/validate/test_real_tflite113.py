"""The tflite-1.13 board's own runtime is the judge: the real TensorFlow Lite 1.13.1.

`edgeport boards install tflite-1.13` (`make setup-boards`, run by `.ci/run` where a python3.7
exists) builds it in its own Python 3.7 environment, in edgeport's home ($EDGEPORT_HOME, else
~/.local/share/edgeport), where the CLI and these tests find it. `convert --board tflite-1.13` then adds a row from the real
runtime beside the emulator's, and the two agree within 1e-6 x max|output|. A SiLU detector
(every YOLO: LOGISTIC + MUL), which TFLite's tabulated op versions would refuse, is runnable
and runs there exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from edgeport.ops.tflite_model import read_tflite
from edgeport.validate.board.profiles import load_board
from edgeport.validate.board.runtime import LocalPython, installed_python
from edgeport.validate.parity.board_runner import BoardRunner
from edgeport.validate.parity.tflite_runner import TFLiteRunner

pytestmark = pytest.mark.slow
REAL = "board:tflite-1.13 (TFLite 1.13.1)"

SILU_MODULE = '''
import torch.nn as nn
from edgeport.models.registry import build_model


def build():
    """pdet-n with SiLU for every activation: what a YOLO's activations become in TFLite."""
    model, _ = build_model("pdet-n")
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, (nn.ReLU, nn.ReLU6)):
                setattr(module, name, nn.SiLU())
    return model
'''


def _runtime() -> Path:
    python = installed_python(load_board("tflite-1.13"))
    if python is None:
        pytest.skip("the real TFLite 1.13.1 is not installed: `make setup-boards` (needs a python3.7)")
    return python


def _silu_checkpoint(tmp_path: Path) -> tuple[Path, str]:
    (tmp_path / "silu_det.py").write_text(SILU_MODULE)
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        import silu_det
    finally:
        sys.path.remove(str(tmp_path))
    torch.manual_seed(0)
    model = silu_det.build()
    from tests.conftest import perturb_bn

    perturb_bn(model, 3)
    ckpt = tmp_path / "silu.pt"
    torch.save({"model": model.state_dict()}, ckpt)
    return ckpt, "silu_det:build"


@pytest.mark.parametrize("case", ["bilinear", "silu"])
def test_tflite_113_rows_come_from_the_real_runtime_and_match_the_emulator(tmp_path, random_checkpoint, cli, case):
    python = _runtime()
    if case == "bilinear":  # the write-up's detector: the exact x2 rewrite
        ckpt, arch = random_checkpoint("pdet-n-bilinear", 1), []
    else:
        path, name = _silu_checkpoint(tmp_path)
        ckpt, arch = path, ["--arch", name]
    out = tmp_path / "old"
    proc = cli("convert", str(ckpt), *arch, "--imgsz", "96", "--board", "tflite-1.13", "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    model = out / "model_float32.tflite"
    ops = {o.name for o in read_tflite(model).ops}
    if case == "silu":
        assert "LOGISTIC" in ops  # tabulated at 1.14.0, present in 1.13.1
    report = json.loads((out / "report.json").read_text())
    rows = {r["runtime"]: r for r in report["results"]}
    assert rows[REAL]["passed"] and rows[REAL]["verdict"]["judge"] == "runtime", proc.stdout[-3000:]
    assert rows["board:tflite-1.13 (emulated)"]["passed"] and report["board_runtime"]["real"] is True
    assert "the board's own runtime ran every file" in proc.stdout

    # the real runtime's numbers equal the emulator's (reference kernels on the same file)
    x = np.random.default_rng(0).random((2, 3, 96, 96), dtype=np.float32)
    from edgeport._lazy import require

    ort = require("onnxruntime")
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    per_image = [session.run(None, {"images": x[i : i + 1]}) for i in range(len(x))]
    refs = [np.concatenate(outs) for outs in zip(*per_image)]
    expected = [(1, *r.shape[1:]) for r in refs]
    real = BoardRunner(LocalPython(python, what="TFLite 1.13.1"), model, expected, runtime="board:tflite-1.13", workdir=tmp_path).run(x)
    emulated = TFLiteRunner(model, expected, kernels="reference").run(x)
    for got, emu, ref in zip(real.outputs, emulated.outputs, refs, strict=True):
        scale = float(np.abs(ref).max())
        assert float(np.abs(got - emu).max()) / scale <= 1e-6
        assert float(np.abs(got - ref).max()) / scale <= 1e-5  # and PyTorch's ONNX export, as the gate says


def test_the_shipped_tflite_113_op_table_is_what_the_real_runtime_has():
    from edgeport.validate.board.probe import probe

    runtime, table = probe(LocalPython(_runtime(), what="TFLite 1.13.1"))
    assert (runtime["runtime"], runtime["version"]) == ("TFLite", "1.13.1")
    shipped = load_board("tflite-1.13")
    assert {op: frozenset(vs) for op, vs in table.items()} == shipped.op_table.versions
    assert frozenset(runtime["uint8_ops"]) == shipped.uint8.ops
    # what it was measured doing: MEAN wraps around on uint8 instead of clamping
    assert "got 8, expected 255" in runtime["uint8_not"]["MEAN"]


def test_the_worker_runs_tensorflow_1_lite_alone_and_answers_what_tensorflow_whole_answers(tmp_path):
    """On TFLite 1.13.1 the board worker loads TensorFlow's own interpreter without importing
    TensorFlow (``worker._tensorflow_1_lite``: 0.3 s a run instead of 1.3 s,
    benchmarks/board_worker_bench.py); every op's refusal and every uint8 output of the probe are
    the same as with TensorFlow imported whole, and TensorFlow is not imported."""
    import subprocess

    from edgeport.validate.board import uint8_probe
    from edgeport.validate.board.probe import builtin_ops, one_op_model
    from edgeport.validate.board.runtime import WORKER

    python = _runtime()
    shipped = WORKER.read_text()
    whole = tmp_path / "worker_whole.py"
    whole.write_text(shipped.replace("found = _tensorflow_1_lite()", "found = None", 1))
    answers = {}
    for name, worker in (("alone", WORKER), ("whole", whole)):
        folder = tmp_path / name
        (folder / "probes").mkdir(parents=True)
        (folder / "uint8").mkdir()
        for op in builtin_ops()[:40]:
            for version in (1, 2):
                (folder / "probes" / f"{op}.{version}.tflite").write_bytes(one_op_model(op, version))
        for op, model in uint8_probe.probe_models().items():
            (folder / "uint8" / f"{op}.tflite").write_bytes(model)
            np.save(folder / "uint8" / f"{op}.input.npy", uint8_probe.probe_input(op))
        said = subprocess.run([str(python), "-c", "import runpy, sys\nworker, sys.argv = sys.argv[1], ['board_worker.py', 'probe', sys.argv[2]]\n"
                               "try:\n    runpy.run_path(worker, run_name='__main__')\nexcept SystemExit:\n    pass\n"
                               "print('tensorflow' in sys.modules)", str(worker), str(folder)],
                              capture_output=True, text=True, check=True, timeout=120)
        result = json.loads((folder / "result.json").read_text())
        outputs = {p.name: p.read_bytes() for p in sorted((folder / "outputs").glob("*.npy"))}
        answers[name] = (said.stdout.split()[-1], result, outputs)
    assert answers["alone"][0] == "False" and answers["whole"][0] == "True"
    assert answers["alone"][1]["version"] == "1.13.1" and answers["alone"][1]["accepted"] and answers["alone"][1]["refused"]
    assert answers["alone"][1] == answers["whole"][1]
    assert answers["alone"][2] and answers["alone"][2] == answers["whole"][2]
