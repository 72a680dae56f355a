"""The second converter, litert-torch (``convert/converters/litert.py``), in its own environment
(``make setup-converters``), and the cross-check of the two converters' float32 files."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from edgeport.convert.converters import litert

pytestmark = pytest.mark.converters
needs_litert = pytest.mark.skipif(litert.installed() is None,
                                  reason=f"litert-torch is not installed for this Python: {litert.install_hint()}")


def _small() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3, stride=2)).eval()


def test_an_uninstalled_converter_is_one_line_and_exit_2(tmp_path, demo_ckpt):
    env = dict(os.environ, EDGEPORT_HOME=str(tmp_path / "home"))
    for extra in (["--converter", "litert-torch"], ["--cross-check"]):
        out = tmp_path / "out"
        proc = subprocess.run([sys.executable, "-m", "edgeport.cli", "convert", str(demo_ckpt), "--out", str(out), *extra],
                              capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        assert "litert-torch is not installed" in line and "edgeport converters install litert-torch" in line
        assert not out.exists()
    int8_only = subprocess.run([sys.executable, "-m", "edgeport.cli", "convert", str(demo_ckpt), "--out", str(tmp_path / "o"),
                                "--cross-check", "--board", "tflm-m4-256k"], capture_output=True, text=True, env=env, timeout=120)
    assert int8_only.returncode == 2 and "runs only int8" in int8_only.stderr.strip().splitlines()[-1], int8_only.stderr
    listed = subprocess.run([sys.executable, "-m", "edgeport.cli", "converters"], capture_output=True, text=True, env=env)
    assert listed.returncode == 0 and "not installed: edgeport converters install litert-torch" in listed.stdout


def test_an_environment_built_to_other_pins_is_named_and_built_again_in_place(tmp_path, monkeypatch):
    """An environment installed before edgeport pinned litert-torch's layer, or to other pins, or
    on another torch, converts as its own packages do: require() names why and how to rebuild it,
    and install() builds it again in place instead of keeping it."""
    from edgeport import venvs
    from edgeport.errors import MissingDependencyError

    monkeypatch.setenv("EDGEPORT_HOME", str(tmp_path))
    folder = litert.env_dir()
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "python").write_text("")
    torch_version = litert._host_torch()
    marker = {"converter": litert.NAME, "version": "0.10.0", "packages": list(litert.PACKAGES), "torch": torch_version}
    venvs.write_marker(folder, litert.MARKER, {**marker, "pins": litert.pins(torch_version)})
    assert litert.require() == folder / "bin" / "python"

    older = [p for p in litert.pins(torch_version) if not p.startswith("jax==")] + ["jax==0.9.0"]
    for pins, why in ((None, "before edgeport pinned"), (older, "other pins than this edgeport's (jax==")):
        venvs.write_marker(folder, litert.MARKER, {**marker, **({"pins": pins} if pins else {})})
        with pytest.raises(MissingDependencyError) as refused:
            litert.require()
        assert why in str(refused.value) and litert.install_hint() in str(refused.value), str(refused.value)

        built, said = [], []

        class Built(Exception):
            pass

        def build(target, *args, built=built, **kwargs):
            built.append(target)
            raise Built

        monkeypatch.setattr(litert.venvs, "build_venv", build)
        with pytest.raises(Built):
            litert.install(log=said.append)
        assert built == [folder] and "installing again" in said[0] and why in said[0], said
    venvs.write_marker(folder, litert.MARKER, {**marker, "torch": "1.0.0", "pins": litert.pins(torch_version)})
    with pytest.raises(MissingDependencyError, match="was installed on torch 1.0.0"):
        litert.require()


@needs_litert
@pytest.mark.slow  # the converter's process
def test_float32_and_full_integer_int8_from_the_pytorch_model(tmp_path, monkeypatch):
    from edgeport.ops.tflite_graph import schema
    from edgeport.ops.tflite_run import load_interpreter

    temp = tmp_path / "tmp"  # the worker's temporary folder: it exits without the interpreter's teardown, not without its exit handlers
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    model, calib = _small(), np.random.default_rng(0).random((8, 3, 32, 32), dtype=np.float32)
    got = litert.convert_variants(model, calib, tmp_path, int8=True, timeout_s=600)
    assert set(got.files) == {"float32", "int8"} and not got.not_written
    assert not list(temp.iterdir()), "what TensorFlow's autograph wrote there is removed at exit"
    f32 = load_interpreter(got.files["float32"], kernels="reference")
    (inp,) = f32.get_input_details()
    assert tuple(inp["shape"]) == (1, 32, 32, 3)  # NHWC in, as onnx2tf's files: one calibration and board path
    x = calib[:1]
    f32.set_tensor(inp["index"], np.ascontiguousarray(x.transpose(0, 2, 3, 1)))
    f32.invoke()
    (out,) = f32.get_output_details()
    want = model(torch.from_numpy(x)).detach().numpy()
    assert tuple(out["shape"]) == want.shape  # outputs keep PyTorch's layout
    assert np.abs(f32.get_tensor(out["index"]) - want).max() <= 1e-5 * np.abs(want).max()
    q = load_interpreter(got.files["int8"])
    assert [d["dtype"] for d in (*q.get_input_details(), *q.get_output_details())] == [np.int8, np.int8]
    # ai-edge-quantizer stores constants after the flatbuffer; the shipped file has them inline
    # (read by the schema itself: edgeport's Graph would inline them on reading)
    raw = schema().ModelT.InitFromPackedBuf(bytearray(got.files["int8"].read_bytes()), 0)
    assert not any(getattr(b, "offset", 0) > 1 for b in raw.buffers)
    assert sum(len(b.data) for b in raw.buffers if b.data is not None) >= 8 * 3 * 9 + 4 * 8 * 9  # every weight, one byte each


CALIBRATE = """
import contextlib, io, json, sys
import numpy as np
sys.path.insert(0, sys.argv[2])
import litert_worker
from ai_edge_quantizer import qtyping, quantizer, recipe_manager


