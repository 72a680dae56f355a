"""onnx2tf without the work on files edgeport never ships; what it ships is plain onnx2tf's but for int8's calibration.

Asked for int8 (``-oiqt``), onnx2tf writes six or seven files; edgeport ships two: float32
and full-integer int8 -- and where int8 is converted from its own graph (output groups scaled
apart: ``int8_groups.py``), one run ships float32 and the other int8 alone (``--ships``, the
driver's own flag). On the 1.28 line (TensorFlow) this driver skips the others' work and
changes nothing else but the calibration, below (``tests/convert/test_onnx2tf_lean.py``
compares the shipped files with plain onnx2tf's). Each unshipped variant costs a TensorFlow conversion, most
of the int8 run's time (docs/measured.md):

- declined, where onnx2tf runs the variant in its own ``try`` block that warns on
  ``RuntimeError`` and goes on: dynamic-range quantisation, and integer quantisation with int16
  activations, twice (with float and with int16 inputs; each calibrates again);
- converted to nothing (an empty file, removed when onnx2tf ends), where onnx2tf has no way out:
  float16 and an unshipped float32, which it converts outside any ``try``, and integer
  quantisation with float input and output (it calibrates again), in the same ``try`` as
  the full-integer file that edgeport ships.

On the 2.x line (``flatbuffer_direct``) it skips nothing: skipping its int16 variants saved
nothing above noise. There it calibrates on two threads, each on half the
images (``calibrate_in_halves``): 2.x measures each tensor's range by running the float32 file
image by image on one core, most of the int8 run's time, and TFLite runs
an invoke without holding Python's lock. A range is the minimum and maximum over the images in
any grouping, so the halves merge exactly. Each half runs on the optimised kernels
(``collect_on_optimised_kernels``), which round their own
way: a range may differ from 2.x's in its last bits, and the int8 file with it (the same ops,
tensors and weights; ``tests/convert/test_onnx2tf_lean.py``). On 1.28, TensorFlow's calibrator runs
the first image only, and ``tf_calibration`` gives every tensor its own range over every image, on the
optimised kernels too -- not TensorFlow's record where an op writes over its input (tensorflow#127842),
so that int8 file differs from plain onnx2tf's there.

On both lines the driver imports onnx2tf in ``_lazy.importing``, so the conversion's own garbage
collections do not walk TensorFlow's or onnx2tf's objects again and again (docs/measured.md).

    python -m edgeport.convert.converters.onnx2tf_lean [--ships float32,int8] ONNX2TF_ARGUMENTS...
    python -m edgeport.convert.converters.onnx2tf_lean --await-job   # then one JSON line on stdin

``--await-job`` (``onnx2tf.warm_command``): import first, then take the job -- ``{"argv": [...],
"cwd": ..., "log": ...}`` -- from one line of stdin: change to ``cwd``, write all output to ``log``,
and run. Standard input closed without a job: exit 0, having converted nothing.
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import runpy
import sys
from pathlib import Path

from edgeport.convert.converters.onnx2tf import AWAIT_JOB, ONNX2TF_OUTPUTS, SHIPS, installed_backend
from edgeport.process import in_halves

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


def unshipped(converter, ships: set[str]) -> str | None:
    """1.28: the variant ``converter`` is set up to write where onnx2tf gives no way out (module
    docstring), when this run does not ship it, or None."""
    import tensorflow as tf

    if not converter.optimizations:
        return None if "float32" in ships else "float32"
    if tf.float16 in set(converter.target_spec.supported_types):
        return "float16"
    if converter.representative_dataset is not None and converter.inference_input_type == tf.float32 \
            and converter.inference_output_type == tf.float32:
        return "integer quantisation with float input and output"
    return None


def _lean(converter, ships: set[str]):
    convert = converter.convert

    def lean_convert():
        what = declined(converter)
        if what is not None:
            raise RuntimeError(f"{what}: {DECLINED}")
        if unshipped(converter, ships) is not None:
            return b""  # onnx2tf writes it as an empty file: removed when it ends (``remove_unshipped``)
        return convert()

    converter.convert = lean_convert
    return converter


def install_tensorflow(ships: set[str]) -> None:
    """1.28: make every TFLite converter onnx2tf creates skip the variants this run does not ship,
    and compute its calibration ranges on the optimised kernels (``tf_calibration``)."""
    import tensorflow as tf

    from edgeport.convert.converters import tf_calibration

    tf_calibration.install()
    cls = tf.lite.TFLiteConverter
    for name in ("from_saved_model", "from_concrete_functions", "from_keras_model"):
        make = getattr(cls, name)
        setattr(cls, name, staticmethod(lambda *a, _make=make, **k: _lean(_make(*a, **k), ships)))


def calibrate_in_halves(collect, *, tflite_path: str, calibration_samples: list) -> dict:
    """2.x's ``collect_calibration_ranges_from_tflite`` (``collect``: one interpreter, the images in
    turn) on each half of the images at once, each on its own interpreter and thread; merged (``merge_ranges``)."""
    parts = in_halves(lambda part: collect(tflite_path=tflite_path, calibration_samples=part), list(calibration_samples))
    return parts[0] if len(parts) == 1 else merge_ranges(parts)


def merge_ranges(parts: list[dict]) -> dict:
    """The ranges of consecutive runs of images, as one run over them all records them: each
    tensor's minimum of minima, maximum of maxima and count of images, in the order the tensors
    were first seen."""
    merged: dict = {}
    for part in parts:
        for name, seen in part.items():
            have = merged.get(name)
            if have is None:
                merged[name] = copy.copy(seen)
            else:
                have.min_value = min(float(have.min_value), float(seen.min_value))
                have.max_value = max(float(have.max_value), float(seen.max_value))
                have.num_samples = int(have.num_samples) + int(seen.num_samples)
    return merged


def collect_on_optimised_kernels(collect, *, tflite_path: str, calibration_samples: list) -> dict:
    """2.x's ``collect_calibration_ranges_from_tflite`` (``collect``), its loop as it is, but the float32
    file run on TFLite's optimised kernels (XNNPACK), every op's output made a graph output so that the
    runtime keeps them all (``every_tensor_as_output``), and each tensor read in place. 2.x runs the
    reference kernels with every tensor preserved, copying every tensor out after every image (a third
    of this one's cost there: docs/measured.md); the default board runs these kernels, which round
    their own way (module docstring). Samples that do not fit the inputs as they are: 2.x's own loop,
    which resizes them."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter
    from onnx2tf.tflite_builder.quantization import TensorCalibrationRange, _normalize_tensor_detail_name

    from edgeport.validate.parity.divergence import every_tensor_as_output

    samples = list(calibration_samples)
    model, _ = every_tensor_as_output(Path(tflite_path).read_bytes())
    interpreter = Interpreter(model_content=model, num_threads=1)
    interpreter.allocate_tensors()
    inputs = list(interpreter.get_input_details())
    by_name = {_normalize_tensor_detail_name(d.get("name", "")): d for d in inputs}
    fed = []  # per sample: (sample name, input detail, value)
    for sample in samples:
        feeds = []
        for idx, (name, value) in enumerate(sample.items()):
            detail = by_name.get(str(name), inputs[idx] if idx < len(inputs) else None)
            value = np.asarray(value, dtype=np.float32)
            if detail is None or list(value.shape) != [int(v) for v in detail["shape"]]:
                del interpreter  # (its tensors: not kept beside 2.x's own)
                return collect(tflite_path=tflite_path, calibration_samples=samples)
            feeds.append((str(name), detail, value))
        fed.append(feeds)
    ranges: dict = {}

    def update(name: str, arr: np.ndarray) -> None:  # 2.x's, as it is
        if arr.size == 0 or not np.issubdtype(arr.dtype, np.floating):
            return
        mn, mx = float(np.nanmin(arr)), float(np.nanmax(arr))
        if not np.isfinite(mn) or not np.isfinite(mx):
            return
        current = ranges.get(name)
        if current is None:
            ranges[name] = TensorCalibrationRange(mn, mx, 1)
        else:
            current.min_value = min(float(current.min_value), mn)
            current.max_value = max(float(current.max_value), mx)
            current.num_samples = int(current.num_samples) + 1

    details = [(_normalize_tensor_detail_name(d.get("name", "")), int(d["index"])) for d in interpreter.get_tensor_details()]
    for feeds in fed:
        for name, detail, value in feeds:
            interpreter.set_tensor(int(detail["index"]), value)
            update(name, value)
            update(_normalize_tensor_detail_name(detail.get("name", name)), value)
        interpreter.invoke()
        for name, index in details:
            if name == "":
                continue
            try:
                view = interpreter.tensor(index)()  # read in place, before the next invoke
            except Exception:  # noqa: BLE001 -- 2.x skips a tensor it cannot read, whatever the reason
                continue
            update(name, view)
            del view  # the runtime refuses to invoke while a view of its tensors is held
    return ranges


def install_flatbuffer_direct() -> None:
    import functools

    import onnx2tf.tflite_builder as builder

    collect = builder.collect_calibration_ranges_from_tflite
    builder.collect_calibration_ranges_from_tflite = functools.partial(
        calibrate_in_halves, functools.partial(collect_on_optimised_kernels, collect))


def install(ships: set[str]) -> bool:
    """1.28: skip the unshipped variants and compute the calibration ranges (True); 2.x: calibrate on two
    threads, nothing to skip (False)."""
    if installed_backend().generation >= 2:
        install_flatbuffer_direct()
        return False
    install_tensorflow(ships)
    return True


def take_ships(argv: list[str]) -> tuple[frozenset[str], list[str]]:
    """The variants ``--ships`` names (every one, without it) and onnx2tf's own arguments."""
    if argv[:1] != [SHIPS]:
        return frozenset(ONNX2TF_OUTPUTS), argv
    return frozenset(argv[1].split(",")), argv[2:]


def remove_unshipped(argv: list[str]) -> None:
    """The empty files onnx2tf wrote for the variants converted to nothing, in its output folder (``-o``)."""
    if "-o" not in argv[:-1]:
        return
    for path in Path(argv[argv.index("-o") + 1]).glob("*.tflite"):
        if path.is_file() and path.stat().st_size == 0:
            path.unlink()


def take_job(job: dict) -> list[str]:
    """Set this process up as the job says (module docstring) and return onnx2tf's arguments."""
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
    ships = set()  # filled once the job is known; the converters read it when onnx2tf converts
    with importing():
        skips = install(ships)
        importlib.import_module("onnx2tf.onnx2tf")  # the converter itself (2.x loads it on first use)
    argv = sys.argv[1:]
    if argv[:1] == [AWAIT_JOB]:
        line = sys.stdin.readline()
        if not line.strip():
            return  # not needed after all
        argv = take_job(json.loads(line))
    shipped, argv = take_ships(argv)
    ships.update(shipped)
    sys.argv[:] = ["onnx2tf", *argv]
    try:
        runpy.run_module("onnx2tf", run_name="__main__", alter_sys=True)
    finally:
        if skips:
            remove_unshipped(argv)


if __name__ == "__main__":
    main()
    import atexit

    from edgeport.process import exit_now

    atexit._run_exitfuncs()  # what the libraries asked to run at exit (TensorFlow's autograph removes its temporary files)
    exit_now(0)  # its files written and closed: the rest of TensorFlow's teardown only kept edgeport waiting
