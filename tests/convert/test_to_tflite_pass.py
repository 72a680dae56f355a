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
    chained = ("Traceback (most recent call last):\nRuntimeError: tflite/kernels/activations.cc:481 scale == 1. / 256 was not true.\n\n"
               "The above exception was the direct cause of the following exception:\n\nTraceback (most recent call last):\n"
               "StrictFullIntegerQuantizationError: Strict integer quantized TFLite validation failed\n\n"
               "The above exception was the direct cause of the following exception:\n\nRuntimeError: flatbuffer_direct fast path failed.")
    assert condense(chained) == "RuntimeError: tflite/kernels/activations.cc:481 scale == 1. / 256 was not true."


@pytest.mark.slow
def test_onnx2tf_failure_is_condensed(tmp_path):
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"\x08\x07 this is not a protobuf graph")
    calib = np.random.default_rng(0).random((2, 3, 32, 32), dtype=np.float32)
    with pytest.raises(ConversionError, match=r"onnx2tf failed \(exit \d+\): ") as info:
        run_onnx2tf(bad, calib, tmp_path / "work", int8=False, input_name="images", timeout_s=300)
    assert "\n" not in str(info.value)


class FakeOnnx2tf:
    """Onnx2tfRun as the two onnx2tf lines behave when their quantiser fails on a model:
    1.28 warns and writes float32 only (exit 0); 2.x fails the whole run (exit 1)."""

    def __init__(self, *, line: int, int8_fails: bool = True, float32_fails: bool = False):
        self.line, self.int8_fails, self.float32_fails = line, int8_fails, float32_fails
        self.calls, self.killed = [], []

    def __call__(self, onnx_path, calib, work, *, int8, input_name, backend=None):
        fake = self
        fake.calls.append((onnx_path.name, int8))

        class Run:
            log = work / "onnx2tf.log"

            def finish(self, timeout_s, require=None):
                from edgeport.convert.to_tflite_pass import Onnx2tfFailed

                if fake.float32_fails:
                    raise Onnx2tfFailed(1, "ValueError: Unsupported op Foo", [])
                files = {"float32": work / "model_float32.tflite"}
                if int8 and fake.int8_fails:
                    if fake.line >= 2:
                        raise Onnx2tfFailed(1, "StrictFullIntegerQuantizationError: Unsupported op: PADV2", [])
                    work.mkdir(parents=True, exist_ok=True)
                    self.log.write_text("WARNING: Full INT8 Quantization tflite output failed.")
                    if "int8" in (require or ("float32", "int8")):
                        raise Onnx2tfFailed(0, self.log.read_text(), ["int8"])
                elif int8:
                    files["int8"] = work / "model_full_integer_quant.tflite"
                return files, 1.0

            def kill(self):
                fake.killed.append(onnx_path.name)

        return Run()


@pytest.mark.parametrize("line", [1, 2])
def test_an_int8_the_converter_cannot_write_leaves_float32_and_says_why(tmp_path, monkeypatch, line):
    from edgeport.convert import to_tflite_pass
    from edgeport.convert.to_tflite_pass import Onnx2tfBackend, convert_variants

    fake = FakeOnnx2tf(line=line)
    monkeypatch.setattr(to_tflite_pass, "Onnx2tfRun", fake)
    onnx = tmp_path / "model.onnx"
    files, not_written, _ = convert_variants(onnx, onnx, np.zeros((1, 3, 8, 8), np.float32), tmp_path, input_name="images",
                                             timeout_s=60, backend=Onnx2tfBackend(f"{line}.0.0"))
    assert list(files) == ["float32"] and list(not_written) == ["int8"]
    if line >= 2:  # the failed run wrote nothing to trust: float32 again, alone
        assert fake.calls == [("model.onnx", True), ("model.onnx", False)]
        assert not_written["int8"] == "onnx2tf failed (exit 1): StrictFullIntegerQuantizationError: Unsupported op: PADV2"
    else:
        assert fake.calls == [("model.onnx", True)]
        assert not_written["int8"] == "onnx2tf failed (wrote no int8): WARNING: Full INT8 Quantization tflite output failed."


def test_a_normalised_int8_graph_that_fails_leaves_float32(tmp_path, monkeypatch):
    from edgeport.convert import to_tflite_pass
    from edgeport.convert.to_tflite_pass import Onnx2tfBackend, convert_variants

    fake = FakeOnnx2tf(line=2)
    monkeypatch.setattr(to_tflite_pass, "Onnx2tfRun", fake)
    files, not_written, _ = convert_variants(tmp_path / "model.onnx", tmp_path / "int8" / "norm.onnx",
                                             np.zeros((1, 3, 8, 8), np.float32), tmp_path, input_name="images",
                                             timeout_s=60, backend=Onnx2tfBackend("2.6.9"))
    assert fake.calls == [("model.onnx", False), ("norm.onnx", True)]  # started side by side
    assert list(files) == ["float32"] and "PADV2" in not_written["int8"]
    assert sorted(fake.killed) == ["model.onnx", "norm.onnx"], "no child outlives the conversion"


def test_a_float32_the_converter_cannot_write_ends_the_run_with_its_log(tmp_path, monkeypatch):
    from edgeport.convert import to_tflite_pass
    from edgeport.convert.to_tflite_pass import Onnx2tfBackend, convert_variants

    monkeypatch.setattr(to_tflite_pass, "Onnx2tfRun", FakeOnnx2tf(line=1, float32_fails=True))
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with pytest.raises(ConversionError, match=r"^onnx2tf failed \(exit 1\): ValueError: Unsupported op Foo; full log: ") as info:
        convert_variants(tmp_path / "m.onnx", None, np.zeros((1, 3, 8, 8), np.float32), tmp_path, input_name="images",
                         timeout_s=60, backend=Onnx2tfBackend("1.28.8"))
    log = str(info.value).split("full log: ")[1]
    assert open(log).read() == "ValueError: Unsupported op Foo"
