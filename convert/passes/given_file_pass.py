"""Pass (validate): the TFLite file the user gave, for the model the checkpoint built, with the
images it is judged on: the checkpoint's held-out images, or a dataset's (with its labels: mAP
against ground truth) or a folder of images given with ``--data``.

A file whose outputs are not the model's (another model, another size) is bad input named here,
not a failure deep in a parity run.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeport.convert.base import ConvertConfig, Given, Pass, PassResult, Prepared
from edgeport.convert.calibration import val_judged
from edgeport.errors import BadInputError, PassCheckError

PARITY_IMAGES = 32  # a dataset's first images, on which parity's rows are judged (mAP: on every image)


def read_given(path: Path):
    """(input size, variant, summary) of the file at ``path``, read from the flatbuffer (the bounded
    reader) without loading an interpreter. A file no runtime can run (an empty operator list, a
    buffer index past the end, ...) is bad input, said here rather than by an interpreter deep in a run."""
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


def _dataset(data: Path, imgsz: int, num_classes: int, images: int | None, parity_images: int):
    """(the first ``parity_images`` images as inputs, their source in words, their samples (labels and
    sizes) or None for a folder of plain images, their letterboxes, every labelled sample scored for mAP):
    from a dataset's val split or a plain image folder, the first ``images`` of it (None: all)."""
    from edgeport.models.preprocess import list_images
    from edgeport.validate.dataset_score import load_chunk
    from edgeport.validate.datasets import Sample, load_split

    if (data / "images" / "val").is_dir():
        every = load_split(data, "val", num_classes, images)
        labelled = True
        source = f"labelled images from {data}/images/val"
    else:
        files = list_images(data)[:images]
        if not files:
            raise BadInputError(f"--data {str(data)!r} holds no images; pass a dataset folder or a folder of images")
        every = [Sample(f, np.zeros((0, 4), np.float32), np.zeros(0, np.int64), 0, 0) for f in files]
        labelled = False
        source = f"images from {data}"
    judged = every[:parity_images]
    inputs, boxes = load_chunk(judged, imgsz)
    of = f" of {len(every)}" if len(every) > len(judged) else ""
    return inputs, f"{len(judged)}{of} {source}", (judged if labelled else None), boxes, (tuple(every) if labelled else ())


class GivenFilePass(Pass[Prepared, Given]):
    name = "given_file"

    def run(self, value: Prepared, config: ConvertConfig) -> PassResult[Given]:
        from edgeport.validate.parity.tensors import match_outputs

        path = config.given
        _, variant, summary = read_given(path)
        try:
            match_outputs(list(value.output_shapes), list(summary.output_shapes))
        except ValueError as exc:  # no output of one of the shapes (AmbiguousOutputs is bad input already)
            raise BadInputError(f"--tflite {str(path)!r} has outputs {[list(s) for s in summary.output_shapes]}, and the "
                                f"checkpoint's model outputs {[list(s) for s in value.output_shapes]} (NCHW; NHWC accepted): "
                                f"they are not the same model; pass the .tflite converted from this checkpoint (and --arch, "
                                f"if not its own)") from exc
        if config.data is None:
            given = Given(value, {variant: Path(path)}, value.val, value.val_source)
        else:
            num_classes = (value.model.arch_config or {}).get("num_classes", 1)
            # --rows file, yolo val's work: parity a check on as many images as convert judges --val on
            judged = PARITY_IMAGES if config.rows == "all" else val_judged(value.imgsz, config.max_validate)
            inputs, source, truth, letterboxes, scored = _dataset(Path(config.data), value.imgsz, num_classes, config.images, judged)
            given = Given(value, {variant: Path(path)}, inputs, source, truth, letterboxes, scored)
        return PassResult(given, changed=False, summary=f"{variant} {Path(path).name}; inputs: {given.inputs_source}")

    def check(self, before: Prepared, after: Given, config: ConvertConfig) -> None:
        if len(after.files) != 1 or after.inputs.shape[1:] != (3, before.imgsz, before.imgsz):
            raise PassCheckError(f"the given file's inputs have shape {after.inputs.shape}, expected (N, 3, {before.imgsz}, "
                                 f"{before.imgsz})")
