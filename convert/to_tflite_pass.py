"""Pass: the TFLite files the board runs, written by the converter ``--converter`` names
(``convert/converter.py``: onnx2tf from the ONNX graph, or litert-torch from the PyTorch model).

int8 is converted from the graph with its output groups normalised where one output mixes
scales (``int8_groups.py``), and fixed where the converter breaks a kernel's quantisation
constraint (``tflite_fixes.py``). A board that runs uint8 (TFLite 1.x) gets the int8 file
quantised per tensor and rewritten as uint8 (``uint8.py``); the int8 file it came from is kept
as its twin, which parity compares it with. A variant the converter cannot write is reported,
not fatal: the float32 file still ships, and parity gives the missing variant a failed row
that says why.
"""

from __future__ import annotations

import numpy as np

from edgeport.convert.base import ConvertConfig, Converted, Exported, Pass, PassResult
from edgeport.convert.converters import converter
from edgeport.convert.tflite_fixes import requantize_int8_constraints, share_resize_quantization
from edgeport.convert.uint8 import int8_to_uint8
from edgeport.errors import BadInputError, ConversionError, PassCheckError


def _write(path, data: bytes) -> None:
    """A file of the run, whose write on a full disk names it (Python's OSError does not)."""
    try:
        path.write_bytes(data)
    except OSError as exc:
        if not exc.filename:
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise


class ToTFLitePass(Pass[Exported, Converted]):
    name = "to_tflite"

    def run(self, value: Exported, config: ConvertConfig) -> PassResult[Converted]:
        variants = config.variants
        if not variants:
            raise BadInputError(
                f"board {config.board.name} runs only {', '.join(config.board.dtypes)}; drop --no-int8 or choose another --board"
            )
        quantised = next((v for v in variants if v != "float32"), None)  # int8, uint8 or none
        chosen = converter(config.converter)
        conversion = chosen.convert(value, config.work_dir, quantised=quantised, timeout_s=config.converter_timeout_s)
        if "float32" in conversion.not_written:
            raise ConversionError(f"{chosen.name} wrote no float32 file: {conversion.not_written['float32']}")
        plans, info, how = conversion.plans, chosen.info(), chosen.describe()
        files, not_written, seconds = conversion.files, conversion.not_written, conversion.seconds
        not_written = {(quantised if v == "int8" else v): why for v, why in not_written.items()}
        if quantised in not_written:
            plans = None
        tflite, twins = {}, {}
        fixed = requantized = 0
        for variant, src in files.items():
            model = src.read_bytes()
            if variant == "int8":
                model, fixed = share_resize_quantization(model)
                model, requantized = requantize_int8_constraints(model)
            if variant == "int8" and quantised == "uint8":
                twin = config.work_dir / "int8_twin" / "model_int8.tflite"
                twin.parent.mkdir(exist_ok=True)
                _write(twin, model)
                try:
                    model = int8_to_uint8(model)
                except ConversionError as exc:
                    not_written["uint8"], plans = f"the int8 file cannot be rewritten as uint8: {exc}", None
                    continue
                variant, twins["uint8"] = "uint8", twin
            if variant not in variants:
                continue  # the board does not run it: do not ship it
            dst = config.work_dir / f"model_{variant}.tflite"
            _write(dst, model)
            tflite[variant] = dst
        sizes = ", ".join(f"{v} {p.stat().st_size / 1024:.0f} KiB" for v, p in tflite.items())
        note = f"; {fixed} int8 resize outputs given their input's quantisation" if fixed else ""
        if twins:
            note += "; uint8 from the int8 file quantised per tensor, its twin, whose arithmetic it keeps (shifted by 128)"
        if requantized:
            note += f"; {requantized} int8 requantise ops inserted where the converter broke a kernel's quantisation constraint"
        if plans is not None:
            note += "; int8 output groups scaled apart before they are joined (pixels by the input size)"
        for variant, how in conversion.notes.items():
            note += f"; {variant} {how}"
        for variant, why in not_written.items():
            note += f"; {variant} NOT written: {why}"
        converted = Converted(value, tflite, not_written, conversion.notes, info, plans, twins)
        return PassResult(converted, changed=True, summary=f"{sizes} ({how}: {seconds:.1f} s{note})")

    def check(self, before: Exported, after: Converted, config: ConvertConfig) -> None:
        from edgeport.ops.tflite_run import load_interpreter

        imgsz, names = after.prepared.imgsz, after.prepared.output_names
        for variant, path in after.files.items():
            # the file's own structure, on the reference kernels: whether the optimised runtime (its
            # delegates) can prepare it is a verdict on the file, which parity reports as a failed row
            try:
                interp = load_interpreter(path, kernels="reference")
            except (RuntimeError, ValueError):
                continue  # a file no runtime can prepare: parity's rows say so, in the runtime's words
            (inp,) = interp.get_input_details()
            want = (1, imgsz, imgsz, 3)
            if tuple(inp["shape"]) != want:
                raise PassCheckError(f"{variant} TFLite input is {tuple(inp['shape'])}, expected NHWC {want}")
            if variant in ("int8", "uint8"):
                # full integer: quantised in and out, as a microcontroller, an NPU or an old runtime needs
                dtypes = [("input", inp["dtype"])] + [(d["name"], d["dtype"]) for d in interp.get_output_details()]
                wrong = [f"{name} {np.dtype(dt)}" for name, dt in dtypes if np.dtype(dt) != np.dtype(variant)]
                if wrong:
                    raise PassCheckError(f"{variant} TFLite is not full-integer at its edges: {', '.join(wrong)} (expected {variant})")
            if len(interp.get_output_details()) != len(names):
                raise PassCheckError(f"{variant} TFLite has {len(interp.get_output_details())} outputs, expected {len(names)}")
