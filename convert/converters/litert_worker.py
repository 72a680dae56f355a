"""litert-torch's side of ``convert/converters/litert.py``, run by the converter's own Python.

Standalone on purpose (the standard library, numpy, torch, litert_torch and ai_edge_quantizer;
no edgeport import): it runs in the environment ``edgeport converters install litert-torch``
built. One folder in, files out:

    DIR/model.pt2        the prepared model, as ``torch.export.save`` wrote it
    DIR/sample.npy       one NCHW float32 input
    DIR/calib.npy        NCHW float32 calibration images (only for int8)
    DIR/job.json         {"variants": ["float32", "int8"?], "per_tensor": bool, "ask": bool}
    (``litert_worker.py``: it imports first, then reads DIR from standard input)
    -> DIR/model_float32.tflite, DIR/model_int8.tflite, DIR/result.json
       {"version": ..., "written": [...], "errors": {variant: message}}

int8 is quantised from DIR/model_float32.tflite, or, where the job says ``ask``, from the file
edgeport names on the next line of standard input once the worker has written float32 and
DIR/float32.done (that file with its output groups divided apart: ``int8_groups.normalise_tflite``);
no line, no int8.

The model takes NHWC input (``to_channel_last_io``), as onnx2tf's files do, so the board, the
calibration and parity treat both converters' files alike; outputs keep PyTorch's layout. int8
is full integer (int8 input and output) by ai-edge-quantizer's static int8 recipe, calibrated on
our images: the quantiser that litert-torch and Ultralytics' own LiteRT export use.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path


def _last_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return text[-1][:400] if text else type(exc).__name__


def calibrate(model: bytes, manager, samples: dict) -> dict:
    """What ``Quantizer.calibrate`` records (each tensor's min and max per image, as a moving
    average in float32), taken by TFLite's profiler in C++ as XNNPACK runs, a thread per core,
    where the quantiser's own calibration copies every tensor into Python after every image and
    runs 16 threads whatever the cores (``benchmarks/litert_calibration_bench.py``; docs/measured.md).

    The profiler's records are the tensors' own ranges; the quantiser's are its per-op rules', and
    they can part (a padded max-pool's input, recorded down to -inf). So both run on the first
    image, and only where every record is the same, to the bit, does the profiler take every
    image, its averages summed as the quantiser sums them, and only where they stay finite; else
    (or where the profiler fails) the quantiser's own calibration runs on, and the log says why."""
    import os

    import numpy as np
    from ai_edge_quantizer.calibrator import CalibrationMode, Calibrator
    from ai_edge_quantizer.utils.qsv_utils import moving_average_update

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

    def as_float32(qsv: dict) -> dict:  # the profiler's float64 records of float32 values: exact
        return {k: np.asarray(v, np.float32) for k, v in qsv.items()}

    first = {key: list(images)[:1] for key, images in samples.items()}
    rest = {key: list(images)[1:] for key, images in samples.items()}
    quantisers = Calibrator(model, num_threads=cores, mode=CalibrationMode.CALIBRATION_PRESERVE_ALL_TENSORS)
    quantisers.calibrate(first, manager)
    own = quantisers.get_model_qsvs()
    try:
        profiler = Calibrator(model, num_threads=cores, mode=CalibrationMode.CALIBRATION_PROFILER_BASED,
                              qsv_update_func=lambda old, new: moving_average_update(as_float32(old), as_float32(new)))
        profiler.calibrate(first, manager)
        profiled = profiler.get_model_qsvs()
        parted = sorted(set(own) ^ set(profiled)) or [
            name for name in own if any(np.asarray(own[name][k]).dtype != np.float32  # (an integer tensor's: averaged otherwise)
                                        or not np.array_equal(np.ravel(own[name][k]), np.ravel(as_float32(profiled[name])[k]))
                                        for k in ("min", "max"))]
        if parted:
            why = f"it records {len(parted)} tensor(s) otherwise than the quantiser on the first image ({parted[0]})"
        else:
            profiler.calibrate(rest, manager)
            ranges = profiler.get_model_qsvs()
            if all(np.isfinite(np.asarray(v, np.float64)).all() for qsv in ranges.values() for v in qsv.values()):
                # in the quantiser's own form: float32, in the shape its records keep
                return {name: {k: np.reshape(np.asarray(v, np.float32), own[name][k].shape) for k, v in qsv.items()}
                        for name, qsv in ranges.items()}
            why = "a later image gave a range beyond float32's (the quantiser leaves such values out)"
    except Exception as exc:  # noqa: BLE001 -- a graph the profiler cannot run: the quantiser's own calibration can
        why = f"it failed: {_last_line(exc)}"
    print(f"edgeport: TFLite's profiler does not take the calibration ({why}): calibrating as the quantiser does",
          file=sys.stderr, flush=True)
    quantisers.calibrate(rest, manager)  # where the first image left it: as its own run over every image
    return quantisers.get_model_qsvs()


def convert(folder: Path, ask) -> None:
    import litert_torch
    import numpy as np
    import torch

    job = json.loads((folder / "job.json").read_text())
    result = {"version": getattr(litert_torch, "__version__", "?"), "written": [], "errors": {}}
    try:
        program = torch.export.load(str(folder / "model.pt2"))
        sample = torch.from_numpy(np.load(folder / "sample.npy"))
        nhwc = sample.permute(0, 2, 3, 1).contiguous()
        edge = litert_torch.convert(litert_torch.to_channel_last_io(program.module(), args=[0]), (nhwc,))
        edge.export(str(folder / "model_float32.tflite"))
        result["written"].append("float32")
    except Exception as exc:  # noqa: BLE001 -- the converter's reason, for the report
        result["errors"]["float32"] = _last_line(exc)
        traceback.print_exc()
    source = folder / "model_float32.tflite" if "float32" in result["written"] else None
    if job.get("ask") and source is not None:  # which float32 file int8 is quantised from: edgeport's answer
        (folder / "float32.done").touch()
        answer = ask().strip()
        source = Path(answer) if answer else None
        if source is None:
            result["errors"]["int8"] = "edgeport named no float32 file to quantise (its input closed)"
    if "int8" in job["variants"] and source is not None:
        try:
            from ai_edge_quantizer import qtyping, quantizer, recipe_manager

            calib = np.load(folder / "calib.npy").transpose(0, 2, 3, 1)
            qt = quantizer.Quantizer(str(source))
            # recipe.static_wi8_ai8(), with the weights' granularity asked for: per channel, or per
            # tensor for a uint8 board (its kernels take one scale per tensor)
            granularity = qtyping.QuantGranularity.TENSORWISE if job.get("per_tensor") else qtyping.QuantGranularity.CHANNELWISE
            manager = recipe_manager.RecipeManager()
            manager.add_static_config(regex=".*", operation_name=qtyping.TFLOperationName.ALL_SUPPORTED, activation_num_bits=8,
                                      weight_num_bits=8, weight_granularity=granularity)
            qt.load_quantization_recipe(manager.get_quantization_recipe())
            samples = {"serving_default": [{"args_0": np.ascontiguousarray(calib[i:i + 1], np.float32)} for i in range(len(calib))]}
            ranges = calibrate(source.read_bytes(), manager, samples)
            qt.quantize(calibration_result=ranges).export_model(str(folder / "model_int8.tflite"), overwrite=True)
            result["written"].append("int8")
        except Exception as exc:  # noqa: BLE001
            result["errors"]["int8"] = _last_line(exc)
            traceback.print_exc()
    (folder / "result.json").write_text(json.dumps(result))


def main() -> int:
    """Import first (torch and litert-torch, while edgeport runs the passes before the
    conversion), then take one folder from standard input, writing the log there. Standard input
    closed with no folder: nothing asked, exit 0."""
    import os

    try:
        import litert_torch  # noqa: F401
        import numpy  # noqa: F401
        import torch  # noqa: F401

        failed = None
    except Exception:  # noqa: BLE001 -- said in the job's log, where edgeport reads the reason
        failed = traceback.format_exc()
    line = sys.stdin.readline().strip()
    if not line:
        return 0
    folder = Path(line)
    log = os.open(folder / "litert-torch.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    if failed:
        print(failed, file=sys.stderr, flush=True)
        return 1
    convert(folder, sys.stdin.readline)
    return 0


def exit_now(code: int) -> None:
    """Exit once the files and result.json are written, without the interpreter's teardown of
    torch, TensorFlow and litert-torch, which edgeport would wait for (``edgeport.process.exit_now``,
    which this file cannot import). What the libraries asked to run at exit still runs: TensorFlow's
    autograph removes its temporary files then."""
    import atexit
    import os

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
