"""onnx2tf without the work on files edgeport never ships; what it ships is byte for byte plain onnx2tf's.

Asked for int8 (``-oiqt``), onnx2tf writes six or seven files; edgeport ships two: float32
and full-integer int8. This driver declines the others' work where onnx2tf's own code offers
a way out, and changes nothing else (``tests/convert/test_onnx2tf_lean.py`` compares the
shipped files with plain onnx2tf's, on each line).

- 1.28 (TensorFlow): dynamic-range quantisation, and integer quantisation with int16
  activations, twice (with float and with int16 inputs; each calibrates again), cost a
  TensorFlow conversion each; on YOLOv8n at 320 px those three take 17 s of a 37 s run.
  onnx2tf runs each in its own ``try`` block that warns on ``RuntimeError`` and goes on, so
  the driver declines exactly those three before TensorFlow starts them.
- 2.x (``flatbuffer_direct``): the two int16-activation variants are skipped as onnx2tf skips
  them for a model its int16 quantiser cannot take (a skip reason), and the TFLite schema
  module it needs is imported (its bytecode cached at install) instead of compiled from the
  676 KB source copied into the output folder on every run (0.17 s).

The driver also imports onnx2tf with the cyclic garbage collector paused, and freezes what the
import leaves (``_lazy.importing``): the conversion's own collections then no longer walk
TensorFlow's or onnx2tf's objects again and again (2.x, demo: 0.1 s of its 1.2 s).

float16 and plain integer quantisation stay on both lines: onnx2tf's code gives them no
such way out (integer quantisation shares its block, or its calibration, with full integer).

    python -m edgeport.convert.onnx2tf_lean ONNX2TF_ARGUMENTS...
    python -m edgeport.convert.onnx2tf_lean --await-job   # then one JSON line on stdin

``--await-job`` (``to_tflite_pass.warm_converter``): import first, while the caller is still
importing torch and exporting, then take the job -- ``{"argv": [...], "cwd": ..., "log": ...}``
-- from one line of stdin: change to ``cwd``, write all output to ``log``, and run. Standard
input closed without a job: exit 0, having converted nothing.

``--await-job --simplify``: also import onnxslim, and before the conversion take any number of
``{"simplify": ONNX, "out": ONNX}`` lines (``export_onnx_pass.simplify``), each answered with one
JSON line on standard output -- ``{"nodes": N}``, or ``{"error": ...}`` -- which carries nothing else.
"""

from __future__ import annotations

import functools
import importlib
import json
import runpy
import sys

DECLINED = "declined by edgeport, which does not ship this file"


def declined(converter) -> str | None:
    """1.28: the unshipped variant ``converter`` is set up to write, by its public settings at
    the moment it converts (onnx2tf reuses one converter for several variants), or None."""
    import tensorflow as tf

    if tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8 in set(converter.target_spec.supported_ops):
        return "integer quantisation with int16 activations"
    if converter.optimizations and converter.representative_dataset is None and not converter.target_spec.supported_types:
        return "dynamic-range quantisation"
    return None


def _lean(converter):
    convert = converter.convert

    def lean_convert():
        what = declined(converter)
        if what is not None:
            raise RuntimeError(f"{what}: {DECLINED}")
        return convert()

    converter.convert = lean_convert
    return converter


def install_tensorflow() -> None:
    """1.28: make every TFLite converter onnx2tf creates decline the unshipped variants."""
    import tensorflow as tf

    cls = tf.lite.TFLiteConverter
    for name in ("from_saved_model", "from_concrete_functions", "from_keras_model"):
        make = getattr(cls, name)
        setattr(cls, name, staticmethod(lambda *a, _make=make, **k: _lean(_make(*a, **k))))


SCHEMA_MODULE = "onnx2tf.tflite_builder.schema.schema_generated"


def install_flatbuffer_direct() -> None:
    """2.x: skip the int16-activation variants; import the schema module instead of compiling its copy."""
    import filecmp

    from onnx2tf import tflite_builder
    from onnx2tf.tflite_builder import schema_loader, tflite_importer
    from onnx2tf.utils import onnx_litert_runtime as runtime

    tflite_builder.strict_int16_activation_skip_reasons = lambda model_ir: [f"integer quantisation with int16 activations: {DECLINED}"]
    compile_copy = schema_loader.load_schema_module

    @functools.lru_cache(maxsize=16)
    def load_schema_module(output_folder_path: str) -> dict:
        # the same artifacts in the output folder; the module itself when the copy is the bundled file
        _, copy = runtime.ensure_tflite_schema_artifacts(output_folder_path=output_folder_path)
        if not filecmp.cmp(copy, runtime._BUNDLED_SCHEMA_PY_PATH, shallow=False):
            return compile_copy(output_folder_path)
        return dict(vars(importlib.import_module(SCHEMA_MODULE)))

    for module in (schema_loader, tflite_builder, tflite_importer):
        module.load_schema_module = load_schema_module


def install() -> None:
    from edgeport.convert.to_tflite_pass import installed_backend

    if installed_backend().generation >= 2:
        install_flatbuffer_direct()
    else:
        install_tensorflow()


AWAIT_JOB = "--await-job"
SIMPLIFY = "--simplify"


def _reply_channel():
    """Standard output for the answers alone: whatever else this process prints goes nowhere."""
    import os

    channel = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    return channel


def simplify_job(job: dict) -> dict:
    """Simplify the job's ONNX into its ``out``: the node count, or the error, whose caller then
    simplifies in its own process and reports it as it always does."""
    from pathlib import Path

    from edgeport.convert.export_onnx_pass import simplify

    try:
        return {"nodes": simplify(Path(job["simplify"]), out=Path(job["out"]))}
    except Exception as exc:  # noqa: BLE001 - said to the caller, which does it again itself
        return {"error": f"{type(exc).__name__}: {exc}"}


def take_job(job: dict) -> list[str]:
    """Set this process up as the job says (working folder; stdout and stderr into its log) and
    return onnx2tf's arguments."""
    import os

    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.chdir(job["cwd"])
    return [str(a) for a in job["argv"]]


def main() -> None:
    from edgeport._lazy import importing, one_shot_process

    one_shot_process()  # one conversion, then exit: imports pause the collector and freeze what they leave
    awaiting = sys.argv[1:2] == [AWAIT_JOB]
    replies = _reply_channel() if awaiting and SIMPLIFY in sys.argv[2:] else None
    with importing():
        install()
        importlib.import_module("onnx2tf.onnx2tf")  # the converter itself (2.x loads it on first use)
        if replies is not None:
            importlib.import_module("onnxslim")
    while awaiting:
        line = sys.stdin.readline()
        if not line.strip():
            return  # not needed after all
        job = json.loads(line)
        if "simplify" in job and replies is not None:
            replies.write(json.dumps(simplify_job(job)) + "\n")
            replies.flush()
            continue
        sys.argv[1:] = take_job(job)
        break
    sys.argv[0] = "onnx2tf"
    runpy.run_module("onnx2tf", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
