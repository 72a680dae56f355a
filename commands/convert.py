"""``edgeport convert``: run the pipeline in a staging folder, then move the results into place.

A run that fails leaves nothing behind (``folders.staged_output``); one whose parity gate fails
still delivers its artifacts and report (exit 1, from ``report.schema.gate``).
"""

from __future__ import annotations

import os
from pathlib import Path

from edgeport._lazy import importing
from edgeport.commands.output import Progress
from edgeport.convert.context import RunContext
from edgeport.folders import OUTPUTS, staged_output

ARTIFACTS = tuple(n for n in OUTPUTS["convert"] if n.startswith("model"))  # what the pipeline's files may ship as
DEFAULT_RUNS = Path("runs/convert")


def convert(checkpoint: Path, *, board, out: Path | None = None, force: bool = False, console=None, **options):
    """Convert ``checkpoint`` for ``board``; returns (output folder, ``report.schema.Report``). The
    converter's process starts first (``Converter.warm``), importing it (onnx2tf, and on 1.28 TensorFlow)
    on another core while this process imports torch and runs the passes before the conversion."""
    from edgeport.convert.converters.registry import converter, other

    inputs = (Path(checkpoint), options.get("calib_dir"), options.get("val_dir"))
    chosen = converter(options.get("converter", "onnx2tf"))
    used = [chosen, other(chosen.name)] if options.get("cross_check") else [chosen]
    if options.get("cross_check") and not board.runs_dtype("float32"):
        from edgeport.errors import BadInputError

        raise BadInputError(f"--cross-check compares the two converters' float32 files, and board {board.name} runs only "
                            f"{', '.join(board.dtypes)}; drop --cross-check, or cross-check for a board that runs float32")
    for each in used:
        each.require()  # before anything is written: the one line says how to install it
    with staged_output(out, command="convert", force=force, default_root=DEFAULT_RUNS, inputs=inputs) as stage, \
            RunContext() as context:
        for each in used:
            each.warm(context)
        with importing():  # torch, and the modules of every pass
            from edgeport.convert.base import ConvertConfig, run_pipeline
            from edgeport.convert.pipeline import PIPELINE
            from edgeport.validate.gate.check import check_written
            from edgeport.validate.report.assemble import build_report
            from edgeport.validate.report.render import write_reports
        config = ConvertConfig(checkpoint=Path(checkpoint), work_dir=stage.work, board=board, context=context, **options)
        progress = Progress(console)
        try:
            validated, records = run_pipeline(config, PIPELINE, on_start=progress.start, on_stage=progress.done)
        finally:
            progress.close()
        gated = validated.gated
        converted = gated.tflite
        prepared = converted.prepared
        artifacts = {}
        shipped = {"model.onnx": converted.exported.onnx, **{p.name: p for p in converted.files.values()}}
        for name in (n for n in ARTIFACTS if n in shipped):
            os.replace(shipped[name], stage.result / name)
            artifacts[name] = {"bytes": (stage.result / name).stat().st_size}
        report = build_report(
            validated.parity, model=dict(prepared.describe(), calibration=prepared.calib_source), board=gated.board,
            artifacts=artifacts, stages=[r.to_dict() for r in records], repairs=validated.repairs or None,
            upsample={"legacy_resize": config.legacy_resize, "sites": list(prepared.upsample)},
            # per output: [axis, first channel, end, factor] the int8 file's values are divided by
            int8_normalised=[[list(r) for r in plan] for plan in converted.int8_plans] if converted.int8_plans else None,
            converter={**converted.converter, "notes": dict(converted.notes), "lowered": dict(converted.lowered),
                       "lowered_rules": dict(converted.lowered_rules), "cross_check": converted.cross_check},
        )
        check_written(report)  # before a file is written: a report the gate would refuse is edgeport's bug
        write_reports(report, stage.result, sample_image=prepared.val[report.sample.image] if report.sample else None)
    return stage.out, report
