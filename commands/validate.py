"""``edgeport validate``: judge a TFLite model made by any converter against the checkpoint.

The checkpoint is loaded, built and prepared by the same phases as ``convert`` (``pipeline.LOAD``
and ``PREPARE``); the TFLite file is then judged as ``convert`` judges its own: the board gate,
TFLite's optimised and reference kernels, the board emulator and the board's own runtime, on
real images (with their labels when the folder is a dataset: mAP against ground truth) plus
seeded random inputs. Same report, same gate, same exit codes as ``convert``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from edgeport._lazy import importing
from edgeport.commands.output import Progress
from edgeport.errors import BadInputError
from edgeport.runs import staged_output

DEFAULT_RUNS = Path("runs/validate")
MAX_IMAGES = 32


def _dataset_inputs(data: Path, imgsz: int, num_classes: int, limit: int):
    """Images (+ labels and letterboxes) from a dataset's val split or a plain image folder."""
    from edgeport.models.preprocess import letterbox, list_images, load_image, to_input
    from edgeport.train.data import Sample, load_split

    if (data / "images" / "val").is_dir():
        samples = load_split(data, "val", num_classes)[:limit]
        labelled = True
        source = f"{len(samples)} labelled images from {data}/images/val"
    else:  # a plain folder of images (validate() checked that it is a folder)
        files = list_images(data)[:limit]
        if not files:
            raise BadInputError(f"--data {str(data)!r} holds no images; pass a dataset folder or a folder of images")
        samples = [Sample(f, np.zeros((0, 4), np.float32), np.zeros(0, np.int64), 0, 0) for f in files]
        labelled = False
        source = f"{len(samples)} images from {data}"
    inputs, boxes = [], []
    for s in samples:
        try:
            img, lb = letterbox(load_image(s.image), imgsz)
        except (OSError, ValueError) as exc:
            raise BadInputError(f"image {str(s.image)!r} is unreadable ({exc})") from exc
        inputs.append(to_input(img))
        boxes.append(lb)
    return np.stack(inputs), source, (samples if labelled else None), boxes


def _tflite_input(path: Path):
    """(input size, variant, summary) read from the flatbuffer (the bounded reader), without
    loading an interpreter. A file no runtime can run (an empty operator list, a buffer index
    past the end, ...) is bad input, said here rather than by an interpreter deep in a run."""
    from edgeport.ops.tflite_model import read_tflite

    summary = read_tflite(path)
    if summary.problems:
        more = f" (and {len(summary.problems) - 1} more: `edgeport boards check` lists them)" if len(summary.problems) > 1 else ""
        raise BadInputError(f"--tflite {str(path)!r} is structurally invalid: {summary.problems[0]}{more}; no runtime can run "
                            f"it: pass the file as its converter wrote it")
    shape = summary.input_shape
    if len(shape) != 4 or shape[-1] != 3 or shape[1] != shape[2]:
        raise BadInputError(f"--tflite input shape {shape} is not a square NHWC RGB image (1, S, S, 3)")
    return shape[1], {"int8": "int8", "uint8": "uint8"}.get(summary.input_dtype, "float32"), summary


def _check_outputs(tflite: Path, summary, reference, sample: np.ndarray) -> None:
    """The file's outputs are the checkpoint's (each of its shapes, NCHW or NHWC, once): a file
    converted from another model, or at another size, is bad input named here, not a failure
    deep in the parity run."""
    from edgeport.models.inference import forward
    from edgeport.validate.parity.tensors import match_outputs

    expected = [(1, *o.shape[1:]) for o in forward(reference, sample[:1])]
    try:
        match_outputs(expected, list(summary.output_shapes))
    except ValueError as exc:  # no output of one of the shapes (AmbiguousOutputs is bad input already)
        raise BadInputError(f"--tflite {str(tflite)!r} has outputs {[list(s) for s in summary.output_shapes]}, and the "
                            f"checkpoint's model outputs {[list(s) for s in expected]} (NCHW; NHWC accepted): they are not "
                            f"the same model; pass the .tflite converted from this checkpoint (and --arch, if not its own)") \
            from exc


def validate(checkpoint: Path, tflite: Path, *, out: Path | None, force: bool, arch: str | None, imgsz: int | None,
             board, data: Path | None, trust_checkpoint: bool, console=None, head: str = "auto", outputs: str | None = None):
    """Judge ``tflite`` against ``checkpoint``; returns (output folder, ``report.schema.Report``)."""
    with importing():  # torch, and the modules of every phase
        from edgeport.convert.base import ConvertConfig, Converted, Exported
        from edgeport.convert.passes.board_gate_pass import BoardGatePass
        from edgeport.convert.passes.parity_pass import subject_of
        from edgeport.convert.pipeline import VALIDATE, run_pipeline
        from edgeport.validate.parity.run import run_parity
        from edgeport.validate.report.assemble import build_report
        from edgeport.validate.report.render import write_reports

    if not Path(tflite).is_file():
        raise BadInputError(f"--tflite {str(tflite)!r} does not exist; pass a .tflite file")
    if data is not None and not Path(data).is_dir():
        raise BadInputError(f"--data {str(data)!r} is not a folder; pass a dataset folder or a folder of images")
    given = (Path(checkpoint), Path(tflite), Path(data) if data is not None else None)
    with staged_output(out, command="validate", force=force, default_root=DEFAULT_RUNS, inputs=given) as stage:
        size, variant, summary = _tflite_input(Path(tflite))
        if imgsz is not None and imgsz != size:
            raise BadInputError(f"--imgsz {imgsz} but the TFLite model takes {size}x{size}; drop --imgsz or pass {size}")
        config = ConvertConfig(checkpoint=Path(checkpoint), work_dir=stage.work, board=board, arch=arch, imgsz=size,
                               imgsz_from="--imgsz" if imgsz is not None else "the TFLite file's input",
                               trust_checkpoint=trust_checkpoint, head=head, outputs=outputs)
        progress = Progress(console)
        try:
            prepared, records = run_pipeline(config, VALIDATE, on_start=progress.start, on_stage=progress.done)
        finally:
            progress.close()
        _check_outputs(Path(tflite), summary, prepared.reference, prepared.val)
        inputs, source, truth, letterboxes = prepared.val, prepared.val_source, None, None
        if data is not None:
            num_classes = (prepared.model.arch_config or {}).get("num_classes", 1)
            inputs, source, truth, letterboxes = _dataset_inputs(Path(data), size, num_classes, MAX_IMAGES)
        # the pipeline's tail on the file given: the same board gate (once: the report's and the emulator's
        # verdict) and the same parity subject as convert's, with no folded or ONNX row and the images asked for
        given_file = Converted(Exported(prepared, None), {variant: Path(tflite)})
        gated = BoardGatePass().run(given_file, config).value
        subject = replace(subject_of(gated, config), folded_module=None, inputs=inputs, inputs_source=source,
                          ground_truth=truth, letterboxes=letterboxes)
        report = build_report(
            run_parity(subject), model=dict(prepared.describe(), tflite=str(tflite)), board=gated.board,
            artifacts={f"model_{variant}.tflite": {"bytes": Path(tflite).stat().st_size, "path": str(tflite)}},
            stages=[r.to_dict() for r in records],
        )
        write_reports(report.to_dict(), stage.result, sample_image=inputs[0])
    return stage.out, report
