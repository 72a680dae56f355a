"""The model zoo: detectors and backbones people train, through `convert` and `validate` as a
user runs them (docs/zoo.md).

Each case builds a real third-party model (Ultralytics, torchvision, timm) with random init
and non-trivial BatchNorm statistics, converts its BatchNorms to SyncBatchNorm the way its
framework does (torch's ``convert_sync_batchnorm``; timm's for timm models), saves it the way
DDP scripts do (``{"model": state_dict}`` with ``module.`` keys), and runs

    edgeport convert CKPT --arch zoo_models:NAME --imgsz S                 (default board)
    edgeport validate CKPT --arch zoo_models:NAME --tflite model_float32.tflite --board tflite-1.13

(the second judges the float32 file on the write-up's board: its probed op table, and its
own runtime where `make setup-boards` installed it).
Each ends exactly as ``EXPECTED`` (and docs/zoo.md) says: passes; fails naming the rows (and
the files the board cannot run); or is refused (exit 2) with the reason.
"""

from __future__ import annotations

import importlib.util
import json
import re
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

from edgeport.convert.onnx2tf import installed_backend  # noqa: E402

TWO_X = installed_backend().generation >= 2
# The untrained Ultralytics head keeps every class score under 0.015 (its prior,
# log(5 / nc / (640 / stride)^2)): TFLite's int8 LOGISTIC has a fixed output step of 1/256, so
# those scores get four steps, and the score group's cosine stays under 0.99 however the
# output is scaled. The gate says so, by name. (A head as training leaves it: the tests below.)
INT8 = ["int8/tflite", "int8/tflite-ref", "int8/board:default"]
OLD = "float32/board:tflite-1.13 (emulated)"


def refused(why: str) -> tuple[str, str]:
    return ("refused", why)


def lacks(*ops: str) -> list[str]:
    """The old board's gate refuses the float32 file (its emulator's row fails, the file is not
    runnable there), naming each of ``ops`` among the reasons."""
    return [OLD, "float32 not runnable on tflite-1.13", *(f"needs {op}" for op in ops)]


# name: (default board: "passes", failed rows, or refused(why); tflite-1.13: "passes" or what it lacks)
EXPECTED = {
    "yolov8n": (INT8, "passes"),
    "yolo11n": (INT8, lacks("BATCH_MATMUL v1", "CONV_2D v6")),
    "yolov5nu": (INT8, "passes"),
    "yolov8s": (INT8, "passes"),
    "yolov8n_pose": (INT8, "passes"),
    "yolov8n_seg": (INT8, lacks("TRANSPOSE_CONV v3")),
    "yolov10n": (INT8, lacks("BATCH_MATMUL v1", "CONV_2D v6")),
    # its top-k tail: onnx2tf 1.28 cannot convert it at all
    "yolov10n_end2end": (refused("onnx2tf failed (exit 1): TypeError: only 0-dimensional arrays can be converted to Python scalars"),
                         None),
    # torchvision's detectors post-process in forward: a result whose size follows the image, labels
    "ssdlite320": (refused("output 2 (Tensor(131,)) is int64, not floating point"), None),
    "fcos_resnet50": (refused("output 0 is empty for an image"), None),
    "retinanet_resnet50": (refused("the model returns list(dict{boxes: Tensor(0, 4)"), None),
    "resnet18": ("passes", "passes"),
    "mobilenet_v3_large": ("passes", lacks("HARD_SWISH v1", "RELU_0_TO_1 v1")),
    "lraspp_mobilenet_v3_large": ("passes", lacks("HARD_SWISH v1", "RELU_0_TO_1 v1", "RESIZE_BILINEAR v3")),
    "mobilenetv3_small_100": ("passes", lacks("HARD_SWISH v1", "RELU_0_TO_1 v1")),
    "efficientnet_b0": ("passes", "passes"),
    # GELU through Erf: onnx2tf 1.28 writes TensorFlow's FlexErf, which no builtin TFLite runs
    "convnext_atto": (["float32/tflite", "float32/tflite-ref", "float32/board:default", "int8/converter",
                       "float32 not runnable on default"],
                      ["float32/tflite", "float32/tflite-ref", *lacks("CUSTOM:FlexErf", "CONV_2D v6")]),
    "regnety_002": ("passes", lacks("CONV_2D v6")),
    "ghostnet_100": ("passes", lacks("RELU_0_TO_1 v1")),
    # attention: a logit channel of its int8 file loses its shape (cosine under 0.98)
    "mobilevit_xxs": (INT8, lacks("BATCH_MATMUL v1", "FULLY_CONNECTED v5")),
}
# The line through onnx2tf 2.x (Python 3.12+) ends differently where it converts differently,
# measured (with edgeport's workarounds for that line: docs/converters.md).
EXPECTED_2X: dict = {
    "yolov8n_seg": (INT8, "passes"),  # its prototypes' upsampling is no TRANSPOSE_CONV v3 on 2.x
    # 2.x converts the top-k tail (its boxes within float tolerance once rows are matched as a set);
    # its int8 quantiser refuses the class index's FLOOR_MOD, and TFLite 1.13 has no GATHER_ND
    "yolov10n_end2end": (["int8/converter"], lacks("GATHER_ND v1")),
    # 2.x writes GELU itself (no Flex op); its int8 quantiser refuses the SQRT of the LayerNorm
    "convnext_atto": (["int8/converter"], lacks("GELU v1")),
    "regnety_002": ("passes", "passes"),  # 2.x writes grouped convolutions as split ones
    # 2.x's per-channel and per-tensor int8 both fail (a quantized_dimension out of range); it writes
    # hard-sigmoid as RELU6 arithmetic, which TFLite 1.13 runs
    "ghostnet_100": (["int8/converter"], "passes"),
    # 2.x writes a RESHAPE no runtime can prepare (4096 != 65536 elements): both files refused
    "mobilevit_xxs": (["float32/tflite", "float32/tflite-ref", "float32/board:default", "int8/converter"],
                      ["float32/tflite", "float32/tflite-ref", OLD]),
}


