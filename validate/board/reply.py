"""What a board's runtime answers (``worker.py``'s ``result.json``), checked field by field before
edgeport uses a word of it: a board is another machine, and its reply is input like any file."""

from __future__ import annotations

from pathlib import Path

from edgeport.cliargs import real_number, whole_number
from edgeport.errors import BadInputError
from edgeport.jsonfile import Malformed, Refused, read_json
from edgeport.text import for_terminal


class BoardRuntimeError(BadInputError):
    """The board's runtime cannot be reached or used (exit 2): nothing was judged."""


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("Warning: Permanently added")]
    return for_terminal(lines[-1][:300]) if lines else "no message"


# what a board's reply may hold (board_worker.py)
MAX_TEXT = 200
OUTPUT_DTYPES = ("float32", "float16", "int8", "uint8", "int16", "int32", "int64", "bool")
MAX_DIM = 1 << 20
# a model's outputs, or, to locate where a board parts from the reference kernels, every tensor
# of one (``parity/divergence.py``); the reply's bytes are capped apart (max_reply_mb)
MAX_OUTPUTS = 4096
# result.json: names, shapes and times, about 150 bytes an output (4096 of them: 0.6 MB), a probe's
# few thousand accepted op versions; what a legitimate reply needs, with room
MAX_RESULT_BYTES = 4 * 2**20


def _text(value, what: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise Malformed(f"{what} is not a short text")
    return for_terminal(value)


def check_reply(result, mode: str, *, images: int | None = None, probes: set[str] | None = None,
                uint8_probes: set[str] | None = None, models: int | None = None) -> dict:
    """The worker's ``result.json``, checked field by field; raises ``Malformed`` naming the first
    field that is missing, of the wrong type or out of range. Text is made inert for the terminal."""
    if not isinstance(result, dict) or not isinstance(result.get("ok"), bool):
        raise Malformed("it is not an object with an 'ok' flag")
    if not result["ok"]:
        if result.get("error") not in ("no_runtime", "load", "run"):
            raise Malformed("its 'error' is not one of no_runtime, load, run")
        return {"ok": False, "error": result["error"],
                **{k: for_terminal(str(result.get(k, "?"))[:MAX_TEXT]) for k in ("message", "runtime", "version", "package")}}
    checked = {"ok": True, **{k: _text(result.get(k), k) for k in ("runtime", "version", "package")}}
    if "python" in result:
        checked["python"] = _text(result["python"], "python")
    if mode in ("run", "once"):
        outputs, ms = result.get("outputs"), result.get("ms")
        if not isinstance(outputs, list) or not 0 < len(outputs) <= MAX_OUTPUTS:
            raise Malformed(f"'outputs' is not a list of 1 to {MAX_OUTPUTS} outputs")
        checked["outputs"] = []
        for k, d in enumerate(outputs):
            shape, dtype, quant = (d.get("shape"), d.get("dtype"), d.get("quantization")) if isinstance(d, dict) else (None,) * 3
            if not (isinstance(shape, list) and 0 < len(shape) <= 8 and all(whole_number(v, 1, MAX_DIM) for v in shape)):
                raise Malformed(f"outputs[{k}].shape is not a list of positive whole numbers")
            if dtype not in OUTPUT_DTYPES:
                raise Malformed(f"outputs[{k}].dtype is not one of {', '.join(OUTPUT_DTYPES)}")
            if not (isinstance(quant, list) and len(quant) == 2 and real_number(quant[0]) and quant[0] >= 0
                    and whole_number(quant[1], -(2**31), 2**31 - 1)):
                raise Malformed(f"outputs[{k}].quantization is not [scale, zero point]")
            checked["outputs"].append({"shape": shape, "dtype": dtype, "quantization": [float(quant[0]), quant[1]]})
        if not (isinstance(ms, list) and len(ms) == images and all(real_number(v) and v >= 0 for v in ms)):
            raise Malformed(f"'ms' is not one time (ms >= 0) per image ({images})")
        checked["ms"] = [float(v) for v in ms]
        repeat = result.get("repeat_max_abs")  # -1: a NaN or infinite difference; absent: an older worker
        if repeat is not None and not (real_number(repeat) and (repeat >= 0 or repeat == -1.0)):
            raise Malformed("'repeat_max_abs' is not a difference >= 0 (or -1)")
        checked["repeat_max_abs"] = None if repeat is None else (float("inf") if repeat == -1.0 else float(repeat))
    elif mode == "time":
        ms = result.get("ms")
        if not (isinstance(ms, list) and len(ms) == models and all(real_number(v) and v >= 0 for v in ms)):
            raise Malformed(f"'ms' is not one time (ms >= 0) per model timed ({models})")
        checked["ms"] = [float(v) for v in ms]
    elif mode == "probe":
        accepted = result.get("accepted")
        if not isinstance(accepted, list) or not all(isinstance(a, str) and a in (probes or ()) for a in accepted):
            raise Malformed("'accepted' is not a list of the probe models sent")
        checked["accepted"] = list(accepted)
        uint8 = result.get("uint8", {})  # absent: an older worker
        if not (isinstance(uint8, dict) and all(isinstance(k, str) and k in (uint8_probes or ()) and isinstance(v, str)
                                                for k, v in uint8.items())):
            raise Malformed("'uint8' is not an object of the uint8 probe models sent, each with what happened")
        checked["uint8"] = {k: for_terminal(v[:MAX_TEXT]) for k, v in uint8.items()}
    return checked


def _read_result(folder: Path, returncode: int, stderr: str, what: str, mode: str) -> dict:
    path = folder / "result.json"
    if not path.is_file():
        raise BoardRuntimeError(f"{what} crashed (exit {returncode}): {_last_line(stderr)}")
    images = len(list((folder / "inputs").glob("*.npy"))) if mode in ("run", "once") else None
    probes = {p.name[: -len(".tflite")] for p in (folder / "probes").glob("*.tflite")} if mode == "probe" else None
    uint8 = {p.name[: -len(".tflite")] for p in (folder / "uint8").glob("*.tflite")} if mode == "probe" else None
    models = len(list((folder / "time").iterdir())) if mode == "time" else None
    try:  # bounded, UTF-8, no key twice (jsonfile.py): a whole reply is capped only at max_reply_mb
        result = check_reply(read_json(path, MAX_RESULT_BYTES), mode, images=images, probes=probes, uint8_probes=uint8,
                             models=models)
    except (OSError, ValueError) as exc:  # (Refused and Malformed are ValueErrors)
        why = f"it {exc}" if isinstance(exc, Refused) else str(exc)
        raise BoardRuntimeError(f"{what} answered with a result.json edgeport cannot use ({for_terminal(why[:200])}); "
                                f"check the runtime there, or reinstall it") from None
    if not result["ok"] and result["error"] == "no_runtime":
        raise BoardRuntimeError(f"{what} cannot run TFLite: {result['message']}; install tflite-runtime there, or point "
                                f"python at an environment that has it")
    return result
