"""The ``convert`` command: run the pipeline in a temporary folder, then move results into place.

Everything is written into a hidden temporary folder next to ``--out`` and renamed into
place at the end, so a run that fails with bad input leaves nothing behind. A run whose
parity gate fails still delivers its artifacts and report (exit 1).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from edgeport.convert.base import ConvertConfig
from edgeport.errors import BadInputError, ParityGateError

ARTIFACTS = ("model.onnx", "model_float32.tflite", "model_int8.tflite")
DEFAULT_RUNS = Path("runs/convert")


def next_run_dir(root: Path = DEFAULT_RUNS) -> Path:
    existing = [int(p.name) for p in root.glob("*") if p.name.isdigit()] if root.is_dir() else []
    return root / str(max(existing, default=0) + 1)


def check_out_dir(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise BadInputError(f"--out {str(out)!r} is a file; pass a folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise BadInputError(f"--out {str(out)!r} is not empty; pass --force to replace it, or choose another folder")


def _make_parents(path: Path) -> list[Path]:
    """mkdir -p, returning the folders it created (to remove them again on failure)."""
    created = []
    for parent in reversed(path.parents):
        if not parent.exists():
            parent.mkdir()
            created.append(parent)
    return created


@dataclass(frozen=True)
class Staging:
    out: Path  # where the results land at the end
    work: Path  # scratch space, removed at the end
    result: Path  # what will become ``out``


@contextlib.contextmanager
def staged_output(out: Path | None, force: bool, default_root: Path = DEFAULT_RUNS):
    """Write into a hidden folder next to ``out``; rename it into place only on success.

    On any failure everything created is removed again, parent folders included.
    """
    out = Path(out) if out is not None else next_run_dir(default_root)
    check_out_dir(out, force)
    created = _make_parents(out)
    tmp = Path(tempfile.mkdtemp(prefix=".edgeport-", dir=out.parent)).resolve()
    stage = Staging(out=out, work=tmp / "work", result=tmp / "result")
    stage.work.mkdir()
    stage.result.mkdir()
    try:
        yield stage
        if out.exists():
            shutil.rmtree(out)
        os.replace(stage.result, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        for folder in reversed(created):
            if folder.exists() and not any(folder.iterdir()):
                folder.rmdir()
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def convert(
    checkpoint: Path,
    *,
    out: Path | None = None,
    force: bool = False,
    console=None,
    **options,
) -> tuple[Path, dict]:
    """Convert ``checkpoint``; return (output folder, report). ``gate`` turns a failed report into exit 1."""
    from edgeport.convert.pipeline import run_pipeline
    from edgeport.validate.render import write_reports

    with staged_output(out, force) as stage:
        config = ConvertConfig(checkpoint=Path(checkpoint), work_dir=stage.work, **options)
        progress = _Progress(console)
        try:
            state, records = run_pipeline(config, on_start=progress.start, on_stage=progress.done)
        finally:
            progress.close()
        for name in ARTIFACTS:
            if (stage.work / name).is_file():
                os.replace(stage.work / name, stage.result / name)
        report = dict(state.report)
        report["stages"] = [r.to_dict() for r in records]
        write_reports(report, stage.result, sample_image=state.val_inputs[0])
    return stage.out, report


def gate(out: Path, report: dict) -> None:
    """Raise ParityGateError (exit 1) when the report did not pass."""
    if not report["passed"]:
        failed = [f"{r['variant']}/{r['runtime']}" for r in report["results"] if not r["passed"]]
        board = report.get("board") or {}
        for variant, check in (board.get("checks") or {}).items():
            if not check["runnable"]:
                failed.append(f"{variant} not runnable on {board['name']}: {'; '.join(check['reasons'])}")
        raise ParityGateError(f"gate failed: {', '.join(failed)}; artifacts and report are in {out}/")


class _Progress:
    """One line per stage, with its time, on stderr."""

    def __init__(self, console):
        self.console = console
        self.status = None

    def start(self, name: str) -> None:
        if self.console is not None:
            self.status = self.console.status(f"{name} ...")
            self.status.start()

    def close(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None

    def done(self, record) -> None:
        if self.console is None:
            return
        self.close()
        self.console.print(f"[green]ok[/] {record.name:<16} {record.seconds:7.2f} s  {record.summary}", highlight=False)
