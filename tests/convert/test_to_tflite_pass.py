from __future__ import annotations

import numpy as np
import pytest

from edgeport.convert.to_tflite_pass import (
    CALIB_FILE,
    ONNX2TF_SAMPLE_FILE,
    condense,
    offline_env,
    onnx2tf_command,
    run_onnx2tf,
    write_calibration,
)
from edgeport.errors import ConversionError


def test_calibration_files_are_ours_and_shaped_for_onnx2tf(tmp_path):
    calib = np.random.default_rng(0).random((3, 3, 64, 64), dtype=np.float32)
    write_calibration(tmp_path, calib)
    ours = np.load(tmp_path / CALIB_FILE)
    assert ours.shape == (3, 64, 64, 3)
    np.testing.assert_array_equal(ours, calib.transpose(0, 2, 3, 1))
    sample = np.load(tmp_path / ONNX2TF_SAMPLE_FILE)
    # onnx2tf would download this file if it were missing
    assert sample.shape == (20, 128, 128, 3) and sample.dtype == np.float32
    assert 0.0 <= sample.min() and sample.max() <= 1.0


def test_command_calibrates_on_our_data_without_renormalising(tmp_path):
    cmd = onnx2tf_command(tmp_path / "model.onnx", tmp_path / "tf", int8=True, input_name="images")
    i = cmd.index("-cind")
    assert cmd[i + 1 : i + 5] == ["images", CALIB_FILE, "[[[[0.0,0.0,0.0]]]]", "[[[[1.0,1.0,1.0]]]]"]
    assert "-oiqt" in cmd and "-coion" in cmd
    assert "-oiqt" not in onnx2tf_command(tmp_path / "m.onnx", tmp_path, int8=False, input_name="images")


def test_offline_env_points_proxies_at_a_closed_port():
    env = offline_env()
    assert env["HTTPS_PROXY"] == env["https_proxy"] == "http://127.0.0.1:9"
    assert env["NO_PROXY"] == ""


def test_condense_picks_the_error_line():
    log = "INFO: loading\n\x1b[31mERROR:\x1b[0m The trace log is below.\nTraceback...\nValueError: Unsupported op Foo\nbye"
    assert condense(log) == "ValueError: Unsupported op Foo"
    assert condense("") == "no output"


@pytest.mark.slow
def test_onnx2tf_failure_is_condensed(tmp_path):
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"\x08\x07 this is not a protobuf graph")
    calib = np.random.default_rng(0).random((2, 3, 32, 32), dtype=np.float32)
    with pytest.raises(ConversionError, match=r"onnx2tf failed \(exit \d+\): ") as info:
        run_onnx2tf(bad, calib, tmp_path / "work", int8=False, input_name="images", timeout_s=300)
    assert "\n" not in str(info.value)
