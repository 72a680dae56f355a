from __future__ import annotations

import sys

import numpy as np
import pytest

from edgeport.convert.converters.base import condense, offline_env
from edgeport.convert.converters.onnx2tf import CALIB_FILE, ONNX2TF_SAMPLE_FILE, onnx2tf_command, run_onnx2tf, write_calibration
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
    # TensorFlow's C++ logging on a machine without a GPU is never the converter's reason
    noisy = ("E0000 00:00:1765432.1 123 cuda_driver.cc:152] failed call to cuInit: INTERNAL: CUDA error: UNKNOWN ERROR (303)\n"
             "2026-12-01 10:00:00.000001: E external/local_xla/xla/stream_executor/cuda/cuda_fft.cc:485] Unable to register cuFFT factory\n"
             "onnx2tf: converting\nStrictFullIntegerQuantizationError: Strict integer quantized TFLite validation failed")
    assert condense(noisy) == "StrictFullIntegerQuantizationError: Strict integer quantized TFLite validation failed"
    # no error line at all (1.28 on ConvNeXt's FlexErf writes no int8 and says nothing): said so,
    # never a line of TensorFlow's listing of the saved model's signature as if it were the reason
    silent = ("I0000 00:00:1796123056.5 7699 port.cc:153] oneDNN custom operations are on.\n"
              "Saved artifact at '/tmp/w/tf'. The following endpoints are available:\n\n* Endpoint 'serving_default'\n"
              "Output Type:\nCaptures:\n  139872660452368: TensorSpec(shape=(320, 10), dtype=tf.float32, name=None)\n")
    assert condense(silent) == "it printed no error (its last line: Saved artifact at '/tmp/w/tf'. The following endpoints are available:)"


@pytest.mark.slow
def test_onnx2tf_failure_is_condensed(tmp_path):
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"\x08\x07 this is not a protobuf graph")
    calib = np.random.default_rng(0).random((2, 3, 32, 32), dtype=np.float32)
    with pytest.raises(ConversionError, match=r"onnx2tf failed \(exit \d+\): ") as info:
        run_onnx2tf(bad, calib, tmp_path / "work", int8=False, input_name="images", timeout_s=300)
    assert "\n" not in str(info.value)


FAKE_ONNX2TF = """
import json, pathlib, sys
out, behaviour, what, granularity = pathlib.Path(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
ships = sys.argv[5].split(",")
out.mkdir(parents=True, exist_ok=True)
if behaviour.get("float32") == "fail":
    print("ValueError: Unsupported op Foo")
    sys.exit(1)
if "float32" in ships:  # as the lean driver: an unshipped float32 is not written
    (out / "model_float32.tflite").write_bytes(b"float32")
if what == "int8":
    if behaviour.get(granularity) == "ok":
        (out / "model_full_integer_quant.tflite").write_bytes(granularity.encode())
    else:
        print(f"StrictFullIntegerQuantizationError: {granularity} fails")
        sys.exit(behaviour.get("exit", 1))
"""


@pytest.fixture
def fake_onnx2tf(tmp_path, monkeypatch):
    """onnx2tf as a child that writes what ``behaviour`` says, through the real Onnx2tfRun:
    1.28 only warns when its int8 fails (exit 0), 2.x fails the run (exit 1) after float32."""
    import json

    import onnx
    from onnx import TensorProto, helper

    from edgeport.convert.converters import onnx2tf

    script = tmp_path / "fake_onnx2tf.py"
    script.write_text(FAKE_ONNX2TF)
    graph = helper.make_graph([helper.make_node("Relu", ["images"], ["y"])], "g",
                              [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])])
    onnx_path = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(onnx_path))
    calls = []

    def use(**behaviour):
        def command(onnx_path, out_dir, *, int8, input_name, backend=None, python=sys.executable, granularity="per-channel",
                    ships=None, fast=False):
            calls.append(("int8" if int8 else "float32", granularity, ",".join(ships), *(["fast"] if fast else [])))
            return [sys.executable, str(script), str(out_dir), json.dumps(behaviour), "int8" if int8 else "float32", granularity,
                    ",".join(ships)]

        def differs(onnx_path, tflite, images, graph=None):  # the fake's files run nowhere: the check is what ``behaviour`` says
            return behaviour.get("fast_differs")

        monkeypatch.setattr(onnx2tf, "onnx2tf_command", command)
        monkeypatch.setattr(onnx2tf, "fast_run_differs", differs)
        monkeypatch.setattr(onnx2tf, "graph_outputs", lambda onnx_path, images: [])
        return onnx_path, calls

    return use


