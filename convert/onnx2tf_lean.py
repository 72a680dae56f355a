"""onnx2tf 1.28, without the TensorFlow conversions of files edgeport never ships.

Asked for int8 (``-oiqt``), onnx2tf 1.28 writes seven files; edgeport ships two: float32 and
full-integer int8. Three of the others cost a TensorFlow conversion each and nothing reads
them: dynamic-range quantisation, and integer quantisation with int16 activations, twice
(with float and with int16 inputs; each calibrates again). On YOLOv8n at 320 px those three
take 17 s of a 37 s run. onnx2tf runs each in its own ``try`` block that warns on
``RuntimeError`` and goes on, so this driver declines exactly those three, before TensorFlow
starts them, and onnx2tf carries on as it would after any such failure. float16 and plain
integer quantisation stay: onnx2tf's code gives them no such way out (integer quantisation
shares its block with full integer). What is shipped is byte for byte what plain onnx2tf
writes (``tests/convert/test_onnx2tf_lean.py``).

    python -m edgeport.convert.onnx2tf_lean ONNX2TF_ARGUMENTS...

The 2.x line writes without TensorFlow and is run as it is.
"""

from __future__ import annotations

import runpy
import sys

DECLINED = "declined by edgeport, which does not ship this file"


def declined(converter) -> str | None:
    """The unshipped variant ``converter`` is set up to write, by its public settings at the
    moment it converts (onnx2tf reuses one converter for several variants), or None."""
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


def install() -> None:
    """Make every TFLite converter onnx2tf creates decline the unshipped variants."""
    import tensorflow as tf

    cls = tf.lite.TFLiteConverter
    for name in ("from_saved_model", "from_concrete_functions", "from_keras_model"):
        make = getattr(cls, name)
        setattr(cls, name, staticmethod(lambda *a, _make=make, **k: _lean(_make(*a, **k))))


def main() -> None:
    install()
    sys.argv[0] = "onnx2tf"
    runpy.run_module("onnx2tf", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
