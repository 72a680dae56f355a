"""``onnx2tf_lean``, on the installed onnx2tf line: the shipped files byte for byte as plain onnx2tf
writes them, without the work on files edgeport never ships.

onnx2tf runs in child processes only: on 1.28 it imports TensorFlow, which in the test process
breaks torch.compile's later import of triton (a segfault: the two bring conflicting native
libraries); on 2.x the driver patches onnx2tf's modules, which must not outlive one run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from edgeport.convert.to_tflite_pass import ONNX2TF_OUTPUTS, installed_backend, offline_env, onnx2tf_command, write_calibration

GENERATION = installed_backend().generation
# what plain onnx2tf writes with -oiqt and the driver declines, per line
UNSHIPPED = ("integer_quant_with_int16_act", "full_integer_quant_with_int16_act") + (("dynamic_range_quant",) if GENERATION < 2 else ())


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
    if GENERATION >= 2:  # 1.28 keeps its warnings to itself with -n
        assert "declined by edgeport" in logs[True], "onnx2tf's log says why the files are missing"


SCHEMA_PROBE = """
import sys
from pathlib import Path
from edgeport.convert import onnx2tf_lean
from onnx2tf.tflite_builder import schema_loader
from onnx2tf.utils import onnx_litert_runtime as runtime
onnx2tf_lean.install()
bundled, edited = Path(sys.argv[1]) / "bundled", Path(sys.argv[1]) / "edited"
got = schema_loader.load_schema_module(str(bundled))
assert (bundled / "schema_generated.py").read_bytes() == Path(runtime._BUNDLED_SCHEMA_PY_PATH).read_bytes(), "the copy is still written"
assert got["__name__"] == onnx2tf_lean.SCHEMA_MODULE and "ModelT" in got, "the bundled schema: its module"
compiled = {}
exec(Path(runtime._BUNDLED_SCHEMA_PY_PATH).read_text(), compiled)
assert set(compiled) - {"__builtins__"} <= set(got), "everything the compiled copy defines"
edited.mkdir()
(edited / "schema.fbs").write_text("table T {}")
(edited / "schema_generated.py").write_text("EDITED = True")
assert schema_loader.load_schema_module(str(edited)).get("EDITED") is True, "a different copy: compiled, as onnx2tf does"
print("ok")
"""


@pytest.mark.skipif(GENERATION < 2, reason="the 2.x line's schema module")
def test_the_schema_module_is_imported_when_the_copy_is_the_bundled_one(tmp_path):
    proc = subprocess.run([sys.executable, "-c", SCHEMA_PROBE, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "ok", proc.stdout[-2000:] + proc.stderr[-2000:]