def _convert(onnx_path, tmp_path, line, int8_onnx="same"):
    from edgeport.convert.converters.onnx2tf import Onnx2tfBackend, convert_variants

    return convert_variants(onnx_path, onnx_path if int8_onnx == "same" else int8_onnx, np.zeros((1, 3, 8, 8), np.float32),
                            tmp_path / "work", input_name="images", timeout_s=60, backend=Onnx2tfBackend(line))


@pytest.mark.slow  # a child process (the fake converter)
def test_1_28_writes_both_in_one_run(fake_onnx2tf, tmp_path):
    onnx_path, calls = fake_onnx2tf(**{"per-channel": "ok"})
    got = _convert(onnx_path, tmp_path, "1.28.8")
    assert calls == [("int8", "per-channel", "float32,int8", "fast")] and sorted(got.files) == ["float32", "int8"]
    assert got.not_written == {} and got.notes == {}, "the fast run's float32 passed its check: nothing to note"


@pytest.mark.slow  # a child process (the fake converter)
def test_an_int8_1_28_cannot_write_leaves_float32_and_says_why(fake_onnx2tf, tmp_path):
    onnx_path, calls = fake_onnx2tf(exit=0)  # 1.28: the int8 failure is a warning
    got = _convert(onnx_path, tmp_path, "1.28.8")
    assert calls == [("int8", "per-channel", "float32,int8", "fast")], "1.28 has no other granularity to try"
    assert list(got.files) == ["float32"]
    assert got.not_written == {"int8": "onnx2tf failed (wrote no int8): StrictFullIntegerQuantizationError: per-channel fails"}


@pytest.mark.slow  # a child process (the fake converter)
def test_2x_keeps_the_float32_of_a_failed_run_and_tries_int8_per_tensor(fake_onnx2tf, tmp_path):
    onnx_path, calls = fake_onnx2tf(**{"per-tensor": "ok"})
    got = _convert(onnx_path, tmp_path, "2.6.9")
    # the retry ships int8 alone: the first run's float32 is kept
    assert calls == [("int8", "per-channel", "float32,int8"), ("int8", "per-tensor", "int8")]
    assert got.files["int8"].read_bytes() == b"per-tensor" and got.files["float32"].read_bytes() == b"float32"
    assert got.not_written == {}
    assert got.notes == {"int8": "per-tensor (per-channel failed: onnx2tf failed (exit 1): "
                                 "StrictFullIntegerQuantizationError: per-channel fails)"}


@pytest.mark.slow  # a child process (the fake converter)
def test_2x_int8_that_fails_both_ways_is_not_written_with_both_reasons(fake_onnx2tf, tmp_path):
    onnx_path, _ = fake_onnx2tf()
    got = _convert(onnx_path, tmp_path, "2.6.9")
    assert list(got.files) == ["float32"]
    assert got.not_written == {"int8": "onnx2tf failed (exit 1): StrictFullIntegerQuantizationError: per-channel fails; "
                                       "per-tensor too: onnx2tf failed (exit 1): StrictFullIntegerQuantizationError: per-tensor fails"}


@pytest.mark.slow  # a child process (the fake converter)
def test_a_normalised_int8_graph_is_converted_beside_float32(fake_onnx2tf, tmp_path):
    onnx_path, calls = fake_onnx2tf(**{"per-channel": "ok"})
    normalised = tmp_path / "int8" / "model.onnx"
    normalised.parent.mkdir()
    normalised.write_bytes(onnx_path.read_bytes())
    got = _convert(onnx_path, tmp_path, "1.28.8", int8_onnx=normalised)
    # each run ships one file; without strict mode (1.28), the int8 run also writes its float32, the
    # normalised graph's, which its check reads (``fast_run_differs``) and nothing ships. int8's
    # run, the longer, starts first: it takes the child that imported while the passes ran
    assert calls == [("int8", "per-channel", "float32,int8", "fast"), ("float32", "per-channel", "float32", "fast")]
    assert sorted(got.files) == ["float32", "int8"] and got.files["float32"].parent.parent.name == "onnx2tf"
    assert got.files["int8"].parent.parent.name == "onnx2tf-int8"
    two_x, calls_2x = fake_onnx2tf(**{"per-channel": "ok"})
    calls_2x.clear()
    _convert(two_x, tmp_path / "2x", "2.6.9", int8_onnx=normalised)
    assert calls_2x == [("int8", "per-channel", "int8"), ("float32", "per-channel", "float32")], "2.x: strict costs nothing"


