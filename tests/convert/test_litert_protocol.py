"""litert-torch's worker protocol where int8 is quantised from a file edgeport rewrites
(``convert/converters/litert.py: convert_variants, _answer``), with a stand-in worker: no litert-torch needed.

The stand-in does what ``litert_worker.py`` does with a job that says ``ask``: it writes float32,
touches ``float32.done``, reads the file to quantise from its standard input, and writes that file
as its "int8" (so the test sees what edgeport answered), unless its folder's ``mode`` says to end
otherwise."""

from __future__ import annotations

import json
import sys
import textwrap
from dataclasses import replace

import numpy as np
import pytest
import torch

from edgeport.convert.base import Exported
from edgeport.convert.context import RunContext
from edgeport.convert.converters import litert
from edgeport.ops.tflite_graph import Graph

from .test_int8_groups import _tflite_head

pytestmark = pytest.mark.slow  # a process per conversion

WORKER = textwrap.dedent("""
    import json, shutil, sys, time
    from pathlib import Path
    folder = Path(sys.stdin.readline().strip())
    mode = (folder.parent / "mode").read_text()
    shutil.copy(folder.parent / "head.tflite", folder / "model_float32.tflite")
    if mode == "hang":
        time.sleep(60)
    if not json.loads((folder / "job.json").read_text())["ask"]:  # float32 only
        (folder / "result.json").write_text(json.dumps({"written": ["float32"], "errors": {}}))
        sys.exit(0)
    (folder / "float32.done").touch()
    answer = sys.stdin.readline().strip()
    if mode == "die":
        sys.exit(1)
    shutil.copy(answer, folder / "model_int8.tflite")
    (folder / "result.json").write_text(json.dumps({"written": ["float32", "int8"], "errors": {}}))
""")
BOXES = [[(1, 0, 4, 64.0)]]


def _convert(tmp_path, monkeypatch, mode: str, plans, timeout_s: float = 120):
    (tmp_path / "worker.py").write_text(WORKER)
    (tmp_path / "head.tflite").write_bytes(_tflite_head()[0])
    (tmp_path / "mode").write_text(mode)
    monkeypatch.setattr(litert, "require", lambda: sys.executable)
    monkeypatch.setattr(litert, "_worker_argv", lambda python: [sys.executable, str(tmp_path / "worker.py")])
    seen = []
    got = litert.convert_variants(torch.nn.Conv2d(3, 4, 1).eval(), np.zeros((2, 3, 8, 8), np.float32), tmp_path / "work",
                                  int8=True, timeout_s=timeout_s, plans=plans, meanwhile=lambda files: seen.append(dict(files)))
    return got, seen


def _scaled(path) -> bool:
    g = Graph(path.read_bytes())
    return any("edgeport_int8_scaled" in g.tensor_name(t) for op in g.ops for t in op.outputs)


def test_the_worker_quantises_the_file_with_the_groups_apart(tmp_path, monkeypatch):
    got, seen = _convert(tmp_path, monkeypatch, "ok", BOXES)
    assert set(got.files) == {"float32", "int8"} and not got.not_written and got.plans == BOXES
    assert _scaled(got.files["int8"]) and not _scaled(got.files["float32"])  # float32: the model's own values
    assert seen == [{}, {"float32": got.files["float32"]}]  # parity's early runs get float32 once it is written


def test_groups_out_of_reach_quantise_the_float32_file_as_it_is(tmp_path, monkeypatch):
    got, _ = _convert(tmp_path, monkeypatch, "ok", [[(1, 0, 6, 64.0)]])  # the first keypoint's x alone
    assert set(got.files) == {"float32", "int8"} and got.plans is None and not _scaled(got.files["int8"])


def test_a_worker_that_dies_after_float32_keeps_float32_and_names_int8(tmp_path, monkeypatch):
    got, _ = _convert(tmp_path, monkeypatch, "die", BOXES)
    assert set(got.files) == {"float32"} and "failed after writing float32" in got.not_written["int8"] and got.plans is None


