"""The conversion pipeline: one literal list of passes, each followed by its check.

The passes come in phases, each ending in a typed record (``convert/base.py``); ``validate``
runs the first two phases and judges a file it was given instead of one it converted. An error
names the pass it happened in and the passes that ran before it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from edgeport.convert.base import ConvertConfig, Pass
from edgeport.convert.passes.board_gate_pass import BoardGatePass
from edgeport.convert.passes.build_model_pass import BuildModelPass
from edgeport.convert.passes.cross_check_pass import CrossCheckPass
from edgeport.convert.passes.export_onnx_pass import ExportOnnxPass
from edgeport.convert.passes.fold_bn_pass import FoldBNPass
from edgeport.convert.passes.int8_fixes_pass import Int8FixesPass
from edgeport.convert.passes.load_checkpoint_pass import LoadCheckpointPass
from edgeport.convert.passes.lower_for_board_pass import LowerForBoardPass
from edgeport.convert.passes.parity_pass import ParityPass
from edgeport.convert.passes.prepare_inputs_pass import PrepareInputsPass
from edgeport.convert.passes.repair_pass import RepairPass
from edgeport.convert.passes.revert_syncbn_pass import RevertSyncBNPass
from edgeport.convert.passes.rewrite_upsample_pass import RewriteUpsamplePass
from edgeport.convert.passes.to_tflite_pass import ToTFLitePass
from edgeport.convert.passes.uint8_pass import Uint8Pass
from edgeport.convert.passes.unwrap_prefixes_pass import UnwrapPrefixesPass
from edgeport.errors import BadInputError, EdgeportError, PassCheckError, is_environment_error

# ConvertConfig -> Checkpoint -> Model
LOAD = (LoadCheckpointPass(), UnwrapPrefixesPass(), BuildModelPass())
# Model -> Prepared
PREPARE = (PrepareInputsPass(),)
# Prepared -> Prepared: what the board computes, exactly
REWRITE = (RevertSyncBNPass(), FoldBNPass(), RewriteUpsamplePass())
# Prepared -> Exported -> Converted -> Gated -> Validated
EXPORT = (ExportOnnxPass(),)
CONVERT = (ToTFLitePass(), Int8FixesPass(), Uint8Pass(), CrossCheckPass(), LowerForBoardPass())
GATE = (BoardGatePass(),)
PARITY = (ParityPass(), RepairPass())

PIPELINE: tuple[Pass, ...] = (*LOAD, *PREPARE, *REWRITE, *EXPORT, *CONVERT, *GATE, *PARITY)
# what `edgeport validate` runs before judging the file it was given
VALIDATE: tuple[Pass, ...] = (*LOAD, *PREPARE)


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
) -> tuple[Any, list[StageRecord]]:
    """Run ``passes`` in order, the first on ``config``, each on the value the one before returned;
    returns the last value and a record per pass. The run's background work (``config.context``:
    children, threads, parity's early runs) ends with it, however it ends."""
    with config.context:
        return _run(config, passes, on_stage=on_stage, on_start=on_start)


def _run(config, passes, *, on_stage, on_start) -> tuple[Any, list[StageRecord]]:
    value: Any = config
    records: list[StageRecord] = []
    for p in passes:
        if on_start:
            on_start(p.name)
        t0 = time.perf_counter()
        try:
            result = p.run(value, config)
            p.check(value, result.value, config)
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
        value = result.value
    return value, records


def _after(records: list[StageRecord]) -> str:
    return f" (after {', '.join(r.name for r in records)})" if records else ""