@pytest.mark.slow  # a child process (the fake converter)
def test_a_fast_run_whose_float32_differs_is_converted_again_in_strict_mode_and_says_so(fake_onnx2tf, tmp_path):
    onnx_path, calls = fake_onnx2tf(**{"per-channel": "ok", "fast_differs": "output 0 differs from ONNX Runtime's (max 3)"})
    got = _convert(onnx_path, tmp_path, "1.28.8")
    assert calls == [("int8", "per-channel", "float32,int8", "fast"), ("int8", "per-channel", "float32,int8")]
    assert sorted(got.files) == ["float32", "int8"] and got.files["float32"].parent.parent.parent.name == "work", "the strict run's"
    said = "in onnx2tf's strict mode (without it: onnx2tf without strict mode wrote a float32 file that output 0 differs"
    assert all(got.notes[v].startswith(said) for v in ("float32", "int8")), got.notes


@pytest.mark.slow  # a child process (the fake converter)
def test_a_fast_run_that_fails_is_converted_again_and_the_strict_runs_failure_is_the_one_reported(fake_onnx2tf, tmp_path, monkeypatch):
    onnx_path, calls = fake_onnx2tf(float32="fail")
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with pytest.raises(ConversionError, match=r"^onnx2tf failed \(exit 1\): ValueError: Unsupported op Foo; full log: "):
        _convert(onnx_path, tmp_path, "1.28.8")
    assert [c[-1] for c in calls] == ["fast", "float32,int8"], "fast, then strict"


@pytest.mark.slow  # a child process (the fake converter)
def test_a_float32_the_converter_cannot_write_ends_the_run_with_its_log(fake_onnx2tf, tmp_path, monkeypatch):
    onnx_path, _ = fake_onnx2tf(float32="fail")
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with pytest.raises(ConversionError, match=r"^onnx2tf failed \(exit 1\): ValueError: Unsupported op Foo; full log: ") as info:
        _convert(onnx_path, tmp_path, "2.6.9")
    log = str(info.value).split("full log: ")[1]
    assert "ValueError: Unsupported op Foo" in open(log).read()


# --- the warm child (RunContext.warm): what a user's run sees ---------------------------------------


def _warm():
    """A run's context with onnx2tf's child started in it, as ``edgeport convert`` starts it."""
    from edgeport.convert.context import RunContext
    from edgeport.convert.converters.onnx2tf import Onnx2tf

    run = RunContext(warm=True)
    Onnx2tf().warm(run)
    return run


def _children() -> set[int]:
    import psutil

    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.mark.slow
def test_a_conversion_in_the_warm_block_writes_what_a_fresh_one_writes(tmp_path, small_onnx):
    onnx_path, calib = small_onnx
    fresh, _ = run_onnx2tf(onnx_path, calib, tmp_path / "fresh", int8=True, input_name="images", timeout_s=300)
    with _warm() as run:
        warm, _ = run_onnx2tf(onnx_path, calib, tmp_path / "warm", int8=True, input_name="images", timeout_s=300, context=run)
        second, _ = run_onnx2tf(onnx_path, calib, tmp_path / "second", int8=False, input_name="images", timeout_s=300, context=run)
    assert {k: p.read_bytes() for k, p in warm.items()} == {k: p.read_bytes() for k, p in fresh.items()}
    assert second["float32"].read_bytes() == fresh["float32"].read_bytes()
    assert warm["float32"].parent.parent == tmp_path / "warm", "it worked in the folder the job named"
    logs = [(tmp_path / run / "onnx2tf.log").read_text() for run in ("fresh", "warm")]
    assert logs[0].strip() and logs[1].strip(), "each run's output went into the log it named"


@pytest.mark.slow
def test_no_converter_child_outlives_the_block():
    before = _children()
    with _warm():
        assert len(_children() - before) == 1, "one child, importing the converter"
    assert _children() - before == set(), "no child outlives the run"


@pytest.mark.slow
def test_a_warm_child_that_died_is_replaced_by_a_fresh_conversion(tmp_path, small_onnx):
    import psutil

    onnx_path, calib = small_onnx
    before = _children()
    with _warm() as run:
        for pid in _children() - before:
            psutil.Process(pid).kill()
        files, _ = run_onnx2tf(onnx_path, calib, tmp_path / "after", int8=False, input_name="images", timeout_s=300, context=run)
    assert files["float32"].is_file() and _children() - before == set()


