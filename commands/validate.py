"""``edgeport validate``: judge a TFLite model made by any converter against the checkpoint.

The checkpoint goes through ``convert``'s own phases (``pipeline.LOAD`` and ``PREPARE``); the TFLite
file is then judged as ``convert`` judges its own -- board gate, TFLite's optimised and reference
kernels, board emulator and runtime -- on real images (a dataset's labels give mAP against ground
truth) plus seeded random inputs: same report, gate and exit codes as ``convert``.
"""

from __future__ import annotations

from pathlib import Path

from edgeport._lazy import importing
from edgeport.commands.output import Progress
from edgeport.errors import BadInputError
from edgeport.folders import staged_output

DEFAULT_RUNS = Path("runs/validate")


def validate(checkpoint: Path, tflite: Path, *, out: Path | None, force: bool, arch: str | None, imgsz: int | None,
             board, data: Path | None, trust_checkpoint: bool, console=None, head: str = "auto", outputs: str | None = None,
             images: int | None = None, rows: str = "all"):
    """Judge ``tflite`` against ``checkpoint``; returns (output folder, ``report.schema.Report``).
    ``images``, ``rows``: as ``--images`` and ``--rows`` say (``cli.py``; None: every image)."""
    with importing():  # torch, and the modules of every phase
        from edgeport.convert.base import ConvertConfig, run_pipeline
        from edgeport.convert.passes.given_file_pass import read_given
        from edgeport.convert.pipeline import VALIDATE
        from edgeport.validate.gate.check import check_written
        from edgeport.validate.report.assemble import build_report
        from edgeport.validate.report.render import write_reports
        from edgeport.validate.report.schema import file_name
        from edgeport.validate.report.sections import Dataset

    if not Path(tflite).is_file():
        raise BadInputError(f"--tflite {str(tflite)!r} does not exist; pass a .tflite file")
    if images is not None and data is None:
        raise BadInputError(f"--images {images} takes the first images of --data; pass --data DIR, or drop --images")
    if data is not None and not Path(data).is_dir():
        raise BadInputError(f"--data {str(data)!r} is not a folder; pass a dataset folder or a folder of images")
    given = (Path(checkpoint), Path(tflite), Path(data) if data is not None else None)
    progress = Progress(console)
    with staged_output(out, command="validate", force=force, default_root=DEFAULT_RUNS, inputs=given) as stage:
        size, _, _ = read_given(Path(tflite))
        if imgsz is not None and imgsz != size:
            raise BadInputError(f"--imgsz {imgsz} but the TFLite model takes {size}x{size}; drop --imgsz or pass {size}")
        config = ConvertConfig(checkpoint=Path(checkpoint), work_dir=stage.work, board=board, arch=arch, imgsz=size,
                               imgsz_from="--imgsz" if imgsz is not None else "the TFLite file's input",
                               trust_checkpoint=trust_checkpoint, head=head, outputs=outputs, given=Path(tflite),
                               data=Path(data) if data is not None else None, images=images,
                               rows=rows, on_progress=progress.advance)
        try:
            validated, records = run_pipeline(config, VALIDATE, on_start=progress.start, on_stage=progress.done)
        finally:
            progress.close()
        made = validated.gated.tflite
        (variant,) = made.files
        report = build_report(
            validated.parity, model=dict(made.prepared.describe(), tflite=str(tflite)), board=validated.gated.board,
            artifacts={file_name(variant): {"bytes": Path(tflite).stat().st_size, "path": str(tflite)}},
            stages=[r.to_dict() for r in records],
            dataset=Dataset.of(validated.dataset, f"{data}/images/val") if validated.dataset is not None else None,
        )
        check_written(report)  # before a file is written: a report the gate would refuse is edgeport's bug
        write_reports(report, stage.result, sample_image=made.inputs[report.sample.image] if report.sample else None)
    return stage.out, report
