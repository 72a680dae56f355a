"""The pass infrastructure: a frozen config, typed phase records, and passes with checks.

Each pass reads one typed value and returns the next in a ``PassResult``; ``check(before, after,
config)`` runs right after it and raises ``PassCheckError`` when the pass broke its promise. Nothing
is shared between passes but these values, so a reader follows one value from the command line to
the report by reading signatures:

    ConvertConfig -> Checkpoint -> Model -> Prepared -> Exported -> Converted -> Gated -> Validated

``validate`` judges a file it was given in place of one it converted: ``Prepared -> Given -> Gated``.

Passes never mutate their input: a model pass works on a copy, a record is replaced (``dataclasses.replace``).
"""

from __future__ import annotations

import abc
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Generic, Sequence, TypeVar

import numpy as np

from edgeport.convert.context import RunContext
from edgeport.errors import BadInputError, EdgeportError, PassCheckError, is_environment_error

if TYPE_CHECKING:
    from torch import nn

    from edgeport.convert.converters.int8_groups import Plans
    from edgeport.models.heads import Head
    from edgeport.validate.board.profiles import BoardProfile
    from edgeport.validate.dataset_score import DatasetScore
    from edgeport.validate.parity.early import EarlyRuns
    from edgeport.validate.parity.run import ParityResult
    from edgeport.validate.report.sections import Board, Repair

In = TypeVar("In")
Out = TypeVar("Out")


@dataclass(frozen=True)
class ConvertConfig:
    """Everything the user asked for, resolved once by the command."""

    checkpoint: Path
    work_dir: Path
    board: BoardProfile
    arch: str | None = None
    imgsz: int | None = None
    imgsz_from: str = "--imgsz"  # where ``imgsz`` came from, for the progress line (validate: the file's input)
    calib_dir: Path | None = None
    # images the files are judged on, apart from the calibration images (None: held out of --calib, convert/calibration.py)
    val_dir: Path | None = None
    trust_checkpoint: bool = False
    opset: int = 17
    # how many calibration images to use at most, and how many to validate on
    max_calib: int = 32
    max_validate: int = 8
    seed: int = 0
    int8: bool = True
    converter_timeout_s: float = 1800.0  # a conversion that takes longer is stopped: ConversionError
    # reproduce older converters' resize (inexact, for showing the bug)
    legacy_resize: bool = False
    # the detector head whose boxes are compared (models.heads); auto: from the output shapes
    head: str = "auto"
    # which tensors of a non-tensor forward result are the outputs (models/outputs.py)
    outputs: str | None = None
    # which converter writes the TFLite files: onnx2tf or litert-torch (convert/converters/base.py)
    converter: str = "onnx2tf"
    # also convert float32 with the other converter and compare the two files (convert/passes/cross_check_pass.py)
    cross_check: bool = False
    # a quantised file that fails its gate gets a repaired file (convert/passes/repair_pass.py); False: the pure files only
    repair: bool = True
    # to_tflite starts parity's runs while the converter works (validate/parity/early.py); False where
    # nothing will take them (the repair's conversions of a changed model)
    early_parity: bool = True
    # which of parity's rows the run judges: "all" (the folded model's and the ONNX graph's too, with the
    # divergence analysis of a failing row), "files" (the files' rows alone: a repair's candidate, whose
    # pure file's diagnostics stand), "kernels" (the files on TFLite's kernels alone: a repair's quick search),
    # "file" (validate: the file on TFLite's optimised kernels alone, the work ``yolo val`` does)
    rows: str = "all"
    # validate: the TFLite file to judge, and the dataset or image folder to judge it on (None: held-out images)
    given: Path | None = None
    data: Path | None = None
    images: int | None = None  # validate: the first images of --data it measures (None: every one)
    # validate --data: told (images done, images in all) as the dataset is scored (commands/output.Progress)
    on_progress: Callable[[int, int], None] | None = field(default=None, compare=False, repr=False)
    # what the run starts in the background (children, threads, early runs), ended with it (convert/context.py)
    context: RunContext = field(default_factory=RunContext, compare=False, repr=False)

    @property
    def variants(self) -> tuple[str, ...]:
        """The TFLite variants the board runs: float32, and unless ``--no-int8`` its quantised type (int8, or uint8 on TFLite 1.x)."""
        quantised = self.board.quantised if self.int8 else None
        return tuple(v for v in ("float32", quantised) if v and self.board.runs_dtype(v))

    @property
    def quantised(self) -> str | None:
        """The quantised variant the converter writes (int8, or uint8: its int8 twin per tensor), or None."""
        return next((v for v in self.variants if v != "float32"), None)


@dataclass(frozen=True)
class Checkpoint:
    """load_checkpoint, unwrap: the weights found in the file, and what the file says of them."""

    path: Path
    layout: str  # how the weights were found: state_dict, dict['model'], edgeport trainer checkpoint, pickled module
    state_dict: dict | None
    module: nn.Module | None  # a pickled module (with --trust-checkpoint); None for a state_dict
    arch: str | None  # the architecture the file names, if any
    arch_config: dict | None
    imgsz: int | None = None  # the input size the file says the model was trained at


@dataclass(frozen=True)
class Model:
    """build: the architecture with the checkpoint's weights, and a copy kept as loaded."""

    checkpoint: Checkpoint
    module: nn.Module  # eval mode
    reference: nn.Module  # the model exactly as loaded: the parity reference
    arch: str
    arch_config: dict | None
    stride: int
    strides: tuple[int, ...]