@pytest.mark.slow
def test_a_warm_child_whose_input_closes_converts_nothing_and_exits_0(tmp_path):
    import subprocess

    from edgeport.convert.converters.onnx2tf import AWAIT_JOB

    proc = subprocess.run([sys.executable, "-m", "edgeport.convert.converters.onnx2tf_lean", AWAIT_JOB], input="", cwd=tmp_path,
                          env=offline_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not list(tmp_path.iterdir()), "nothing written"


@pytest.mark.slow
def test_the_fast_runs_check_passes_the_file_of_its_graph_and_no_other(tmp_path, small_onnx):
    """What a run without strict mode is held to: its float32 file against ONNX Runtime on the graph
    it was converted from (real onnx2tf, real runtimes)."""
    import torch

    from edgeport.convert.converters.onnx2tf import fast_run_differs, graph_outputs
    from edgeport.convert.passes.export_onnx_pass import export_onnx, simplify

    onnx_path, calib = small_onnx
    files, _ = run_onnx2tf(onnx_path, calib, tmp_path / "w", int8=False, input_name="images", timeout_s=300)
    assert fast_run_differs(onnx_path, files["float32"], calib) is None
    graph = graph_outputs(onnx_path, calib)  # as ``finish`` computes it, while the child converts
    assert fast_run_differs(onnx_path, files["float32"], calib, graph) is None
    assert fast_run_differs(onnx_path, files["float32"], calib, RuntimeError("no session")).startswith(
        "it cannot be checked (RuntimeError: no session")
    torch.manual_seed(1)  # the same shapes, other weights: a layout guessed wrong computes something else too
    other = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3, stride=2)).eval()
    export_onnx(other, 32, tmp_path / "other.onnx", output_names=["y"], opset=17)
    simplify(tmp_path / "other.onnx")
    assert fast_run_differs(tmp_path / "other.onnx", files["float32"], calib).startswith("output 0 differs from ONNX Runtime's")
    broken = tmp_path / "broken.tflite"
    data = files["float32"].read_bytes()
    broken.write_bytes(data[: len(data) // 2])
    assert fast_run_differs(onnx_path, broken, calib).startswith("it cannot be checked")


def test_the_calibration_files_are_written_while_the_graph_is_exported(tmp_path, monkeypatch):
    """``Onnx2tf.begin`` (``Ahead``): on a thread, while the graph is exported, the calibration
    files every run shares, as a run would write them itself. A run that ends before its
    conversion waits for the thread (the run's context): nothing writes after it. A write that
    failed is raised where the conversion takes the files."""
    import threading
    from types import SimpleNamespace

    from edgeport.convert.context import RunContext
    from edgeport.convert.converters import onnx2tf
    from edgeport.convert.converters.onnx2tf import Ahead

    calib = np.random.default_rng(0).random((5, 3, 32, 32), dtype=np.float32)
    run = RunContext()
    folder = Ahead(SimpleNamespace(calib=calib), tmp_path / "a", run).result()
    write_calibration(tmp_path, calib)
    for name in (CALIB_FILE, ONNX2TF_SAMPLE_FILE):
        assert (folder / name).read_bytes() == (tmp_path / name).read_bytes()

    release, written = threading.Event(), []
    monkeypatch.setattr(onnx2tf, "write_calibration", lambda folder, calib: release.wait(10) and written.append(folder))
    Ahead(SimpleNamespace(calib=calib), tmp_path / "b", run)
    threading.Timer(0.3, release.set).start()
    run.close()  # (the pipeline's end, a pass having failed before the conversion)
    assert written == [tmp_path / "b" / "onnx2tf-calibration"], "the run ended only once the thread had written"

    monkeypatch.setattr(onnx2tf, "write_calibration", lambda folder, calib: (_ for _ in ()).throw(OSError(28, "No space left")))
    with pytest.raises(OSError, match="No space left"):
        Ahead(SimpleNamespace(calib=calib), tmp_path / "c", RunContext()).result()


@pytest.mark.slow
def test_the_child_ends_without_teardown_and_leaves_no_temporary_file(tmp_path, small_onnx, monkeypatch):
    """onnx2tf's child exits once its files are written, without TensorFlow's teardown, but after
    what was registered to run at exit: autograph's temporary files are removed."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    onnx_path, calib = small_onnx
    files, _ = run_onnx2tf(onnx_path, calib, tmp_path / "w", int8=True, input_name="images", timeout_s=300)
    assert set(files) == {"float32", "int8"}
    assert not list(temp.glob("__autograph_generated_file*"))