def test_a_worker_past_its_time_is_ended_and_named(tmp_path, monkeypatch):
    got, _ = _convert(tmp_path, monkeypatch, "hang", BOXES, timeout_s=3)
    assert not got.files and all("did not finish within 3 s" in why for why in got.not_written.values())
    assert not (tmp_path / "work" / "float32.done").exists()
    assert json.loads((tmp_path / "work" / "job.json").read_text())["ask"] is True


def _handed_over(tmp_path, monkeypatch, mode: str) -> list:
    """The stand-in worker set up as ``_convert`` does; the processes handed a job, as they start."""
    (tmp_path / "worker.py").write_text(WORKER)
    (tmp_path / "head.tflite").write_bytes(_tflite_head()[0])
    (tmp_path / "mode").write_text(mode)
    monkeypatch.setattr(litert, "require", lambda: sys.executable)
    monkeypatch.setattr(litert, "_worker_argv", lambda python: [sys.executable, str(tmp_path / "worker.py")])
    started, child = [], RunContext.child

    def recorded(self, *args, **kwargs):
        made = child(self, *args, **kwargs)
        started.append(made.proc)
        return made

    monkeypatch.setattr(RunContext, "child", recorded)
    return started


def test_the_worker_converts_while_the_graph_is_exported_and_the_conversion_takes_its_files(tmp_path, monkeypatch):
    """litert-torch reads the module, not the ONNX graph: the export pass hands it its job first
    (``Converter.begin``), and the conversion pass takes that worker's files, starting none."""
    from edgeport.convert.passes.export_onnx_pass import ExportOnnxPass

    from .conftest import config
    from .test_tflite_passes import _prepared

    started = _handed_over(tmp_path, monkeypatch, "hang")
    prepared = replace(_prepared(8), module=torch.nn.Conv2d(3, 4, 1).eval())
    cfg = config(tmp_path, converter="litert-torch", early_parity=False, int8=False)

    def export_while_it_converts(*args, **kwargs):
        assert len(started) == 1 and started[0].poll() is None  # handed its job, and converting
        raise RuntimeError("the export failed")

    monkeypatch.setattr("edgeport.convert.passes.export_onnx_pass.export_onnx", export_while_it_converts)
    with pytest.raises(RuntimeError, match="the export failed"):
        ExportOnnxPass().run(prepared, cfg)
    cfg.context.close()  # (the pipeline's end)
    assert started[0].poll() is not None  # a pass that failed after the hand-over leaves no worker behind
    (tmp_path / "mode").write_text("ok")
    run = RunContext()
    began = litert.LiteRTTorch().begin(prepared, tmp_path, quantised=None, timeout_s=120, context=run)
    got = litert.LiteRTTorch().convert(replace(Exported(prepared, tmp_path / "model.onnx"), begun=began), tmp_path,
                                       quantised=None, timeout_s=120, context=run)
    assert set(got.files) == {"float32"} and not got.not_written and len(started) == 2  # the one begun: none started
    assert started[1].returncode == 0
    # begun from inputs a pass replaced since (a prepared model of its own): that worker ended, the conversion begun again
    stale = litert.LiteRTTorch().begin(prepared, tmp_path, quantised=None, timeout_s=120, context=run)
    got = litert.LiteRTTorch().convert(replace(Exported(replace(prepared), tmp_path / "model.onnx"), begun=stale), tmp_path,
                                       quantised=None, timeout_s=120, context=run)
    assert set(got.files) == {"float32"} and len(started) == 4 and started[2].poll() is not None and started[3].returncode == 0
    # what another converter began (--cross-check after onnx2tf: its calibration files): begun here
    got = litert.LiteRTTorch().convert(replace(Exported(prepared, tmp_path / "model.onnx"), begun=object()), tmp_path,
                                       quantised=None, timeout_s=120, context=run)
    run.close()
    assert set(got.files) == {"float32"} and len(started) == 5
