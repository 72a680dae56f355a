"""The report's sections, typed: each a frozen ``jsonfile.Section``, read from what a phase hands
``build_report`` or from what a file holds by one reader, and written back exactly as it was given.
(Fields documented in ``validate/report/SCHEMA.md``.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from edgeport.jsonfile import Malformed, Section, ranged
from edgeport.text import shown
from edgeport.validate.board.verdict import BoardCheck

# per output, the int8 file's channel groups scaled apart: [axis, first channel, end, factor] each
Normalised = tuple[tuple[tuple[float, ...], ...], ...]


@dataclass(frozen=True, kw_only=True)
class ModelSection(Section):
    checkpoint: str | None = None
    layout: str | None = None  # how the weights were found
    arch: str | None = None
    config: dict | None = None  # the architecture's own, as its factory takes it
    imgsz: int | None = None
    weights_sha256: str | None = None  # of the weights as loaded: which model the report is about
    outputs: tuple[str, ...] = ()
    strides: tuple[float, ...] = ()
    calibration: str | None = None  # convert
    tflite: str | None = None  # validate: the file judged
    head: str | None = None
    head_detail: str | None = None


@dataclass(frozen=True, kw_only=True)
class InputsSection(Section):
    source: str | None = None
    count: int | None = None  # real images
    random: int | None = None  # seeded random inputs added
    random_seed: int | None = None
    shape: tuple[int, ...] = ()  # C, H, W
    labelled: bool | None = None
    held_out: bool | None = None  # none of them is a calibration image (older reports: unsaid)


@dataclass(frozen=True, kw_only=True)
class BoxTolerance(Section):
    fraction: float = ranged(0.0, 1.0, finite=True)  # of PyTorch's stable boxes a row may miss, and add
    slack: int = ranged(0, math.inf)
    noise: str | None = None  # the perturbation that means nothing for the variant, in words


@dataclass(frozen=True, kw_only=True)
class Tolerance(Section):
    """A variant's tolerance (None: that metric not gated); under ``channels``, each channel's of a quantised file."""

    max_abs_rel: float | None = ranged(0.0, math.inf, finite=True, default=None)
    min_cosine: float | None = ranged(-1.0, 1.0, finite=True, default=None)
    boxes: BoxTolerance | None = None
    applies_to: str | None = None

    @property
    def limits(self) -> dict:
        """As an output states its own (``parity.result.stricter`` takes both)."""
        return {"max_abs_rel": self.max_abs_rel, "min_cosine": self.min_cosine}


@dataclass(frozen=True, kw_only=True)
class Artifact(Section):
    bytes: int | None = None
    path: str | None = None  # validate: the file given


@dataclass(frozen=True, kw_only=True)
class Board(Section):
    """The board the files are for, and the board gate's verdict on each file."""

    name: str | None = None
    runtime: str | None = None
    version: str | None = None
    dtypes: tuple[str, ...] = ()
    ram_bytes: int | None = None
    flash_bytes: int | None = None
    checks: dict[str, BoardCheck]

    @classmethod
    def of(cls, board, checks: dict[str, BoardCheck]) -> "Board":
        """From a ``validate.board.profiles.BoardProfile``."""
        return cls(name=board.name, runtime=board.runtime, version=board.version, dtypes=tuple(board.dtypes),
                   ram_bytes=board.ram_bytes, flash_bytes=board.flash_bytes, checks=dict(checks))

    @property
    def runnable(self) -> bool:
        return all(c.runnable for c in self.checks.values())

    def to_dict(self) -> dict:
        return {**super().to_dict(), "runnable": self.runnable}


@dataclass(frozen=True, kw_only=True)
class BoardRuntime(Section):
    """Whose word the board rows are, where the board's real runtime lives out of process."""

    real: bool | None = None  # its rows ran
    via: str | None = None  # the installed runtime or the SSH board
    install: str | None = None  # the command that installs it
    refused: tuple[str, ...] = ()  # variants it refused to load


@dataclass(frozen=True, kw_only=True)
class SampleBox(Section):
    box: tuple[float, ...] = ()
    score: float | None = None
    class_: int | None = None


