"""The ``convert`` command: run the pipeline in a temporary folder, then move results into place.

Everything is written into a hidden staging folder next to ``--out`` and renamed into
place at the end (``runs.staged_output``), so a run that fails leaves nothing behind. A
run whose parity gate fails still delivers its artifacts and report (exit 1).
"""

from __future__ import annotations

import os
from pathlib import Path

from edgeport._lazy import importing
from edgeport.convert.base import ConvertConfig
from edgeport.runs import Progress, staged_output

ARTIFACTS = ("model.onnx", "model_float32.tflite", "model_int8.tflite")
DEFAULT_RUNS = Path("runs/convert")


def convert(
    checkpoint: Path,
    *,
    out: Path | None = None,
    force: bool = False,
    console=None,
    **options,
) -> tuple[Path, dict]:
    """Convert ``checkpoint``; return (output folder, report). ``runs.gate`` turns a failed report into exit 1.

    The onnx2tf child starts first (``warm_converter``): it imports onnx2tf, and on 1.28
    TensorFlow, on another core while this process imports torch and runs the passes before
    the conversion."""
    from edgeport.convert.to_tflite_pass import warm_converter

    inputs = (Path(checkpoint), options.get("calib_dir"))
    with staged_output(out, command="convert", force=force, default_root=DEFAULT_RUNS, inputs=inputs) as stage, \
            warm_converter():
        with importing():  # torch, and the modules of every pass
            from edgeport.convert.pipeline import run_pipeline
            from edgeport.validate import figures
            from edgeport.validate.render import write_reports
        config = ConvertConfig(checkpoint=Path(checkpoint), work_dir=stage.work, **options)
        progress = Progress(console)
        try:
            state, records = run_pipeline(config, on_start=progress.start, on_stage=progress.done, then_imports=figures.IMPORTS)
        finally:
            progress.close()
        for name in ARTIFACTS:
            if (stage.work / name).is_file():
                os.replace(stage.work / name, stage.result / name)
        report = dict(state.report)
        report["stages"] = [r.to_dict() for r in records]
        write_reports(report, stage.result, sample_image=state.val_inputs[0])
    return stage.out, report