@dataclass(frozen=True)
class Prepared:
    """prepare_inputs, then the rewrites of ``module``, pass by pass (SyncBN reverted, BN folded, upsamples made board-exact)."""

    model: Model
    module: nn.Module
    reference: nn.Module
    imgsz: int
    calib: np.ndarray  # (N, 3, S, S) float32 in [0, 1]
    calib_source: str
    val: np.ndarray  # (M, 3, S, S): what parity is measured on
    val_source: str
    output_names: tuple[str, ...]
    strides: tuple[int, ...]
    head: Head  # the output format, resolved from the shapes and what the model says of itself
    output_shapes: tuple[tuple[int, ...], ...]  # each output's for one image (``models.outputs.output_shapes``)
    upsample: tuple[dict, ...] = ()  # rewrite_upsample's decision per site
    held_out: bool = True  # ``val`` holds no calibration image (convert/calibration.py)

    def describe(self) -> dict:
        """The report's ``model``, with the weights' hash (which model a report is about)."""
        from edgeport.checkpoints import weights_digest

        ckpt = self.model.checkpoint
        return {"checkpoint": str(ckpt.path), "layout": ckpt.layout, "arch": self.model.arch, "config": self.model.arch_config,
                "imgsz": self.imgsz, "weights_sha256": weights_digest(self.reference), "outputs": list(self.output_names),
                "strides": list(self.strides)}


@dataclass(frozen=True)
class Exported:
    """export_onnx: the checked, simplified ONNX graph."""

    prepared: Prepared
    onnx: Path
    input_name: str = "images"  # the graph's one input
    begun: object = None  # what the converter began before the export (``Converter.begin``: its own type), or None


@dataclass(frozen=True)
class Converted:
    """to_tflite: the TFLite files the board runs, and what the converter said."""

    exported: Exported
    files: dict[str, Path]  # variant -> file
    not_written: dict[str, str] = field(default_factory=dict)  # variant -> why the converter wrote no file
    notes: dict[str, str] = field(default_factory=dict)  # variant -> how it was made, when not as asked first
    converter: dict = field(default_factory=dict)  # {name, version, writer}
    int8_plans: Plans | None = None  # per output, the channel ranges the int8 file divides (convert/converters/int8_groups.py)
    # variant -> the int8 file it was rewritten from (uint8: convert/uint8.py), for the twin check
    twins: dict[str, Path] = field(default_factory=dict)
    # variant -> what lower_for_board rewrote (ops/lowering/registry.Lowering.describe), where it did
    lowered: dict[str, str] = field(default_factory=dict)
    lowered_rules: dict[str, dict] = field(default_factory=dict)  # variant -> {rule: ops rewritten}, where any
    # the other converter's float32 file against this one's (--cross-check), or None
    cross_check: dict | None = None
    # parity's runs started while the converter worked (validate/parity/early.py), or None
    early: EarlyRuns | None = None

    @property
    def prepared(self) -> Prepared:
        return self.exported.prepared


@dataclass(frozen=True)
class Given:
    """validate: a TFLite file any converter wrote, for the model ``prepared`` built, and the images
    it is judged on (with their labels and letterboxes where they come from a dataset)."""

    prepared: Prepared
    files: dict[str, Path]  # its variant (read from its input type) -> the file
    inputs: np.ndarray  # (N, 3, S, S): what parity is measured on
    inputs_source: str
    ground_truth: list | None = None  # train.data.Sample per image, for mAP
    letterboxes: list | None = None  # models.preprocess.Letterbox per image
    scored: tuple = ()  # every labelled sample (validate.datasets.Sample) mAP is measured on, streamed

    @property
    def not_written(self) -> dict[str, str]:
        return {}


@dataclass(frozen=True)
class Gated:
    """board_gate: the board's verdict on every file (the report's ``Board``), converted or given."""

    tflite: Converted | Given
    board: Board


@dataclass(frozen=True)
class Validated:
    """parity: every runtime against PyTorch as loaded (``parity.run.ParityResult``)."""

    gated: Gated
    parity: ParityResult
    # repair: per quantised variant that failed, what was tried and what the repaired file does (convert/passes/repair_pass.py)
    repairs: dict[str, Repair] = field(default_factory=dict)
    # validate --data: mAP on every labelled image (validate/dataset_score.py)
    dataset: DatasetScore | None = None


@dataclass(frozen=True)
class PassResult(Generic[Out]):
    value: Out
    changed: bool
    summary: str = ""


class Pass(abc.ABC, Generic[In, Out]):
    """One named conversion step."""

    name: ClassVar[str]

    @abc.abstractmethod
    def run(self, value: In, config: ConvertConfig) -> PassResult[Out]: ...

    @abc.abstractmethod
    def check(self, before: In, after: Out, config: ConvertConfig) -> None:
        """Raise ``PassCheckError`` when ``after`` breaks the pass's promise (every pass has one)."""

    def __repr__(self) -> str:
        return f"<pass {self.name}>"


# -- running passes: the pipeline's (``convert/pipeline.py``), or a part of it (a repair's) ----------


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
    passes: Sequence[Pass],
    *,
    start: Any = None,
    on_stage: Callable[[StageRecord], None] | None = None,
    on_start: Callable[[str], None] | None = None,
) -> tuple[Any, list[StageRecord]]:
    """Run ``passes`` in order, the first on ``start`` (default ``config``: the whole pipeline), each on
    its predecessor's value; returns the last value and a record per pass. ``config.context`` ends with the run, however it ends."""
    value, records = config if start is None else start, []
    with config.context:
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
            except EdgeportError as exc:  # a broken promise is edgeport's bug, placed; a converter's failure names its own step
                raise type(exc)(f"{p.name}: {exc}{_after(records) if isinstance(exc, PassCheckError) else ''}") from exc
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