@dataclass(frozen=True, kw_only=True)
class Sample(Section):
    """The first image's boxes: PyTorch's and one row's (preferably the board's)."""

    row: str | None = None
    image: int | None = None
    reference: tuple[SampleBox, ...] = ()
    candidate: tuple[SampleBox, ...] = ()


@dataclass(frozen=True, kw_only=True)
class UpsampleSite(Section):
    where: str | None = None
    mode: str | None = None
    scale: tuple[float, ...] = ()
    align_corners: bool | None = None
    rule: str | None = None
    rewritten: bool | None = None
    exact: bool | None = None


@dataclass(frozen=True, kw_only=True)
class Upsample(Section):
    legacy_resize: bool | None = None
    sites: tuple[UpsampleSite, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Parting(Section):
    """The first tensor of the shipped file the other converter's does not reproduce."""

    op: str | None = None
    tensor: str | None = None
    other_op: str | None = None
    other_tensor: str | None = None
    max_abs_rel: float | None = None
    index: int | None = None


@dataclass(frozen=True, kw_only=True)
class CrossCheck(Section):
    """The other converter's float32 file against the shipped one (``--cross-check``)."""

    name: str | None = None
    version: str | None = None
    ran: bool | None = None  # false, with ``reason``, where it wrote no file or the two could not be compared
    reason: str | None = None
    images: int | None = None
    max_abs_rel: float | None = None  # the worst output, relative to the shipped file's largest value
    per_output: tuple[float, ...] = ()
    tolerance: float | None = None
    agree: bool | None = None
    first_parting: Parting | None = None


@dataclass(frozen=True, kw_only=True)
class ConverterSection(Section):
    name: str | None = None
    version: str | None = None
    writer: str | None = None
    notes: dict[str, str] = field(default_factory=dict)  # variant -> how it was made, when not as asked first
    lowered: dict[str, str] = field(default_factory=dict)  # variant -> what the board lowering did
    lowered_rules: dict[str, dict[str, int]] = field(default_factory=dict)  # variant -> {rule: operators it rewrote}
    cross_check: CrossCheck | None = None


@dataclass(frozen=True, kw_only=True)
class Stage(Section):
    name: str | None = None
    seconds: float | None = None
    changed: bool | None = None
    summary: str | None = None


@dataclass(frozen=True, kw_only=True)
class TailTry(Section):
    """One float tail tried: how many ops it runs in float, whether it passed on TFLite's kernels."""

    float_ops: int | None = None
    passed: bool | None = None
    worst_op: str | None = None  # the op whose own error is the largest it takes into float
    worst_tensor: str | None = None
    worst_cosine: float | None = None


@dataclass(frozen=True, kw_only=True)
class RepairStep(Section):
    """One repair tried, with what it did (``repair`` says which; each holds its own fields), or its ``error``."""

    repair: str | None = None
    error: str | None = None
    tensors: int | None = None  # calibration ranges: grids set again
    examples: tuple[str, ...] = ()
    pairs: int | None = None  # equalisation: convolution pairs
    biases: int | None = None  # bias correction
    on: str | None = None  # float tail: the file its tails were cut from
    ops: int | None = None
    passed: bool | None = None
    failed: tuple[str, ...] = ()  # a candidate judged on every row: the rows it failed
    float_ops: int | None = None
    worst_cosine: float | None = None
    kept: bool | None = None  # the next repair starts from it
    tried: tuple[TailTry, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Equalised(Section):
    pairs: int | None = None
    biases: int | None = None


@dataclass(frozen=True, kw_only=True)
class Latency(Section):
    """The repaired file's time against the pure file's, on the board's runtime row."""

    runtime: str | None = None
    ms_per_image: float | None = None
    pure_ms_per_image: float | None = None
    ratio: float | None = None
    tflite_ratio: float | None = None  # the same on today's optimised kernels, where the board's row is another runtime
    float32_ms_per_image: float | None = None
    interleaved: bool | None = None  # the three timed against each other in one process (else: the rows' times)


def repair_changes(reranged: int | None = 0, pairs: int | None = 0, biases: int | None = 0, float_ops: int | None = 0,
                   ops: int | None = None, float_as: str | None = None) -> list[str]:
    """What a repair changed, in words: the one place its sentence is written (the repair pass's
    summary, its candidates' names, the report's verdict and Repairs section)."""
    where = f" ({float_as})" if float_as else ""
    return ([f"{reranged} grids re-calibrated"] if reranged else []) + (
        [f"{pairs} convolution pairs equalised"] if pairs else []) + ([f"{biases} biases corrected"] if biases else []) + (
        [(f"{float_ops} of {ops} ops in float" if ops is not None else f"{float_ops} ops in float") + where] if float_ops else [])


@dataclass(frozen=True, kw_only=True)
class Repair(Section):
    """A quantised file that failed, and its repair (``convert/passes/repair_pass.py``): the repaired
    file and what it costs, or ``why`` there is none."""

    repaired: bool | None = None
    why: str | None = None
    passed: bool | None = None
    file: str | None = None
    from_: str | None = None
    ops: int | None = None  # the float32 file's
    float_ops: int | None = None
    reranged: int | None = None
    equalised: Equalised | None = None
    fed_at: tuple[str, ...] = ()
    float_op_names: dict[str, int] = field(default_factory=dict)
    int8_normalised: Normalised | None = None
    worst_cosine: float | None = None
    pure_worst_cosine: float | None = None
    latency: Latency | None = None
    applied: tuple[RepairStep, ...] = ()
    seconds: float | None = None
    float_as: str | None = None  # "islands" (each QUANTIZEd back) or "tail" (to the outputs), where ops run in float

    def changes(self) -> list[str]:
        eq = self.equalised
        return repair_changes(self.reranged, eq.pairs if eq else 0, eq.biases if eq else 0, self.float_ops, self.ops,
                              self.float_as)


@dataclass(frozen=True, kw_only=True)
class ClassAP(Section):
    ap50: float = ranged(0.0, 1.0)
    ap50_95: float = ranged(0.0, 1.0)
    instances: int = ranged(1, math.inf)  # labelled boxes of the class


@dataclass(frozen=True, kw_only=True)
class DatasetMap(Section):
    map50: float = ranged(0.0, 1.0)
    map50_95: float = ranged(0.0, 1.0)
    classes: dict[str, ClassAP] = field(default_factory=dict)  # class index -> its AP


@dataclass(frozen=True, kw_only=True)
class Dataset(Section):
    """validate ``--data``: mAP on every labelled image (or the first ``--images``), against the labels,
    of the cheap rows: the file on TFLite's optimised kernels, PyTorch and the board's own runtime (where
    measured: ``validate/dataset_score.py``). A row whose runtime refused an image has no mAP: ``refused``."""

    source: str | None = None  # the folder as given: said, not compared
    fingerprint: str | None = None  # which images and labels were scored (``dataset_score.fingerprint``)
    images: int = ranged(1, math.inf)
    rows: dict[str, DatasetMap]  # "pytorch", "tflite", "board:NAME (RUNTIME)" -> its mAP
    seconds: float | None = ranged(0.0, math.inf, default=None)
    refused: dict[str, str] = field(default_factory=dict)  # row -> the runtime's own message

    def __post_init__(self) -> None:
        if both := sorted(self.rows.keys() & self.refused.keys()):
            raise Malformed(f"dataset.rows and dataset.refused both name {shown(both)}: a refused row has no mAP")

    @classmethod
    def of(cls, score, source: str) -> "Dataset":
        """From ``validate.dataset_score.DatasetScore``."""
        return cls(source=source, fingerprint=score.fingerprint, images=score.images, seconds=round(score.seconds, 2),
                   refused=dict(score.refused), rows={
            name: DatasetMap(map50=m["map50"], map50_95=m["map50_95"], classes={
                str(c): ClassAP(**ap) for c, ap in m["classes"].items()}) for name, m in score.maps.items()})