def _checkpoint(name: str, folder: Path, *, trained_head: bool = False) -> Path:
    framework = zoo_models.ZOO[name][0]
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
    _, size, options = zoo_models.ZOO[name]
    return cli("convert", str(ckpt), "--arch", f"zoo_models:{name}", "--imgsz", str(size), "--out", str(out), *options,
               *extra, cwd=HERE)


def _failures(folder: Path) -> list[str]:
    from edgeport.validate.report.schema import failures

    return [f.what for f in failures(json.loads((folder / "report.json").read_text()))]


def _reasons(folder: Path) -> str:
    from edgeport.validate.report.schema import failures

    return " ".join(r for f in failures(json.loads((folder / "report.json").read_text())) for r in f.reasons)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_zoo_model_ends_as_documented(name, tmp_path, cli):
    default, old_board = EXPECTED_2X.get(name, EXPECTED[name]) if TWO_X else EXPECTED[name]
    ckpt = _checkpoint(name, tmp_path)
    out = tmp_path / "default"
    proc = _convert(cli, ckpt, name, out)
    assert "Traceback" not in proc.stderr
    if isinstance(default, tuple):  # refused: one line, exit 2, nothing written
        assert proc.returncode == 2 and default[1] in proc.stderr.strip().splitlines()[-1], proc.stderr[-3000:]
        assert not out.exists()
        return
    if default == "passes":
        assert proc.returncode == 0, proc.stderr[-3000:]
    else:
        assert proc.returncode == 1 and _failures(out) == default, (_failures(out), proc.stderr[-3000:])
    report = json.loads((out / "report.json").read_text())
    stages = {s["name"]: s["summary"] for s in report["stages"]}
    assert "left as BatchNorm" not in stages["fold_bn"], stages["fold_bn"]  # every BN folded, DDP keys unwrapped
    assert stages["unwrap"].endswith("keys renamed") and "BatchNorm folded" in stages["fold_bn"]
    for row in report["results"]:
        if row["variant"] == "float32" and row["verdict"] is None:  # float32 matches PyTorch per channel group: 1e-4 x max|output|
            assert row["passed"] or "float32/tflite" in default, row
    if zoo_models.ZOO[name][0] == "ultralytics":
        assert report["model"]["head"] in ("yolov8", "yolov8-pose", "yolov8-seg", "yolov10")
        assert all(r["detections"] is not None for r in report["results"][1:] if r["outputs"])
    val = cli("validate", str(ckpt), "--arch", f"zoo_models:{name}", "--tflite", str(out / "model_float32.tflite"),
              "--board", "tflite-1.13", "--out", str(tmp_path / "old"), *zoo_models.ZOO[name][2], cwd=HERE)
    assert "Traceback" not in val.stderr
    if old_board == "passes":
        assert val.returncode == 0, val.stderr[-3000:]
        return
    fails = _failures(tmp_path / "old")
    real = [f for f in fails if f.startswith("float32/board:tflite-1.13 (TFLite")]
    assert val.returncode == 1 and [f for f in fails if f not in real] == [f for f in old_board if not f.startswith("needs ")], \
        (fails, val.stderr[-3000:])
    if _real_runtime():  # the gate and the board's own runtime agree: it refuses the file too
        assert real == ["float32/board:tflite-1.13 (TFLite 1.13.1)"], fails
    for need in (r[len("needs "):] for r in old_board if r.startswith("needs ")):
        assert need in _reasons(tmp_path / "old"), (need, _reasons(tmp_path / "old"))


def _real_runtime() -> bool:
    from edgeport.validate.board.profiles import load_board
    from edgeport.validate.board.runtime import installed_python

    return installed_python(load_board("tflite-1.13")) is not None


# (model, onnx2tf 2.x?) whose int8 detections of the trained-like head fall outside the gate
DETECTIONS_APART = {("yolov8n", True)}
DETECTION_COUNT = re.compile(r"^(missed \d+ of PyTorch's \d+ boxes|\d+ boxes PyTorch does not find) \(allowed \d+\)$")


@pytest.mark.parametrize("name, groups", [("yolov8n", ("boxes", "scores")),
                                          ("yolov8n_pose", ("boxes", "scores", "keypoints", "visibility")),
                                          ("yolov8n_seg", ("boxes", "scores", "masks"))])
def test_int8_of_a_trained_head_keeps_every_channel(name, groups, tmp_path, cli):
    """Box pixels, scores, keypoints and mask coefficients share one output; int8 gives each group
    its range (convert/int8_groups.py), so every channel keeps its shape: the score and the
    keypoint visibility do not collapse to 0 next to pixels, and the gate passes honestly."""
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
        if (name, TWO_X) in DETECTIONS_APART:
            # every tensor within tolerance, yet NMS over this random head's many near-equal boxes
            # keeps other anchors: the gate says so by counts (measured, docs/zoo.md)
            assert not row["passed"] and all(DETECTION_COUNT.search(r) for r in row["reasons"]), row["reasons"]
    if (name, TWO_X) in DETECTIONS_APART:
        assert proc.returncode == 1, proc.stderr[-3000:]
    else:
        assert proc.returncode == 0, proc.stderr[-3000:]


def test_an_ultralytics_training_checkpoint(tmp_path, cli):
    """Ultralytics' own checkpoint: the pickled EMA module in fp16 (needs --trust-checkpoint); outside
    export mode it returns (decoded, {boxes, scores, feats}) and --outputs 0 picks the decoded tensor."""
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
