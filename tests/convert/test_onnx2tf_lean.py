"""``onnx2tf_lean``, on the installed onnx2tf line: the shipped files as plain onnx2tf writes them
(byte for byte but for the int8 file's calibrated ranges' last bits), without the work on files
edgeport never ships.

onnx2tf runs in child processes only: on 1.28 it imports TensorFlow, which in the test process
breaks torch.compile's later import of triton (a segfault: the two bring conflicting native
libraries)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from edgeport.convert.converters.base import offline_env
from edgeport.convert.converters.onnx2tf import ONNX2TF_OUTPUTS, installed_backend, onnx2tf_command, write_calibration

GENERATION = installed_backend().generation
# what plain onnx2tf writes with -oiqt and the driver skips: on 1.28 only (2.x's cost little)
UNSHIPPED = ("integer_quant_with_int16_act", "full_integer_quant_with_int16_act", "dynamic_range_quant",
             "float16", "integer_quant") if GENERATION < 2 else ()


def _convert(tmp_path, onnx_path, name: str, *, lean: bool, ships=None) -> tuple[dict[str, bytes], str]:
    out = tmp_path / name
    cmd = onnx2tf_command(onnx_path, out, int8=True, input_name="images", lean=lean, ships=ships)
    proc = subprocess.run(cmd, cwd=tmp_path, env=offline_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return {p.name: p.read_bytes() for p in Path(out).glob("*.tflite")}, proc.stdout + proc.stderr


@pytest.mark.slow
def test_the_shipped_files_are_plain_onnx2tfs_byte_for_byte(tmp_path, small_onnx):
    onnx_path, calib = small_onnx
    write_calibration(tmp_path, calib)
    plain, _ = _convert(tmp_path, onnx_path, "plain", lean=False)
    lean, log = _convert(tmp_path, onnx_path, "lean", lean=True)
    # the int8 run of a model whose int8 is converted from its own graph: int8 alone
    int8_only, log_int8 = _convert(tmp_path, onnx_path, "int8", lean=True, ships=("int8",))
    assert "edgeport: TensorFlow's own calibration" not in log + log_int8, "1.28: the ranges computed (tf_calibration)"
    int8 = ONNX2TF_OUTPUTS["int8"]
    for name in ONNX2TF_OUTPUTS.values():
        if name == int8:  # its ranges computed on the optimised kernels (2.x: its own; 1.28: TensorFlow's): their last bits
            _same_but_for_the_ranges_last_bits(lean[name], plain[name])
        else:
            assert lean[name] == plain[name], f"{name} differs from plain onnx2tf's"
    assert int8_only[int8] == lean[int8], "int8 alone differs from int8 beside float32"
    for variant in UNSHIPPED:
        assert f"model_{variant}.tflite" in plain, "plain onnx2tf writes it"
        assert f"model_{variant}.tflite" not in lean, "skipped: nothing reads it"
    if GENERATION < 2:
        assert sorted(lean) == sorted(ONNX2TF_OUTPUTS.values()), "only what edgeport ships, and no empty file left"
        assert sorted(int8_only) == [ONNX2TF_OUTPUTS["int8"]], "float32 is not shipped from this run"


def _same_but_for_the_ranges_last_bits(ours: bytes, theirs: bytes) -> None:
    """The same ops, tensors, types and weights; each activation's scale within 1e-4 of plain
    onnx2tf's and its zero point within one step (its range measured on other kernels, which
    round their own way), and each int32 bias (input scale x weight scale) within one step in 1e4."""
    from edgeport.ops.tflite_graph import Graph

    a, b = Graph(ours), Graph(theirs)
    assert [a.name(op) for op in a.ops] == [b.name(op) for op in b.ops]
    assert [list(op.inputs) for op in a.ops] == [list(op.inputs) for op in b.ops]
    assert len(a.sg.tensors) == len(b.sg.tensors)
    for i in range(len(a.sg.tensors)):
        assert (a.tensor_name(i), a.shape(i), a.dtype(i)) == (b.tensor_name(i), b.shape(i), b.dtype(i))
        qa, qb = a.quant(i), b.quant(i)
        assert (qa is None) == (qb is None), a.tensor_name(i)
        if qa is not None:
            assert abs(qa.scale - qb.scale) <= 1e-4 * qb.scale and abs(qa.zero_point - qb.zero_point) <= 1, a.tensor_name(i)
        ca, cb = a.const(i), b.const(i)
        assert (ca is None) == (cb is None), a.tensor_name(i)
        if ca is not None and a.dtype(i) == "int32":
            assert np.all(np.abs(ca.astype(np.int64) - cb) <= np.maximum(1, np.abs(cb.astype(np.int64)) // 10_000)), a.tensor_name(i)
        elif ca is not None:
            assert np.array_equal(ca, cb), a.tensor_name(i)


@pytest.mark.skipif(GENERATION < 2, reason="the 2.x line's calibration")
def test_calibration_on_the_optimised_kernels_records_what_2x_records_to_rounding(tmp_path):
    """``collect_on_optimised_kernels``: 2.x's names in 2.x's order, its counts, and its ranges to
    float32 rounding; samples that do not fit the input as it is go to 2.x's own loop."""
    from onnx2tf.tflite_builder.quantization import collect_calibration_ranges_from_tflite as collect

    from edgeport.convert.converters.onnx2tf_lean import collect_on_optimised_kernels

    from ..conftest import fc_model

    path = tmp_path / "fc.tflite"
    path.write_bytes(fc_model().to_bytes())
    rng = np.random.default_rng(0)
    samples = [{"x": rng.normal(size=(1, 4)).astype(np.float32)} for _ in range(3)]
    theirs = collect(tflite_path=str(path), calibration_samples=samples)
    ours = collect_on_optimised_kernels(collect, tflite_path=str(path), calibration_samples=samples)
    assert list(ours) == list(theirs) and {"x", "w", "b", "y"} <= set(ours)
    for name, want in theirs.items():
        got = ours[name]
        assert got.num_samples == want.num_samples, name
        assert got.min_value == pytest.approx(want.min_value, rel=1e-6) and got.max_value == pytest.approx(want.max_value, rel=1e-6)
    calls = []
    wider = [{"x": rng.normal(size=(2, 4)).astype(np.float32)}]
    collect_on_optimised_kernels(lambda **k: calls.append(k) or {}, tflite_path=str(path), calibration_samples=wider)
    assert calls == [{"tflite_path": str(path), "calibration_samples": wider}], "2.x's loop resizes the input"


