"""The model zoo: detectors and backbones people train, through `convert` and `validate` as a
user runs them (docs/zoo.md).

Each case builds a real third-party model (Ultralytics, torchvision, timm) with random init
and non-trivial BatchNorm statistics, converts its BatchNorms to SyncBatchNorm the way its
framework does (torch's ``convert_sync_batchnorm``; timm's for timm models), saves it the way
DDP scripts do (``{"model": state_dict}`` with ``module.`` keys), and runs

    edgeport convert CKPT --arch zoo_models:NAME --imgsz S                        (default board)
    edgeport convert CKPT --arch zoo_models:NAME --imgsz S --board tflite-1.13    (the write-up's board)

(the second lowers where the board lacks an operator, converts uint8, and runs the files on the
board's own runtime where `make setup-boards` installed it).
Each ends exactly as ``EXPECTED`` (and docs/zoo.md) says: passes; fails naming the rows (and
the files the board cannot run); or is refused (exit 2) with the reason.
The float32 file converted for the default board is also judged for TFLite 1.13 by the gate and
run on the real runtime: the two agree.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.slow, pytest.mark.zoo]
HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
# found, not imported: importing Ultralytics patches torch and cv2 process-wide, which must not
# leak into the rest of the suite; the models are built in the tests' own processes anyway
for _package in ("ultralytics", "timm", "torchvision"):
    if importlib.util.find_spec(_package) is None:
        pytest.skip(f"{_package} is not installed: the zoo extra, pip install -e '.[zoo]' (make setup does)",
                    allow_module_level=True)

import zoo_models  # noqa: E402

from edgeport.convert.converters.onnx2tf import installed_backend  # noqa: E402

TWO_X = installed_backend().generation >= 2
# The untrained Ultralytics head keeps every class score under 0.015 (its prior,
# log(5 / nc / (640 / stride)^2)): TFLite's int8 LOGISTIC has a fixed output step of 1/256, so
# those scores get four steps, and the score group's cosine stays under 0.99 however the
# output is scaled. The gate says so, by name. (A head as training leaves it: the tests below.)
INT8 = ["int8/tflite", "int8/tflite-ref", "int8/board:default"]
# The same head in uint8 on the write-up's board: the same four steps (every uint8 row, the
# board's own runtime's where it is installed)
U8 = "uint8 rows"
F32 = ["float32/tflite", "float32/tflite-ref"]
F32_BOARD = "float32 board rows"


def refused(why: str) -> tuple[str, str]:
    """Bad input (exit 2), one line naming ``why``."""
    return ("refused", why)


def converter_fails(why: str) -> tuple[str, str]:
    """The converter fails on a model edgeport accepted (exit 3): one line with its reason and its log."""
    return ("converter fails", why)


def lacks(*ops: str) -> list[str]:
    """The old board cannot run the float32 file, lowered as far as the lowering goes: the gate
    says so after the failing rows, naming each of ``ops``."""
    return ["float32 not runnable on tflite-1.13", *(f"needs {op}" for op in ops)]


# name: (default board: "passes", failed rows, or refused(why);
#        `convert --board tflite-1.13`: "passes" or the rows that fail, and what the gate names)
EXPECTED = {
    "yolov8n": (INT8, [U8]),
    "yolo11n": (INT8, [U8]),  # attention and a grouped convolution, lowered
    "yolov5nu": (INT8, [U8]),
    "yolov8s": (INT8, [U8]),
    "yolov8n_pose": (INT8, [U8]),
    "yolov8n_seg": (INT8, [U8]),  # the prototypes' TRANSPOSE_CONV: v1 + ADD (float32), a 1x1 conv (uint8)
    "yolov10n": (INT8, [U8]),
    # its top-k tail: onnx2tf 1.28 crashes on it, named with what to try
    "yolov10n_end2end": (converter_fails("onnx2tf failed (exit 1) at the ONNX node /model.23/TopK: TypeError: only 0-dimensional "
                                         "arrays can be converted to ...; try onnx2tf 2.x (make setup PYTHON=python3.12 "
                                         "VENV=.venv312) or --converter litert-torch"), None),
    # torchvision's detectors post-process in forward: a result whose size follows the image, labels
    "ssdlite320": (refused("output 2 (Tensor(131,)) is int64, not floating point"), None),
    "fcos_resnet50": (refused("output 0 is empty for an image"), None),
    "retinanet_resnet50": (refused("the model returns list(dict{boxes: Tensor(0, 4)"), None),
    "resnet18": ("passes", "passes"),
    # HARD_SWISH, hard-sigmoid's clamp, the squeeze-excite MEANs (uint8), LRASPP's bilinear x8: lowered
    "mobilenet_v3_large": ("passes", "passes"),
    "lraspp_mobilenet_v3_large": ("passes", "passes"),
    "mobilenetv3_small_100": ("passes", "passes"),
    "efficientnet_b0": ("passes", "passes"),
    # GELU through Erf: onnx2tf 1.28 writes TensorFlow's FlexErf, which no builtin TFLite runs
    "convnext_atto": (["float32/tflite", "float32/board:default", "int8/converter", "float32 not runnable on default"],
                      [*F32, F32_BOARD, "uint8/converter", *lacks("CUSTOM:FlexErf")]),
    "regnety_002": ("passes", "passes"),
    "ghostnet_100": ("passes", "passes"),
    # attention: a logit channel of its int8 file loses its shape (cosine under 0.98); its
    # 5-D STRIDED_SLICE and TRANSPOSE have no 4-D form here, and a LayerNorm's RSQRT no uint8 kernel
    # (its reference kernels' diagnostic, on two images, passes: each tensor on its own range)
    "mobilevit_xxs": (["int8/tflite", "int8/board:default"], [F32_BOARD, "uint8/converter", *lacks("STRIDED_SLICE v4", "TRANSPOSE v4")]),
}
# The line through onnx2tf 2.x (Python 3.12+) ends differently where it converts differently,
# measured (with edgeport's workarounds for that line: docs/converters.md).
EXPECTED_2X: dict = {
    # 2.x converts the top-k tail (its boxes within float tolerance once rows are matched as a set);
    # its int8 quantiser refuses the class index's FLOOR_MOD, and TFLite 1.13 has no GATHER_ND
    "yolov10n_end2end": (["int8/converter"], [F32_BOARD, "uint8/converter", *lacks("GATHER_ND v1")]),
    # 2.x writes GELU itself (no Flex op), which TFLite 1.13 lacks; its int8 quantiser refuses the SQRT of the LayerNorm
    "convnext_atto": (["int8/converter"], [F32_BOARD, "uint8/converter", *lacks("GELU v1")]),
    # 2.x's int8 fails per channel (a quantized_dimension out of range) and per tensor (a
    # CONCATENATION whose inputs' scales differ from its output's, refused when 2.x prepares it)
    "ghostnet_100": (["int8/converter"], ["uint8/converter"]),
    # 2.x writes a RESHAPE no runtime can prepare (4096 != 65536 elements): both files refused
    "mobilevit_xxs": (["float32/tflite", "float32/board:default", "int8/converter"],
                      [*F32, F32_BOARD, "uint8/converter", *lacks("SLICE v5", "TRANSPOSE v4")]),
}
REAL = "board:tflite-1.13 (TFLite 1.13.1)"
# The zoo runs on the onnx2tf 2.x line (Python 3.12: no TensorFlow, its conversions are
# several times faster than 1.28's), but SPARED, and, on the 1.28 line (Python 3.11), on YOLOv8n (a trained head's int8 and
# uint8 included) and the models whose ends differ between the lines (EXPECTED_2X): docs/zoo.md
# says which claim is asserted on which line. EDGEPORT_ZOO=full runs every case on either line.
ON_128 = {"yolov8n", *(name for name, ends in EXPECTED_2X.items() if ends != EXPECTED[name])}
# What the 2.x line runs of EXPECTED without EDGEPORT_ZOO=full (.ci/run's minutes): every model but
# those whose every claim another model in the run makes on the same code (docs/zoo.md, "Which line
# asserts what"). Left out, each with the model that covers it:
SPARED = {
    "yolov5nu": "yolov8n",  # the same head and blocks (its row of the table)
    "yolov8s": "yolov8n",  # the same, wider (its row; a head of one class: YOLOv8n-pose's)
    "yolov10n": "yolo11n",  # attention's BATCH_MATMUL and the grouped CONV_2D lowered (its one-to-many head: yolov8n's format)
    "mobilenet_v3_large": "lraspp_mobilenet_v3_large",  # its backbone: HARD_SWISH, hard-sigmoid, uint8 MEANs lowered
    # (its dense classifier: mobilenetv3_small_100's, resnet18's)
    "efficientnet_b0": "yolov8n",  # SiLU as LOGISTIC + MUL, int8 and uint8 passing: the trained head's tests below
    # (squeeze-excite's MEANs and broadcast MUL: mobilenetv3_small_100)
}
# each spared model is in the zoo, and each that covers one runs
assert set(SPARED) <= set(EXPECTED) and set(SPARED.values()) <= set(EXPECTED) - set(SPARED)
# (kept though they look alike: resnet18, the only strided MaxPool after ReLU, whose padding 2.x
# writes as a -inf PADV2 unless convert/converters/onnx_rewrites.py pads before it; regnety_002, the only
# grouped CONV_2D lowered whose int8 and uint8 pass, on the real TFLite 1.13.1 too -- YOLO11n's fail
# on the score group -- and with resnet18 the only residual ADD before a ReLU)


def on_this_line(name: str) -> None:
    if os.environ.get("EDGEPORT_ZOO") == "full":
        return
    if TWO_X and name in SPARED:
        pytest.skip(f"{name}: its claims are made by {SPARED[name]} in this run (docs/zoo.md); EDGEPORT_ZOO=full runs it")
    if TWO_X or name in ON_128:
        return
    pytest.skip(f"{name} is asserted on the onnx2tf 2.x line (Python 3.12); the 1.28 line runs {', '.join(sorted(ON_128))} "
                f"(docs/zoo.md); EDGEPORT_ZOO=full runs it here")


def _expand(rows: list[str]) -> list[str]:
    """The expected failing rows, the board's own runtime's among them where it is installed."""
    real = _real_runtime()
    out = []
    for row in rows:
        if row == U8:
            out += ["uint8/tflite", "uint8/tflite-ref", "uint8/board:tflite-1.13 (emulated)"] + ([f"uint8/{REAL}"] if real else [])
        elif row == F32_BOARD:
            out += ["float32/board:tflite-1.13 (emulated)"] + ([f"float32/{REAL}"] if real else [])
        else:
            out.append(row)
    return out


def _model(name: str, *, trained_head: bool = False) -> torch.nn.Module:
    """The zoo model ``name`` as its checkpoint holds it, with BatchNorm (not yet SyncBatchNorm)."""
    torch.manual_seed(0)
    model = getattr(zoo_models, name)()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
        if trained_head:
            _train_like(model.model[-1], trained_head)
    return model


def _checkpoint(name: str, folder: Path, *, trained_head: bool = False) -> Path:
    framework = zoo_models.ZOO[name][0]
    model = _model(name, trained_head=trained_head)
    has_bn = any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())
    if framework == "timm":
        from timm.layers import convert_sync_batchnorm

        model = convert_sync_batchnorm(model)
    else:
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    assert any(isinstance(m, torch.nn.SyncBatchNorm) for m in model.modules()) or not has_bn  # (ConvNeXt: LayerNorm)
    path = folder / f"{name}.pt"
    torch.save({"model": {f"module.{k}": v for k, v in model.state_dict().items()}, "epoch": 3}, path)
    return path


def _train_like(head, how) -> None:
    """A head as training leaves it: class logits spread out, not at the prior; with ``how ==
    "boxes"`` also boxes a few strides across and keypoints near their anchor, not the random
    branch's boxes several times the image."""
    for m in head.cv3:
        m[-1].bias.normal_(-2.0 if how == "boxes" else 0.0, 1.0)
    if how != "boxes":
        return
    for m in head.cv2:
        m[-1].weight.mul_(0.1)
        m[-1].bias.view(4, -1).copy_(-0.5 * torch.arange(m[-1].bias.numel() // 4, dtype=torch.float32))
    for m in getattr(head, "cv4", ()) if hasattr(head, "kpt_shape") else ():
        m[-1].weight.mul_(0.1)
        m[-1].bias.zero_()


def _convert(cli, ckpt: Path, name: str, out: Path, *extra: str):
    """``convert`` as documented in EXPECTED: the ends of the pure files (``--no-repair``: the repair
    of a failing quantised file is ``test_a_failing_quantised_file_is_repaired``'s)."""
    _, size, options = zoo_models.ZOO[name]
    return cli("convert", str(ckpt), "--arch", f"zoo_models:{name}", "--imgsz", str(size), "--out", str(out), *options,
               "--no-repair", *extra, cwd=HERE)


def _failures(folder: Path) -> list[str]:
    from edgeport.validate.gate.check import load_report
    from edgeport.validate.report.schema import failures

    return [f.what for f in failures(load_report(folder / "report.json", "report"))]


def _reasons(folder: Path) -> str:
    from edgeport.validate.gate.check import load_report
    from edgeport.validate.report.schema import failures

    return " ".join(r for f in failures(load_report(folder / "report.json", "report")) for r in f.reasons)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_zoo_model_ends_as_documented(name, tmp_path, cli):
    on_this_line(name)
    if name == "yolov8n" and not TWO_X and os.environ.get("EDGEPORT_ZOO") != "full":
        pytest.skip("on the 1.28 line YOLOv8n's ends are asserted by test_a_failing_quantised_file_is_repaired: "
                    "the same two converts, with the repair (CI minutes: docs/measured.md)")
    default, old_board = EXPECTED_2X.get(name, EXPECTED[name]) if TWO_X else EXPECTED[name]
    ckpt = _checkpoint(name, tmp_path)
    out = tmp_path / "default"
    proc = _convert(cli, ckpt, name, out)
    assert "Traceback" not in proc.stderr
    if isinstance(default, tuple):  # refused (exit 2) or the converter failed (exit 3): one line, nothing written
        last = proc.stderr.strip().splitlines()[-1]
        assert proc.returncode == (2 if default[0] == "refused" else 3) and default[1] in last, proc.stderr[-3000:]
        assert default[0] == "refused" or "full log: " in last
        assert not out.exists()
        return
    if default == "passes":
        assert proc.returncode == 0, proc.stderr[-3000:]
    else:
        assert proc.returncode == 1 and _failures(out) == default, (_failures(out), proc.stderr[-3000:])
    report = json.loads((out / "report.json").read_text())
    _folded_and_unwrapped(report)
    for row in report["results"]:
        if row["variant"] == "float32" and row["verdict"] is None:  # float32 matches PyTorch per channel group: 1e-4 x max|output|
            assert row["passed"] or "float32/tflite" in default, row
    if zoo_models.ZOO[name][0] == "ultralytics":
        assert report["model"]["head"] in ("yolov8", "yolov8-pose", "yolov8-seg", "yolov10")
        assert all(r["detections"] is not None for r in report["results"][1:] if r["outputs"])
    _the_gate_and_the_board_agree_on(out / "model_float32.tflite", tmp_path / "unlowered")
    if name == "yolov8n":  # and as a user asks it, of one model: `edgeport validate` says the same
        _validate_says_what_the_board_says(cli, ckpt, name, out / "model_float32.tflite", tmp_path / "validate")

    # the write-up's board: float32 and uint8, lowered where it lacks an operator
    old = tmp_path / "old"
    proc = _convert(cli, ckpt, name, old, "--board", "tflite-1.13")
    assert "Traceback" not in proc.stderr
    if old_board == "passes":
        assert proc.returncode == 0, proc.stderr[-3000:]
    else:
        fails = _failures(old)
        want = _expand(old_board)
        assert proc.returncode == 1 and fails == [f for f in want if not f.startswith("needs ")], (fails, proc.stderr[-3000:])
        for need in (r[len("needs "):] for r in want if r.startswith("needs ")):
            assert need in _reasons(old), (need, _reasons(old))
    _old_board_rows_hold(json.loads((old / "report.json").read_text()))


def _validate_says_what_the_board_says(cli, ckpt: Path, name: str, tflite: Path, out: Path) -> None:
    val = cli("validate", str(ckpt), "--arch", f"zoo_models:{name}", "--tflite", str(tflite), "--board", "tflite-1.13",
              "--out", str(out), cwd=HERE)
    assert "Traceback" not in val.stderr and val.returncode in (0, 1), val.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    if _real_runtime():
        (real,) = [r for r in report["results"] if r["runtime"] == REAL]
        gate = report["board"]["checks"]["float32"]["runnable"]
        assert gate == (real["verdict"] is None or real["verdict"]["runnable"]), (report["board"], real)


def _folded_and_unwrapped(report: dict) -> None:
    stages = {s["name"]: s["summary"] for s in report["stages"]}
    assert "left as BatchNorm" not in stages["fold_bn"], stages["fold_bn"]  # every BN folded, DDP keys unwrapped
    assert stages["unwrap"].endswith("keys renamed") and "BatchNorm folded" in stages["fold_bn"]


def _old_board_rows_hold(report: dict) -> None:
    for row in report["results"]:
        if row["runtime"] == REAL and row["variant"] == "float32" and row["passed"]:
            # the board's own runtime computes what PyTorch computes: 1e-5 of each output's range
            assert all(o["max_abs_rel"] <= 1e-5 for o in row["outputs"]), row["outputs"]
        if row["runtime"].startswith("board:") and row["variant"] == "uint8" and row["outputs"]:
            (same_file,) = [c for c in row["steps"] if c["against"] == "the reference kernels on this file"]
            assert same_file["max_steps"] <= 1, row["steps"]  # the board's kernels compute what today's do, within a step


def _the_gate_and_the_board_agree_on(tflite: Path, work: Path) -> None:
    """The file as converted for a current runtime, judged for TFLite 1.13: where the gate says it
    runs, the real runtime runs it; where the gate refuses it, the real runtime refuses it too
    (no false refusal, no false pass). The gate's verdict and the runtime's, on the same file."""
    import numpy as np

    from edgeport.ops.tflite_model import read_tflite
    from edgeport.validate.board.profiles import board_verdict, load_board
    from edgeport.validate.board.runtime import transport_for

    board = load_board("tflite-1.13")
    transport = transport_for(board)
    if transport is None:
        return
    gate = board_verdict(tflite, board)
    summary = read_tflite(tflite)
    (work / "inputs").mkdir(parents=True)
    shutil.copy2(tflite, work / "model.tflite")
    np.save(work / "inputs" / "0000.npy", np.zeros(summary.input_shape, np.float32))
    ran = transport.execute(work, "run")
    assert gate.runnable == ran["ok"], (gate.reasons, ran)


def _real_runtime() -> bool:
    from edgeport.validate.board.profiles import load_board
    from edgeport.validate.board.runtime import installed_python

    return installed_python(load_board("tflite-1.13")) is not None



@pytest.mark.parametrize("name, groups", [("yolov8n", ("boxes", "scores")),
                                          ("yolov8n_pose", ("boxes", "scores", "keypoints", "visibility")),
                                          ("yolov8n_seg", ("boxes", "scores", "masks"))])
def test_int8_of_a_trained_head_keeps_every_channel(name, groups, tmp_path, cli):
    """Box pixels, scores, keypoints and mask coefficients share one output; int8 gives each group
    its range (convert/converters/int8_groups.py), so every channel keeps its shape: the score and the
    keypoint visibility do not collapse to 0 next to pixels, and the gate passes honestly."""
    on_this_line(name if name == "yolov8n" else f"{name} (trained head)")
    ckpt = _checkpoint(name, tmp_path, trained_head="boxes")
    proc = _convert(cli, ckpt, name, tmp_path / "out")
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["int8_normalised"][0][0] == [1, 0, 4, float(zoo_models.ZOO[name][1])], report["int8_normalised"]
    for row in (r for r in report["results"] if r["variant"] == "int8"):
        by = {o["name"]: o for o in row["outputs"]}
        assert {f"output0[{g}]" for g in groups} <= set(by), sorted(by)
        assert by["output0[channels]"]["passed"] and by["output0[channels]"]["cosine"] >= 0.98, by["output0[channels]"]
        assert all(o["passed"] for o in row["outputs"]), row["outputs"]
        assert row["detections"] is not None
        # every tensor within tolerance; the boxes NMS keeps among this head's many near-equal
        # candidates differ (int8 adds a third to PyTorch's 288 boxes), most of them no more than a
        # change of one step of each group's range already moves: judged above that noise floor
        # (measured: 15 to 25 % of the stable boxes missed, none added beyond it), it passes
        det = row["detections"]
        assert row["passed"] and det["extra_beyond"] <= det["extra"] and det["missed_stable"] <= det["missed"], (row["reasons"], det)
    assert proc.returncode == 0, proc.stderr[-3000:]


# one line (1.28, Python 3.11, where the real TFLite 1.13.1 runs): the repair reads what a line wrote,
# and does the same on either; its parts have unit tests on both (CI minutes: docs/measured.md)
@pytest.mark.one_line
@pytest.mark.parametrize("board, variant", [("default", "int8"), ("tflite-1.13", "uint8")])
def test_a_failing_quantised_file_is_repaired(board, variant, tmp_path, cli):
    """YOLOv8n's untrained head fails int8 and uint8 by name (its class scores get four steps of
    LOGISTIC's fixed 1/256: EXPECTED). The repair writes model_<variant>_repaired.tflite -- a few ops
    in float, the float32 file's, from the worst by their own error to the outputs -- which passes
    every row, the real TFLite 1.13.1's included where it is installed; the pure file stays, failing,
    and the run passes on the repaired file, saying which file to ship."""
    on_this_line("yolov8n")
    ckpt = _checkpoint("yolov8n", tmp_path)
    _, size, options = zoo_models.ZOO["yolov8n"]
    out = tmp_path / "out"
    proc = cli("convert", str(ckpt), "--arch", "zoo_models:yolov8n", "--imgsz", str(size), "--out", str(out), *options,
               "--board", board, cwd=HERE)
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 0 and f"PASSED: ship model_{variant}_repaired.tflite ({variant} with " in proc.stdout, proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["passed"] and report["repaired"] == [variant]
    # the pure file ends as EXPECTED says (test_zoo_model_ends_as_documented, which this stands for on this line)
    default, old_board = EXPECTED["yolov8n"]
    assert _failures(out) == (default if board == "default" else _expand(old_board)), _failures(out)
    _folded_and_unwrapped(report)
    assert report["model"]["head"] == "yolov8" and all(r["detections"] is not None for r in report["results"][1:] if r["outputs"])
    if board == "default":
        _the_gate_and_the_board_agree_on(out / "model_float32.tflite", tmp_path / "unlowered")
        _validate_says_what_the_board_says(cli, ckpt, "yolov8n", out / "model_float32.tflite", tmp_path / "validate")
    else:
        _old_board_rows_hold(report)
    pure = [r for r in report["results"] if r["variant"] == variant]
    repaired = [r for r in report["results"] if r["variant"] == f"{variant}-repaired"]
    assert pure and not any(r["passed"] for r in pure) and (out / f"model_{variant}.tflite").is_file()
    assert {r["runtime"] for r in repaired} == {r["runtime"] for r in pure} and all(r["passed"] for r in repaired), repaired
    if board == "tflite-1.13" and _real_runtime():
        assert any(r["runtime"] == REAL for r in repaired)
    info = report["repairs"][variant]
    assert info["passed"] and 0 < info["float_ops"] < info["ops"] // 4 and info["latency"]["ratio"] > 0, info
    assert report["board"]["checks"][f"{variant}-repaired"]["runnable"]


@pytest.mark.parametrize("name", ["yolov8n", "yolov8n_pose"])
def test_uint8_of_a_trained_head_on_tflite_113(name, tmp_path, cli):
    """The write-up's board gets a quantised file it runs: uint8 from the int8 file quantised per
    tensor (convert/uint8.py), lowered where it lacks a kernel; on the real TFLite 1.13.1 it keeps
    every channel group (cosine >= 0.99) and computes what today's reference kernels compute on it."""
    on_this_line(name if name == "yolov8n" else f"{name} (trained head)")
    ckpt = _checkpoint(name, tmp_path, trained_head="boxes")
    proc = _convert(cli, ckpt, name, tmp_path / "out", "--board", "tflite-1.13")
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert (tmp_path / "out" / "model_uint8.tflite").is_file() and not (tmp_path / "out" / "model_int8.tflite").exists()
    rows = [r for r in report["results"] if r["variant"] == "uint8"]
    assert {r["runtime"] for r in rows} >= {"tflite", "tflite-ref", "board:tflite-1.13 (emulated)"}
    for row in rows:
        assert all(o["passed"] for o in row["outputs"]), (row["runtime"], row["outputs"])
        assert all(c["passed"] for c in row["steps"]), row["steps"]
    if _real_runtime():
        (real,) = [r for r in rows if r["runtime"] == "board:tflite-1.13 (TFLite 1.13.1)"]
        (same_file,) = [c for c in real["steps"] if c["against"] == "the reference kernels on this file"]
        assert same_file["max_steps"] <= 1 and real["repeat"]["passed"]
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.one_line
def test_folding_an_end_to_end_head_may_move_its_top_k_cut():
    """YOLOv10's end-to-end head at 640 px: its untrained scores sit at the prior, so anchors tie
    at the 300th score, and the BatchNorm fold, moving a score by an ulp, keeps another anchor at
    the cut. The fold check takes that for the same result (``modelcheck.rows_match``): it ended
    convert with an internal error (exit 3) before."""
    from edgeport.convert.calibration import load_calibration
    from edgeport.convert.modelcheck import assert_same_outputs
    from edgeport.convert.passes.fold_bn_pass import fold_batchnorm
    from edgeport.models.inference import forward
    from edgeport.validate.metrics import max_abs_rel
    from edgeport.validate.parity.compare import FOLDED

    model = _model("yolov10n_end2end").eval()
    folded, n, _ = fold_batchnorm(model)
    images, _ = load_calibration(None, 640, limit=2, seed=0)  # what prepare_inputs gives the pass check
    (before,), (after,) = forward(model, images), forward(folded, images)
    assert n > 0
    if max_abs_rel(before, after) <= 0.1:  # the ulp a fold moves a score by is the kernels': elsewhere the cut may stay
        pytest.skip("on this machine's kernels the fold keeps the same anchors at the cut: no tie to judge")
    assert_same_outputs("fold_bn", model, folded, images, rel_tol=FOLDED.max_abs_rel)  # another anchor's box in a row


def test_an_ultralytics_training_checkpoint(tmp_path, cli):
    """Ultralytics' own checkpoint: the pickled EMA module in fp16 (needs --trust-checkpoint); outside
    export mode it returns (decoded, {boxes, scores, feats}) and --outputs 0 picks the decoded tensor."""
    on_this_line("an Ultralytics training checkpoint")
    import copy

    model = zoo_models.yolov8n()
    for m in model.modules():
        if hasattr(m, "export"):
            m.export = False
    ckpt = tmp_path / "last.pt"
    torch.save({"epoch": 3, "model": None, "ema": copy.deepcopy(model).half(), "updates": 10}, ckpt)
    bare = cli("convert", str(ckpt), "--trust-checkpoint", "--imgsz", "128", "--no-int8", "--out", str(tmp_path / "x"), cwd=HERE)
    assert bare.returncode == 2 and "the model returns tuple(Tensor(1, 5, 336), dict{boxes: Tensor(1, 64, 336)" in bare.stderr, \
        bare.stderr[-2000:]
    assert not (tmp_path / "x").exists()
    proc = cli("convert", str(ckpt), "--trust-checkpoint", "--imgsz", "128", "--no-int8", "--outputs", "0",
               "--out", str(tmp_path / "y"), cwd=HERE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shutil.rmtree(tmp_path / "y")


def test_a_pickled_ddp_module(tmp_path, cli):
    """``torch.save(ddp_model)``: unpickling DDP wants a process group; with --trust-checkpoint the
    file loads without one, and converts."""
    on_this_line("a pickled DDP module")
    import subprocess

    script = f"""
import sys, tempfile, torch, torch.distributed as dist
sys.path.insert(0, {str(HERE)!r})
import zoo_models
dist.init_process_group("gloo", init_method=f"file://{{tempfile.mktemp()}}", rank=0, world_size=1)
torch.save(torch.nn.parallel.DistributedDataParallel(zoo_models.resnet18()), {str(tmp_path / 'ddp.pt')!r})
dist.destroy_process_group()
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=300)
    untrusted = cli("convert", str(tmp_path / "ddp.pt"), "--imgsz", "64", "--out", str(tmp_path / "x"), cwd=HERE)
    assert untrusted.returncode == 2 and "--trust-checkpoint" in untrusted.stderr
    proc = cli("convert", str(tmp_path / "ddp.pt"), "--trust-checkpoint", "--imgsz", "64", "--no-int8", "--out", str(tmp_path / "y"),
               cwd=HERE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "unwrapped DistributedDataParallel" in proc.stderr


def test_the_builder_the_hint_names_converts_the_model(tmp_path, cli):
    """A checkpoint that names no architecture: the one line says what its keys look like and the
    builder to write; that builder, as written, converts YOLOv8n (80 classes, as its .yaml has them,
    a head as training leaves it) with exit 0. As built, its class scores sit at 1e-4, where ONNX
    Runtime's sigmoid parts from PyTorch's by 5e-8: a float row holds them on a probability's scale
    (compare.Tolerance.scale), not on their own 1e-4, which had failed it."""
    if TWO_X and os.environ.get("EDGEPORT_ZOO") != "full":
        # (there its int8 file's 80 class scores fail, cosine 0.77, and no mostly-integer repair passes: exit 1)
        pytest.skip("asserted on the default line, onnx2tf 1.28 (Python 3.11); EDGEPORT_ZOO=full runs it here")
    from ultralytics.nn.tasks import DetectionModel

    torch.manual_seed(0)
    model = DetectionModel("yolov8n.yaml", verbose=False)
    with torch.no_grad():
        _train_like(model.model[-1], "boxes")
    torch.save({"model": model.state_dict(), "epoch": 3}, tmp_path / "y8.pt")
    asked = cli("convert", str(tmp_path / "y8.pt"), "--imgsz", "128", "--out", str(tmp_path / "o"), cwd=tmp_path)
    line = asked.stderr.strip().splitlines()[-1]
    assert asked.returncode == 2 and "its keys look like Ultralytics YOLO" in line and len(line) <= 300, line
    builder = line.split("`")[1]
    (tmp_path / "my_models.py").write_text(builder + "\n")
    proc = cli("convert", str(tmp_path / "y8.pt"), "--arch", "my_models:yolo", "--imgsz", "128", "--out", str(tmp_path / "o"),
               cwd=tmp_path)
    assert proc.returncode == 0 and "PASSED: ship " in proc.stdout, proc.stderr[-3000:]
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["model"]["head"] == "yolov8" and report["passed"]
