"""Pass: the TFLite files the board runs, written by the converter ``--converter`` names
(``convert/converters/base.py``: onnx2tf from the ONNX graph, or litert-torch from the PyTorch model).

int8 is converted from the graph with its output groups normalised where one output mixes
scales (``int8_groups.py``); the next passes fix what the converter broke in it
(``int8_fixes_pass.py``) and, for a board that runs uint8 (TFLite 1.x), rewrite it as uint8
(``uint8_pass.py``). A variant the converter cannot write is reported, not fatal: the float32
file still ships, and parity gives the missing variant a failed row that says why.
"""

from __future__ import annotations

import numpy as np

from edgeport.convert.base import ConvertConfig, Converted, Exported, Pass, PassResult, Prepared
from edgeport.convert.converters.registry import converter
from edgeport.errors import BadInputError, ConversionError, PassCheckError
from edgeport.validate.parity.early import EarlyRuns, parity_inputs


def write_file(path, data: bytes) -> None:
    """A file of the run, whose write on a full disk names it (Python's OSError does not)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.write_bytes(data)
    except OSError as exc:
        if not exc.filename:
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise


def check_edges(files: dict, prepared: Prepared) -> None:
    """Every file takes the NHWC image, has the model's outputs, and a quantised one is quantised
    at its edges (full integer, as a microcontroller, an NPU or an old runtime needs); checked on
    the reference kernels. Whether the optimised runtime (its delegates) can prepare a file is a
    verdict on the file, which parity reports as a failed row."""
    from edgeport.ops.tflite_run import load_interpreter

    for variant, path in files.items():
        try:
            interp = load_interpreter(path, kernels="reference")
        except (RuntimeError, ValueError):
            continue  # a file no runtime can prepare: parity's rows say so, in the runtime's words
        (inp,) = interp.get_input_details()
        want = (1, prepared.imgsz, prepared.imgsz, 3)
        if tuple(inp["shape"]) != want:
            raise PassCheckError(f"{variant} TFLite input is {tuple(inp['shape'])}, expected NHWC {want}")
        if variant in ("int8", "uint8"):
            dtypes = [("input", inp["dtype"])] + [(d["name"], d["dtype"]) for d in interp.get_output_details()]
            wrong = [f"{name} {np.dtype(dt)}" for name, dt in dtypes if np.dtype(dt) != np.dtype(variant)]
            if wrong:
                raise PassCheckError(f"{variant} TFLite is not full-integer at its edges: {', '.join(wrong)} (expected {variant})")
        if len(interp.get_output_details()) != len(prepared.output_names):
            raise PassCheckError(f"{variant} TFLite has {len(interp.get_output_details())} outputs, expected "
                                 f"{len(prepared.output_names)}")


def _parity_meanwhile(early: EarlyRuns, exported: Exported, variants: list[str]):
    """The converter's ``meanwhile``: while its child works, the runs of parity's own plan
    (``run.plan_rows``) that need nothing but what is there already: the reference's (and its boxes
    and noise floors, from its outputs), the folded model's and the ONNX graph's on the first call,
    the float32 file's on the optimised kernels once it is written. Nothing here stops the
    conversion: a run that cannot start is parity's to run, and to report."""
    from functools import partial

    from edgeport.validate.parity.run import ParitySubject, judged_reference, plan_rows, reference_runner

    prepared = exported.prepared

    def meanwhile(files: dict) -> None:
        try:
            early.start(reference_runner(prepared.reference), then=partial(
                judged_reference, n_real=len(prepared.val), head=prepared.head, variants=variants))
            written = {v: files[v] for v in ("float32",) if v in variants and v in files}
            subject = ParitySubject(prepared.reference, prepared.module, exported.onnx, written, prepared.output_names,
                                    prepared.strides, prepared.val, prepared.val_source)
            for row in plan_rows(subject, prepared.output_shapes):
                early.start(row.runner)  # (once per run: a row planned again is the same run)
        except Exception:  # noqa: BLE001 -- ONNX Runtime missing, a file unreadable: parity runs it, and says so
            pass

    return meanwhile


class ToTFLitePass(Pass[Exported, Converted]):
    name = "to_tflite"

    def run(self, value: Exported, config: ConvertConfig) -> PassResult[Converted]:
        variants = config.variants
        if not variants:
            raise BadInputError(
                f"board {config.board.name} runs only {', '.join(config.board.dtypes)}; drop --no-int8 or choose another --board"
            )
        quantised = config.quantised  # int8, uint8 or none
        chosen = converter(config.converter)
        early = EarlyRuns(parity_inputs(value.prepared.val, config.seed)) if config.early_parity else None
        if early is not None:
            config.context.own(early.close)  # parity closes it once it has taken its runs; the run's end, where it never does
        conversion = chosen.convert(value, config.work_dir, quantised=quantised, timeout_s=config.converter_timeout_s,
                                    context=config.context, meanwhile=_parity_meanwhile(early, value, variants) if early else None)
        if early is not None:
            early.models_done()  # the passes after this one may read the modules (--cross-check traces one)
        if "float32" in conversion.not_written:
            raise ConversionError(f"{chosen.name} wrote no float32 file: {conversion.not_written['float32']}")
        # the converter's int8 file is what a uint8 board's file is rewritten from (uint8_pass.py)
        wanted = {"float32"} & set(variants) | ({"int8"} if quantised else set())
        files = {}
        for variant, src in conversion.files.items():
            if variant in wanted:
                files[variant] = config.work_dir / f"model_{variant}.tflite"
                write_file(files[variant], src.read_bytes())
        plans = None if "int8" in conversion.not_written else conversion.plans
        sizes = ", ".join(f"{v} {p.stat().st_size / 1024:.0f} KiB" for v, p in files.items())
        note = "; int8 output groups scaled apart before they are joined (pixels by the input size)" if plans is not None else ""
        note += "".join(f"; {variant} {how}" for variant, how in conversion.notes.items())
        note += "".join(f"; {variant} NOT written: {why}" for variant, why in conversion.not_written.items())
        converted = Converted(value, files, dict(conversion.not_written), conversion.notes, chosen.info(), plans, early=early)
        return PassResult(converted, changed=True, summary=f"{sizes} ({chosen.describe()}: {conversion.seconds:.1f} s{note})")

    def check(self, before: Exported, after: Converted, config: ConvertConfig) -> None:
        check_edges(after.files, after.prepared)