def test_ships_is_the_drivers_own_flag_and_onnx2tf_never_sees_it():
    from edgeport.convert.converters.onnx2tf import SHIPS
    from edgeport.convert.converters.onnx2tf_lean import take_ships

    assert take_ships([SHIPS, "int8", "-i", "m.onnx"]) == (frozenset({"int8"}), ["-i", "m.onnx"])
    assert take_ships(["-i", "m.onnx"]) == (frozenset(ONNX2TF_OUTPUTS), ["-i", "m.onnx"]), "without it: every variant"
    cmd = onnx2tf_command(Path("m.onnx"), Path("tf"), int8=True, input_name="images", ships=("int8",))
    assert cmd[3:5] == [SHIPS, "int8"], "first, where the driver takes it off"
    assert SHIPS not in onnx2tf_command(Path("m.onnx"), Path("tf"), int8=True, input_name="images", lean=False, ships=("int8",))


def test_the_driver_removes_the_empty_files_it_left_and_nothing_else(tmp_path):
    from edgeport.convert.converters.onnx2tf_lean import remove_unshipped

    out = tmp_path / "tf"
    out.mkdir()
    (out / "model_float16.tflite").write_bytes(b"")
    (out / "model_float32.tflite").write_bytes(b"TFL3")
    (out / "notes.txt").write_bytes(b"")
    remove_unshipped(["-i", "m.onnx", "-o", str(out), "-n"])
    assert sorted(p.name for p in out.iterdir()) == ["model_float32.tflite", "notes.txt"]


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
                 "EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8", "representative_dataset", "supported_types",
                 "inference_input_type", "inference_output_type"):
        assert name in lite + _source("tensorflow.lite.python.lite_constants") + _source("tensorflow.lite.python.convert"), name
    driver = _source("onnx2tf.onnx2tf")
    for name in ("tf.lite.TFLiteConverter.from_concrete_functions", "EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8",
                 "except RuntimeError", "converter.inference_input_type = inf_type_input", "_integer_quant.tflite"):
        assert name in driver, name


