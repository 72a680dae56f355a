"""End to end through the console entry point: real onnx2tf, ONNX Runtime and TFLite."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from edgeport.folders import MARKER
from edgeport.models.registry import build_model

# what convert writes, and the marker that makes the folder provably edgeport's
OUTPUTS = {"model.onnx", "model_float32.tflite", "model_int8.tflite", "report.json", "report.md", "report.html", MARKER}


def _no_leftovers(root: Path) -> None:
    assert not [p for p in root.rglob(".edgeport-staging-*")], "a staging folder was left behind"


def _bad(tmp_path, cli, *args):
    out = tmp_path / "runs" / "out"
    proc = cli("convert", "--imgsz", "64", *args, "--out", str(out))
    return _one_error_line(proc, tmp_path, out)


def _one_error_line(proc, tmp_path, out):
    assert proc.returncode == 2, proc.stderr
    # progress lines of the stages that ran may precede it; the error itself is one line, last
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "error:" in line]
    assert len(errors) == 1 and lines[-1] == errors[0], proc.stderr
    assert all(line.startswith("ok ") for line in lines[:-1]), proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists() and not (tmp_path / "runs").exists(), "partial artifacts left behind"
    _no_leftovers(tmp_path)
    return lines[-1]


@pytest.mark.slow  # a process
def test_bad_input_through_the_console_script(tmp_path, cli):
    """One smoke test through a fresh process; the cases below run in this one."""
    assert "does not exist" in _bad(tmp_path, cli, str(tmp_path / "missing.pt"), "--arch", "pdet-n")


def test_bad_inputs_exit_2_with_one_line(tmp_path, run_inproc, pdet_n):
    cli = run_inproc
    sd = pdet_n.state_dict()
    ckpt = tmp_path / "ok.pt"
    torch.save({"model": {"module." + k: v for k, v in sd.items()}}, ckpt)

    (tmp_path / "random.pt").write_bytes(os.urandom(2048).replace(b"PK", b"QK").replace(b"\x80", b"\x81"))
    assert "not a PyTorch checkpoint" in _bad(tmp_path, cli, str(tmp_path / "random.pt"), "--arch", "pdet-n")
    data = ckpt.read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 3])
    assert "truncated or corrupt" in _bad(tmp_path, cli, str(tmp_path / "cut.pt"), "--arch", "pdet-n")
    torch.save(pdet_n, tmp_path / "pickled.pt")
    assert "--trust-checkpoint" in _bad(tmp_path, cli, str(tmp_path / "pickled.pt"))
    assert "valid: pdet-n" in _bad(tmp_path, cli, str(ckpt), "--arch", "resnet")
    assert "shape mismatch" in _bad(tmp_path, cli, str(ckpt), "--arch", "pdet-s")
    assert "pass --arch" in _bad(tmp_path, cli, str(ckpt))
    line = _bad(tmp_path, cli, str(ckpt), "--arch", "pdet-n", "--imgsz", "100")
    assert "multiple of the model's stride 32" in line
    empty = tmp_path / "calib"
    empty.mkdir()
    assert "holds no images" in _bad(tmp_path, cli, str(ckpt), "--arch", "pdet-n", "--calib", str(empty))
    assert "not a whole number" in _bad(tmp_path, cli, str(ckpt), "--imgsz", "big")


def test_onnx_file_is_not_a_checkpoint(tmp_path, run_inproc, pdet_n):
    cli = run_inproc
    onnx_path = tmp_path / "model.onnx"
    torch.onnx.export(pdet_n, (torch.zeros(1, 3, 64, 64),), str(onnx_path), dynamo=False)
    assert "ONNX" in _bad(tmp_path, cli, str(onnx_path), "--arch", "pdet-n")


def test_non_empty_out_needs_force(tmp_path, run_inproc, demo_ckpt):
    cli = run_inproc
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    proc = cli("convert", str(demo_ckpt), "--arch", "pdet-n", "--out", str(out))
    assert proc.returncode == 2 and "pass --force" in proc.stderr
    assert (out / "keep.txt").read_text() == "mine"


@pytest.fixture(scope="module")
def demo(tmp_path_factory, demo_ckpt, cli_session):
    out = tmp_path_factory.mktemp("demo") / "out"
    proc = cli_session("convert", str(demo_ckpt), "--imgsz", "160", "--out", str(out))
    return proc, out


@pytest.mark.slow
def test_demo_converts_end_to_end_within_targets(demo):
    proc, out = demo
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {p.name for p in out.iterdir()} == OUTPUTS
    for stage in ("load_checkpoint", "unwrap", "build", "revert_syncbn", "fold_bn", "export_onnx", "to_tflite", "parity"):
        assert stage in proc.stderr, f"no progress line for {stage}"
    report = json.loads((out / "report.json").read_text())
    assert report["schema"] == "edgeport.parity/2" and report["passed"] is True
    # every field validate/report/SCHEMA.md documents is there
    assert {"schema", "created", "passed", "model", "inputs", "reference", "tolerances", "versions", "artifacts", "board",
            "board_runtime", "converter", "upsample", "int8_normalised", "results", "sample", "stages", "repairs",
            "repaired", "ship"} == set(report)
    assert report["ship"]["file"] == "model_int8.tflite" and report["ship"]["float32"]["bytes"] > report["ship"]["bytes"]
    assert report["repairs"] is None and report["repaired"] == []  # its int8 passes: nothing to repair
    # the sample figure shows the image PyTorch finds most boxes on, never an empty one where another has boxes
    assert report["sample"]["reference"] and report["sample"]["row"] == "int8 / board:default", report["sample"]
    for r in report["results"]:
        assert {"variant", "runtime", "passed", "ms_per_image", "outputs", "detections", "map", "verdict", "divergence",
                "error_histogram", "repeat", "reasons", "reported_runtime", "steps", "same_run_as", "op_errors", "images"} == set(r)
    rows = {r["variant"]: r for r in report["results"]}
    assert set(rows) == {"reference", "folded", "onnx", "float32", "int8"}
    # the default board runs XNNPACK: its rows are the tflite runs, the reference kernels a diagnostic of
    # the int8 file on two images (float32's agree with XNNPACK within float rounding: no row)
    by = {(r["variant"], r["runtime"]): r for r in report["results"]}
    for variant in ("float32", "int8"):
        assert by[(variant, "board:default")]["same_run_as"] == "tflite" and by[(variant, "board:default")]["images"] is None
    assert by[("int8", "tflite-ref")]["images"] == 2 and by[("int8", "tflite-ref")]["map"] is None
    assert ("float32", "tflite-ref") not in by
    rows = {r["variant"]: r for r in report["results"] if r["runtime"] in ("pytorch", "onnxruntime", "tflite")}
    for o in rows["float32"]["outputs"]:
        assert o["max_abs"] <= 1e-4 * o["ref_max_abs"], o
        assert o["cosine"] >= 0.99999, o
        for key in ("max_abs", "mean_abs", "rmse", "cosine", "snr_db"):
            assert key in o
    for o in rows["int8"]["outputs"]:
        assert o["cosine"] >= 0.99, o
    # trained weights: the float32 model finds exactly PyTorch's people, int8 nearly all
    det32, det8 = rows["float32"]["detections"], rows["int8"]["detections"]
    assert det32["reference_boxes"] >= 20 and det32["recall"] == 1.0 and det32["extra"] == 0
    assert det8["recall"] >= 0.8
    assert "| int8 | tflite | PASS |" in (out / "report.md").read_text()
    assert "PASSED" in (out / "report.html").read_text()


@pytest.mark.slow
def test_int8_model_is_full_integer_nhwc(demo):
    from edgeport.ops.tflite_run import load_interpreter

    _, out = demo
    interp = load_interpreter(out / "model_int8.tflite")
    (inp,) = interp.get_input_details()
    assert tuple(inp["shape"]) == (1, 160, 160, 3) and inp["dtype"] == np.int8
    assert all(o["dtype"] == np.int8 for o in interp.get_output_details())
    f32 = load_interpreter(out / "model_float32.tflite").get_input_details()[0]
    assert f32["name"] == "images" and f32["dtype"] == np.float32


@pytest.mark.slow
def test_trusted_pickled_syncbn_module_converts_without_arch(tmp_path, cli, pdet_n):
    sync = torch.nn.SyncBatchNorm.convert_sync_batchnorm(pdet_n)
    ckpt = tmp_path / "full.pt"
    torch.save({"model": sync, "epoch": 5}, ckpt)
    out = tmp_path / "out"
    proc = cli("convert", str(ckpt), "--trust-checkpoint", "--imgsz", "64", "--no-int8", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "23 SyncBatchNorm reverted" in proc.stderr
    report = json.loads((out / "report.json").read_text())
    assert [(r["variant"], r["runtime"]) for r in report["results"]] == [
        ("reference", "pytorch"), ("folded", "pytorch"), ("onnx", "onnxruntime"),
        ("float32", "tflite"), ("float32", "board:default")]
    assert not (out / "model_int8.tflite").exists()


@pytest.mark.slow
def test_failed_parity_gate_exits_1_and_keeps_artifacts(tmp_path, monkeypatch, pdet_n, capsys):
    from edgeport import cli
    from edgeport.validate.parity import compare

    torch.save(pdet_n.state_dict(), tmp_path / "sd.pt")
    # demand more of int8 than quantisation can give: the gate must fail, not crash (the pure file:
    # --no-repair; a repaired file is held to its own entry, which this test leaves as it is)
    monkeypatch.setitem(compare.TOLERANCES, "int8", compare.Tolerance(min_cosine=0.9999999))
    out = tmp_path / "out"
    code = cli.main(["convert", str(tmp_path / "sd.pt"), "--arch", "pdet-n", "--imgsz", "64", "--out", str(out), "--no-repair"])
    assert code == 1
    assert {p.name for p in out.iterdir()} == OUTPUTS
    report = json.loads((out / "report.json").read_text())
    assert report["passed"] is False
    failed = [(r["variant"], r["runtime"]) for r in report["results"] if not r["passed"]]
    assert failed == [("int8", "tflite"), ("int8", "tflite-ref"), ("int8", "board:default")]
    err = capsys.readouterr().err
    assert "gate failed: int8/tflite" in err
    _no_leftovers(tmp_path)


def test_state_dict_trainer_layout_needs_no_arch(tmp_path, run_inproc):
    cli = run_inproc
    model, config = build_model("pdet-n")
    ckpt = tmp_path / "trainer.pt"
    torch.save({"arch": "pdet-n", "config": config, "model": {"module." + k: v for k, v in model.state_dict().items()}}, ckpt)
    proc = cli("convert", str(ckpt), "--imgsz", "100", "--out", str(tmp_path / "o"))
    # gets past load and build without --arch: the first complaint is the input size
    assert proc.returncode == 2 and "multiple of the model's stride" in proc.stderr


@pytest.mark.slow  # a process
def test_a_reader_that_goes_away_is_not_an_internal_error():
    """`edgeport boards | head -1`: the pipe's reader closes early. Exit as a tool killed by
    SIGPIPE (141), with no 'internal error' and no traceback."""
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written
    try:
        proc = subprocess.run([sys.executable, "-m", "edgeport.cli", "boards"], stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    finally:
        os.close(write)
    assert proc.returncode == 141, proc.stderr
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_stdout_gone_tells_a_closed_reader_from_an_open_one(monkeypatch):
    import io

    from edgeport import cli

    read, write = os.pipe()
    try:
        with os.fdopen(write, "w", closefd=False) as out:
            monkeypatch.setattr("sys.stdout", out)
            assert not cli._stdout_gone()
            os.close(read)
            read = None
            assert cli._stdout_gone()
    finally:
        os.close(write)
        if read is not None:
            os.close(read)
    monkeypatch.setattr("sys.stdout", io.StringIO())
    assert not cli._stdout_gone()  # no real file behind it


@pytest.mark.parametrize("command", [["convert", "missing.pt"], ["validate", "missing.pt", "--tflite", "m.tflite"]])
def test_a_missing_checkpoint_is_said_before_the_heavy_imports(tmp_path, command):
    """A mistyped path took 12 s to report, behind torch and the converters' imports: the one line now
    comes first, and nothing heavy is imported for it."""
    import subprocess
    import sys

    code = ("import sys; from edgeport import cli; rc = cli.main(sys.argv[1:]); "
            "print(rc, sorted(m for m in ('torch', 'onnx', 'tensorflow', 'numpy') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code, *command], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.stdout.split("\n")[0] == "2 []", (proc.stdout, proc.stderr)
    assert proc.stderr.strip() == "edgeport: error: checkpoint 'missing.pt' does not exist; pass the path to a .pt/.pth file"


def test_a_terminal_sees_a_bar_while_a_dataset_is_scored_and_a_file_sees_only_the_stage_lines():
    import io

    from rich.console import Console

    from edgeport.commands.output import Progress

    seen = []
    progress = Progress(Console(file=io.StringIO(), force_terminal=True))
    progress.start("dataset")
    progress.status.update = lambda text: seen.append(text.plain)  # what the spinner would redraw
    progress.advance(0, 40)
    progress.advance(10, 40)
    progress.advance(40, 40)
    progress.close()
    assert seen[0] == "dataset [" + "." * 30 + "] 0/40 images"
    assert seen[1].startswith("dataset [" + "#" * 8 + "." * 22 + "] 10/40 images, ") and seen[1].endswith(" s left")
    assert seen[2].startswith("dataset [" + "#" * 30 + "] 40/40 images, 0 s left")
    into_a_file = Progress(Console(file=io.StringIO(), force_terminal=False))
    into_a_file.start("dataset")
    into_a_file.advance(10, 40)  # nothing drawn, nothing raised
    assert into_a_file.status is None