def quantiser():
    qt, manager = quantizer.Quantizer(sys.argv[1]), recipe_manager.RecipeManager()
    manager.add_static_config(regex=".*", operation_name=qtyping.TFLOperationName.ALL_SUPPORTED, activation_num_bits=8,
                              weight_num_bits=8, weight_granularity=qtyping.QuantGranularity.CHANNELWISE)
    qt.load_quantization_recipe(manager.get_quantization_recipe())
    return qt, manager


rng = np.random.default_rng(1)
samples = {"serving_default": [{"args_0": rng.random((1, 32, 32, 3), dtype=np.float32) * 4 - 1} for _ in range(6)]}
qt, _ = quantiser()
own = bytes(qt.quantize(calibration_result=qt.calibrate(samples)).quantized_model)
qt, manager = quantiser()
said = io.StringIO()
with contextlib.redirect_stderr(said):
    ranges = litert_worker.calibrate(open(sys.argv[1], "rb").read(), manager, samples)
ours = bytes(qt.quantize(calibration_result=ranges).quantized_model)
print(json.dumps({"same": own == ours, "said": [x for x in said.getvalue().splitlines() if x.startswith("edgeport:")]}))
"""


@needs_litert
@pytest.mark.slow  # the converter's process
@pytest.mark.parametrize("pooled", [False, True])
def test_int8_calibrated_by_the_profiler_is_the_quantisers_own_to_the_byte(tmp_path, pooled):
    """The worker takes the quantiser's records with TFLite's profiler (``litert_worker.calibrate``):
    the int8 file is the one the quantiser's own calibration gives, to the byte. A padded max-pool
    (ResNet's stem) is where the two record otherwise (the profiler sees its input's -inf padding):
    the first image shows it, the quantiser's own calibration runs, and the log says so."""
    torch.manual_seed(0)
    layers = [torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU()]
    layers += [torch.nn.MaxPool2d(3, stride=2, padding=1)] if pooled else []
    model = torch.nn.Sequential(*layers, torch.nn.Conv2d(8, 4, 3, stride=2)).eval()
    got = litert.convert_variants(model, np.zeros((1, 3, 32, 32), np.float32), tmp_path, int8=False, timeout_s=600)
    done = subprocess.run([str(litert.require()), "-I", "-c", CALIBRATE, str(got.files["float32"]), str(litert.WORKER.parent)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["same"], seen
    if pooled:
        assert len(seen["said"]) == 1 and "otherwise than the quantiser on the first image" in seen["said"][0], seen
    else:
        assert seen["said"] == [], seen


@needs_litert
@pytest.mark.slow  # the converter's process
def test_int8_of_an_output_mixing_scales_is_quantised_with_its_groups_apart(tmp_path):
    """A YOLO output: box pixels (0..~400) joined with scores (0..1). One int8 scale for both
    steps by ~1.6 and every score rounds to 0 or to a step; with the groups divided apart before
    the join (``int8_groups.normalise_tflite``, the file ai-edge-quantizer quantises), the scores
    keep their own step. float32 is the model's own graph."""
    from edgeport.ops.tflite_run import load_interpreter
    from edgeport.validate.parity.tensors import denormalise

    from .test_int8_groups import Yoloish

    torch.manual_seed(0)
    model, calib = Yoloish(nc=2).eval(), np.random.default_rng(0).random((8, 3, 64, 64), dtype=np.float32)
    plans = [[(1, 0, 4, 64.0)]]
    got = litert.convert_variants(model, calib, tmp_path, int8=True, timeout_s=600, plans=plans)
    assert set(got.files) == {"float32", "int8"} and not got.not_written and got.plans == plans
    f32 = load_interpreter(got.files["float32"], kernels="reference")  # the model's own values, boxes in pixels
    f32.set_tensor(f32.get_input_details()[0]["index"], np.ascontiguousarray(calib[1:2].transpose(0, 2, 3, 1)))
    f32.invoke()
    want = model(torch.from_numpy(calib[1:2])).detach().numpy()
    np.testing.assert_allclose(f32.get_tensor(f32.get_output_details()[0]["index"]), want, rtol=1e-5, atol=1e-4)
    q = load_interpreter(got.files["int8"])
    (inp,), (out,) = q.get_input_details(), q.get_output_details()
    x = calib[1:2]
    scale, zero = inp["quantization"]
    q.set_tensor(inp["index"], np.clip(np.round(x.transpose(0, 2, 3, 1) / scale + zero), -128, 127).astype(np.int8))
    q.invoke()
    scale, zero = out["quantization"]
    (back,) = denormalise([(q.get_tensor(out["index"]).astype(np.float32) - zero) * scale], plans)
    assert np.abs(back[:, 4:] - want[:, 4:]).max() < 0.05  # the scores, on a step of about 1/255
    assert np.abs(back[:, :4] - want[:, :4]).mean() < 1.0  # the boxes back in pixels (the file's are divided by 64)


@needs_litert
@pytest.mark.slow
def test_a_model_torch_export_cannot_capture_is_a_named_reason(tmp_path):
    class DataDependent(torch.nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x - 1  # a branch on the values: no static graph

    got = litert.convert_variants(DataDependent(), np.ones((1, 3, 8, 8), np.float32), tmp_path, int8=True, timeout_s=120)
    assert not got.files and set(got.not_written) == {"float32", "int8"}
    assert got.not_written["float32"].startswith("torch.export cannot capture the model: ")


@needs_litert
@pytest.mark.slow
def test_the_cross_check_agrees_on_one_model_and_names_where_two_part(tmp_path):
    from edgeport.validate.parity.cross_check import compare_files
    from edgeport.validate.parity.divergence import tflite_intermediates

    model, images = _small(), np.random.default_rng(1).random((2, 3, 32, 32), dtype=np.float32)
    a = litert.convert_variants(model, images, tmp_path / "a", int8=False, timeout_s=600).files["float32"]
    again = litert.convert_variants(model, images, tmp_path / "again", int8=False, timeout_s=600).files["float32"]
    with torch.no_grad():
        model[2].weight[1] += 0.05  # the second conv computes something else for one channel
    b = litert.convert_variants(model, images, tmp_path / "b", int8=False, timeout_s=600).files["float32"]
    expected = [(1, 4, 15, 15)]
    same = compare_files(a, again, images, expected)  # two conversions of one model, two files
    assert same["ran"] and same["agree"] and same["max_abs_rel"] <= 1e-5 and same["first_parting"] is None
    apart = compare_files(a, b, images, expected)
    assert apart["ran"] and not apart["agree"] and apart["max_abs_rel"] > 1e-3
    convs = [t.producer for t in tflite_intermediates(a, images[:1], "nhwc") if t.op_type == "CONV_2D"]
    assert len(convs) == 2 and apart["first_parting"]["tensor"] == convs[1]  # the first conv still agrees
    nan = compare_files(a, b, np.full_like(images, np.nan), expected)
    assert nan["ran"] and not nan["agree"]  # NaN never agrees


@needs_litert
@pytest.mark.slow
def test_the_write_ups_board_whichever_converter_wrote_the_file(tmp_path, cli, demo_ckpt):
    """litert-torch writes half-pixel nearest resizes as version 3, which TFLite 1.13 refuses:
    lowered as onnx2tf's are; its uint8 file (weights per tensor, constants inlined) runs there;
    and onnx2tf's float32 file of the same model agrees with it."""
    out = tmp_path / "board"
    proc = cli("convert", str(demo_ckpt), "--imgsz", "160", "--board", "tflite-1.13", "--converter", "litert-torch",
                   "--cross-check", "--out", str(out))
    assert "Traceback" not in proc.stderr and proc.returncode in (0, 1), proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    conv = report["converter"]
    assert conv["name"] == "litert-torch" and conv["version"] == "0.10.0"
    assert conv["lowered_rules"]["float32"] == {"resize_nearest_half_pixel": 2}
    assert conv["cross_check"]["name"] == "onnx2tf" and conv["cross_check"]["agree"], conv["cross_check"]
    assert (out / "model_float32.tflite").is_file() and (out / "model_uint8.tflite").is_file()
    rows = {(r["variant"], r["runtime"]): r for r in report["results"]}
    for (variant, runtime), row in rows.items():
        if variant == "float32":
            assert row["passed"], row  # every float32 row, the board's own runtime's among them
        if variant == "uint8" and runtime.startswith("board:") and row["outputs"]:
            (same_file,) = [c for c in row["steps"] if c["against"] == "the reference kernels on this file"]
            assert same_file["max_steps"] <= 1, row["steps"]  # 1.13.1's uint8 kernels compute what today's do on its file
    assert "Cross-check: onnx2tf" in (out / "report.md").read_text()
