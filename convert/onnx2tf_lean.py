"""onnx2tf without the work on files edgeport never ships; what it ships is byte for byte plain onnx2tf's.

Asked for int8 (``-oiqt``), onnx2tf writes six or seven files; edgeport ships two: float32
and full-integer int8. On the 1.28 line (TensorFlow) this driver declines the others' work
where onnx2tf's own code offers a way out, and changes nothing else
(``tests/convert/test_onnx2tf_lean.py`` compares the shipped files with plain onnx2tf's):
dynamic-range quantisation, and integer quantisation with int16 activations, twice (with float
and with int16 inputs; each calibrates again), cost a TensorFlow conversion each; on YOLOv8n at
320 px those three take 17 s of a 37 s run. onnx2tf runs each in its own ``try`` block that
warns on ``RuntimeError`` and goes on, so the driver declines exactly those three before
TensorFlow starts them. On the 2.x line (``flatbuffer_direct``) it declines nothing: skipping its
int16 variants measured 0.035 s of 0.9 s on the demo, within noise.

On both lines the driver imports onnx2tf with the cyclic garbage collector paused, and freezes
what the import leaves (``_lazy.importing``): the conversion's own collections then no longer
walk TensorFlow's or onnx2tf's objects again and again (1.28 on the demo: 6.7 s -> 4.4 s; 2.x:
1.05 s -> 0.9 s).

    python -m edgeport.convert.onnx2tf_lean ONNX2TF_ARGUMENTS...
    python -m edgeport.convert.onnx2tf_lean --await-job   # then one JSON line on stdin

``--await-job`` (``onnx2tf.warm_converter``): import first, while the caller is still importing
torch and exporting, then take the job -- ``{"argv": [...], "cwd": ..., "log": ...}`` -- from
one line of stdin: change to ``cwd``, write all output to ``log``, and run. Standard input
closed without a job: exit 0, having converted nothing.
"""

from __future__ import annotations

import importlib
import json
import runpy
import sys

from edgeport.convert.onnx2tf import AWAIT_JOB

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


def install() -> None:
    """1.28: decline the unshipped variants; 2.x: nothing to decline."""
    from edgeport.convert.onnx2tf import installed_backend

    if installed_backend().generation < 2:
        install_tensorflow()


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
    with importing():
        install()
        importlib.import_module("onnx2tf.onnx2tf")  # the converter itself (2.x loads it on first use)
    if sys.argv[1:2] == [AWAIT_JOB]:
        line = sys.stdin.readline()
        if not line.strip():
            return  # not needed after all
        sys.argv[1:] = take_job(json.loads(line))
    sys.argv[0] = "onnx2tf"
    runpy.run_module("onnx2tf", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
