"""The pass infrastructure: a frozen config, an immutable state, and passes with checks.

A pass takes the state and returns a ``PassResult`` holding the new state and whether it
changed anything. ``check(before, after)`` runs right after it and raises ``PassCheckError``
when the pass did not do what it promises (for example, a SyncBatchNorm is left over).
Passes never mutate the state they are given: model passes work on a copy.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np


@dataclass(frozen=True)
class ConvertConfig:
    """Everything the user asked for, resolved once by the CLI."""

    checkpoint: Path
    work_dir: Path
    arch: str | None = None
    imgsz: int | None = None
    calib_dir: Path | None = None
    trust_checkpoint: bool = False
    opset: int = 17
    # how many calibration images to use at most, and how many to validate on
    max_calib: int = 32
    max_validate: int = 8
    seed: int = 0
    int8: bool = True
    onnx2tf_timeout_s: float = 1800.0
    # the target board (validate/boards/*.toml); None means the default profile
    board: Any = None
    # reproduce older converters' resize (inexact, for showing the bug)
    legacy_resize: bool = False
    # the detector head whose boxes are compared (models.heads); auto: from the output shapes
    head: str = "auto"
    # which tensors of a non-tensor forward result are the outputs (models/outputs.py)
    outputs: str | None = None

    def __post_init__(self) -> None:
        if self.board is None:
            from edgeport.validate.boards import DEFAULT_BOARD, load_board

            object.__setattr__(self, "board", load_board(DEFAULT_BOARD))

    @property
    def variants(self) -> tuple[str, ...]:
        """The TFLite variants to produce: those the board runs (int8 only when asked)."""
        wanted = ("float32", "int8") if self.int8 else ("float32",)
        return tuple(v for v in wanted if self.board.runs_dtype(v))


@dataclass(frozen=True)
class State:
    """What the pipeline knows so far. Each pass returns a new one (``dataclasses.replace``)."""

    config: ConvertConfig
    # load_checkpoint: how the weights were found in the file, and the weights
    layout: str = ""
    state_dict: dict | None = None
    module: Any = None  # an nn.Module (pickled module, or built from the registry)
    arch: str | None = None
    arch_config: dict | None = None
    # the model exactly as loaded, before SyncBN revert and BN fold: the parity reference
    reference_module: Any = None
    imgsz: int | None = None
    stride: int | None = None
    output_names: tuple[str, ...] = ()
    strides: tuple[int, ...] = ()
    calib: np.ndarray | None = None  # (N, 3, S, S) float32 in [0, 1]
    calib_source: str = ""
    val_inputs: np.ndarray | None = None  # (M, 3, S, S): what parity is measured on
    val_source: str = ""
    onnx_path: Path | None = None
    tflite: dict[str, Path] = field(default_factory=dict)  # variant -> file
    converter: str = ""  # which onnx2tf wrote them, and how (to_tflite)
    not_converted: dict[str, str] = field(default_factory=dict)  # variant -> why the converter wrote no file
    converter_notes: dict[str, str] = field(default_factory=dict)  # variant -> how it was made, when not as asked first
    # per output, the channel ranges the int8 model has divided (convert/int8_groups.py); None: none
    int8_plans: Any = None
    upsample_decisions: tuple[dict, ...] = ()
    board_checks: dict[str, dict] = field(default_factory=dict)  # variant -> {runnable, reasons, ...}
    report: dict | None = None

    def evolve(self, **changes: Any) -> "State":
        return replace(self, **changes)


@dataclass(frozen=True)
class PassResult:
    state: State
    changed: bool
    summary: str = ""


class Pass(abc.ABC):
    """One named conversion step. Subclasses set ``name`` and implement ``run`` and ``check``."""

    name: ClassVar[str]
    #: heavy modules ``run`` imports: the pipeline loads them ahead while a pass waits on a child process
    imports: ClassVar[tuple[str, ...]] = ()

    @abc.abstractmethod
    def run(self, state: State) -> PassResult: ...

    @abc.abstractmethod
    def check(self, before: State, after: State) -> None:
        """Raise ``PassCheckError`` when ``after`` breaks the pass's promise (every pass has one)."""

    def __repr__(self) -> str:
        return f"<pass {self.name}>"