@pytest.mark.skipif(GENERATION < 2, reason="the driver calibrates in halves on the 2.x line only")
def test_the_names_the_2x_driver_relies_on_are_still_there():
    """The driver replaces the calibration function 2.x's exporter calls, by the name it calls it
    under; that function keeps its own interpreter and merges images by min and max. A release that
    moves or changes any of these fails here: otherwise the driver would calibrate on one thread
    again without a word, or merge what 2.x no longer records so."""
    builder = _source("onnx2tf.tflite_builder.__init__")
    assert "calibration_ranges = collect_calibration_ranges_from_tflite(\n" in builder
    assert "tflite_path=float32_path,\n" in builder and "calibration_samples=calibration_samples,\n" in builder
    quantization = _source("onnx2tf.tflite_builder.quantization")
    for name in ("def collect_calibration_ranges_from_tflite(\n    *,\n    tflite_path: str,", "interpreter = Interpreter(",
                 "ranges: Dict[str, TensorCalibrationRange] = {}", "current.min_value = min(float(current.min_value), mn)",
                 "current.max_value = max(float(current.max_value), mx)", "current.num_samples = int(current.num_samples) + 1"):
        assert name in quantization, name
    # what ``collect_on_optimised_kernels`` does as 2.x's loop does, by the names it imports
    for name in ("def _normalize_tensor_detail_name(name: Any) -> str:", "for detail in list(interpreter.get_tensor_details()):",
                 "update(str(sample_name), value)", "mn = float(np.nanmin(arr))", "if not np.isfinite(mn) or not np.isfinite(mx):"):
        assert name in quantization, name
    # what ``merge_ranges`` merges is all a range holds: a field added (a histogram) would be dropped
    assert "class TensorCalibrationRange:\n    min_value: float\n    max_value: float\n    num_samples: int = 0\n\n" in quantization


@pytest.mark.filterwarnings("ignore:All-NaN slice encountered:RuntimeWarning")  # the tensor that is NaN on early images
def test_calibration_in_halves_records_what_one_pass_over_every_image_records(monkeypatch):
    """2.x's calibration on two threads (``calibrate_in_halves``): the same ranges, counts and order
    as one pass -- a tensor first seen (finite) only in the second half comes last, as it would."""
    from dataclasses import dataclass

    import numpy as np

    from edgeport import process
    from edgeport.convert.converters import onnx2tf_lean

    @dataclass
    class Range:  # 2.x's TensorCalibrationRange
        min_value: float
        max_value: float
        num_samples: int = 0

    def collect(*, tflite_path, calibration_samples):  # 2.x's loop, over plain arrays
        ranges = {}
        for sample in calibration_samples:
            for name, value in sample.items():
                mn, mx = float(np.nanmin(value)), float(np.nanmax(value))
                if not (np.isfinite(mn) and np.isfinite(mx)):
                    continue
                have = ranges.get(name)
                if have is None:
                    ranges[name] = Range(mn, mx, 1)
                else:
                    have.min_value, have.max_value = min(have.min_value, mn), max(have.max_value, mx)
                    have.num_samples += 1
        return ranges

    rng = np.random.default_rng(0)
    samples = [{"a": rng.normal(size=8), "late": np.full(3, np.nan) if i < 4 else rng.normal(size=3), "b": rng.normal(size=5) * i}
               for i in range(7)]
    monkeypatch.setattr(process, "usable_cores", lambda: 2)
    once = collect(tflite_path="m.tflite", calibration_samples=samples)
    halves = onnx2tf_lean.calibrate_in_halves(collect, tflite_path="m.tflite", calibration_samples=samples)
    assert list(halves) == list(once) == ["a", "b", "late"]
    assert halves == once and halves["late"].num_samples == 3
    assert onnx2tf_lean.calibrate_in_halves(collect, tflite_path="m.tflite", calibration_samples=samples[:1]) == \
        collect(tflite_path="m.tflite", calibration_samples=samples[:1])


def test_in_halves_splits_in_order_on_two_cores_only(monkeypatch):
    import threading

    from edgeport import process

    seen = []

    def run(part):
        seen.append(threading.current_thread().name)
        return list(part)

    monkeypatch.setattr(process, "usable_cores", lambda: 2)
    assert process.in_halves(run, [1, 2, 3, 4, 5]) == [[1, 2, 3], [4, 5]]
    assert all(name.startswith("edgeport-halves") for name in seen), "each half on a thread of its own"
    assert process.in_halves(run, [1]) == [[1]], "one item: no split"
    monkeypatch.setattr(process, "usable_cores", lambda: 1)
    assert process.in_halves(run, [1, 2, 3]) == [[1, 2, 3]], "one core: no split"
