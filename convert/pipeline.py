"""The conversion pipeline: one literal list of passes, each followed by its check.

An error names the pass it happened in and the passes that ran before it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

from edgeport._lazy import preloading
from edgeport.convert.base import ConvertConfig, Pass, State
from edgeport.convert.board_gate_pass import BoardGatePass
from edgeport.convert.build_model_pass import BuildModelPass
from edgeport.convert.export_onnx_pass import ExportOnnxPass
from edgeport.convert.fold_bn_pass import FoldBNPass
from edgeport.convert.load_checkpoint_pass import LoadCheckpointPass
from edgeport.convert.parity_pass import ParityPass
from edgeport.convert.prepare_inputs_pass import PrepareInputsPass
from edgeport.convert.revert_syncbn_pass import RevertSyncBNPass
from edgeport.convert.rewrite_upsample_pass import RewriteUpsamplePass
from edgeport.convert.to_tflite_pass import ToTFLitePass
from edgeport.convert.unwrap_prefixes_pass import UnwrapPrefixesPass
from edgeport.errors import BadInputError, EdgeportError, PassCheckError, is_environment_error

PIPELINE: tuple[Pass, ...] = (
    LoadCheckpointPass(),
    UnwrapPrefixesPass(),
    BuildModelPass(),
    PrepareInputsPass(),
    RevertSyncBNPass(),
    FoldBNPass(),
    RewriteUpsamplePass(),
    ExportOnnxPass(),
    ToTFLitePass(),
    BoardGatePass(),
    ParityPass(),
)


@dataclass(frozen=True)
class StageRecord:
    name: str
    seconds: float
    changed: bool
    summary: str

    def to_dict(self) -> dict:
        return {"name": self.name, "seconds": self.seconds, "changed": self.changed, "summary": self.summary}


def run_pipeline(
    config: ConvertConfig,
    passes: Sequence[Pass] = PIPELINE,
    *,
    on_stage: Callable[[StageRecord], None] | None = None,
    on_start: Callable[[str], None] | None = None,
    then_imports: Sequence[str] = (),
) -> tuple[State, list[StageRecord]]:
    """Run ``passes`` in order. While a pass waits on its child process (``_lazy.idle``), the
    modules that passes (and, after the pipeline, the caller: ``then_imports``) import are loaded."""
    with preloading([m for p in passes for m in p.imports] + list(then_imports)):
        state = State(config=config)
        records: list[StageRecord] = []
        for p in passes:
            if on_start:
                on_start(p.name)
            t0 = time.perf_counter()
            try:
                result = p.run(state)
                p.check(state, result.state)
            except BadInputError:
                raise  # the user's input: its message already says what to do
            except OSError as exc:
                if is_environment_error(exc):
                    raise  # permissions, a full disk: the CLI names the file (exit 2)
                raise PassCheckError(f"{p.name} failed: {type(exc).__name__}: {exc}{_after(records)}") from exc
            except EdgeportError as exc:
                raise type(exc)(f"{p.name}: {exc}{_after(records)}") from exc
            except Exception as exc:  # a bug or an unsupported model: keep the pass context
                raise PassCheckError(f"{p.name} failed: {type(exc).__name__}: {exc}{_after(records)}") from exc
            record = StageRecord(p.name, time.perf_counter() - t0, result.changed, result.summary)
            records.append(record)
            if on_stage:
                on_stage(record)
            state = result.state
        return state, records


def _after(records: list[StageRecord]) -> str:
    return f" (after {', '.join(r.name for r in records)})" if records else ""
