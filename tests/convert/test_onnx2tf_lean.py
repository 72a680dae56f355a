"""``onnx2tf_lean``, on the installed onnx2tf line: the shipped files byte for byte as plain onnx2tf
writes them, without the work on files edgeport never ships.

onnx2tf runs in child processes only: on 1.28 it imports TensorFlow, which in the test process
breaks torch.compile's later import of triton (a segfault: the two bring conflicting native
libraries)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from edgeport.convert.converter import offline_env
from edgeport.convert.onnx2tf import ONNX2TF_OUTPUTS, installed_backend, onnx2tf_command, write_calibration

GENERATION = installed_backend().generation
# what plain onnx2tf writes with -oiqt and the driver declines: on 1.28 only (2.x's cost little)
UNSHIPPED = ("integer_quant_with_int16_act", "full_integer_quant_with_int16_act", "dynamic_range_quant") if GENERATION < 2 else ()


@pytest.mark.slow
def test_the_shipped_files_are_plain_onnx2tfs_byte_for_byte(tmp_path, small_onnx):
    onnx_path, calib = small_onnx
    write_calibration(tmp_path, calib)
    written, logs = {}, {}
    for lean in (True, False):
        out = tmp_path / ("lean" if lean else "plain")
        cmd = onnx2tf_command(onnx_path, out, int8=True, input_name="images", lean=lean)
        proc = subprocess.run(cmd, cwd=tmp_path, env=offline_env(), capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        written[lean] = {p.name: p.read_bytes() for p in Path(out).glob("*.tflite")}
        logs[lean] = proc.stdout + proc.stderr
    for name in ONNX2TF_OUTPUTS.values():
        assert written[True][name] == written[False][name], f"{name} differs from plain onnx2tf's"
    for variant in UNSHIPPED:
        assert f"model_{variant}.tflite" in written[False], "plain onnx2tf writes it"
        assert f"model_{variant}.tflite" not in written[True], "declined: nothing reads it"
    for variant in ("float16", "integer_quant"):  # no way out in onnx2tf's code: they must still be written
        assert f"model_{variant}.tflite" in written[True], f"{variant} was declined"


def _source(module: str) -> str:
    """A module's source text, found without importing it (TensorFlow's import takes seconds)."""
    import importlib.util

    top, _, rest = module.partition(".")
    spec = importlib.util.find_spec(top)
    return Path(spec.submodule_search_locations[0], *rest.split(".")).with_suffix(".py").read_text()


@pytest.mark.skipif(GENERATION >= 2, reason="the driver declines work on the 1.28 line only")
def test_the_names_the_1_28_driver_relies_on_are_still_there():
    """The driver wraps TensorFlow's converter constructors and declines by settings onnx2tf gives
    them; onnx2tf must still catch a RuntimeError around each variant. A release that moves any of
    these fails here, in a fraction of a second, not in a conversion."""
    lite = _source("tensorflow.lite.python.lite")
    for name in ("def from_saved_model", "def from_concrete_functions", "def from_keras_model",
                 "EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8", "representative_dataset", "supported_types"):
        assert name in lite + _source("tensorflow.lite.python.lite_constants") + _source("tensorflow.lite.python.convert"), name
    driver = _source("onnx2tf.onnx2tf")
    for name in ("tf.lite.TFLiteConverter.from_concrete_functions", "EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8",
                 "except RuntimeError"):
        assert name in driver, name
