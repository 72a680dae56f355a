"""The report's sections, typed: each a frozen ``Section`` read from what a phase hands
``build_report`` or from what a file holds, by one reader (``read``), and written back by one
writer (``written``) exactly as it was given. (Fields documented in ``validate/report/SCHEMA.md``.)

A field is read by its annotation: a ``Section``, ``X | None``, ``tuple[X, ...]`` (a list),
``dict[str, X]``, ``str``, ``int``, ``float`` (a JSON number, or "inf", "-inf", "nan"), ``bool``, or a
bare ``dict`` kept as it is. A wrong type is ``jsonfile.Malformed`` naming the field
(``repairs.int8.latency.ratio``); a field without a default must be there; one the file does not
hold takes its default (an older report lacks some), and one it holds that no field names is
allowed (new ones come within a schema version).
"""

from __future__ import annotations

import functools
import types
import typing
from dataclasses import MISSING, dataclass, field, fields

from edgeport.jsonfile import Malformed, expect, number


@dataclass(frozen=True, kw_only=True)
class Section:
    """A part of the report, read (``from_dict``) and written (``to_dict``) by its fields' annotations."""

    # the fields the dict it was read from did not hold: ``to_dict`` leaves them out, so a section
    # is written as it was given (the repair log's entries each hold their own fields; a field one
    # holds as null another does not hold at all)
    absent: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    def to_dict(self) -> dict:
        return {_key(f.name): written(getattr(self, f.name)) for f in _fields(type(self)) if f.name not in self.absent}

    @classmethod
    def from_dict(cls, value, where: str):
        expect(value, dict, where)
        hints, given = _hints(cls), {}
        for f in _fields(cls):
            key = _key(f.name)
            if key in value:
                given[f.name] = read(hints[f.name], value[key], f"{where}.{key}")
            elif f.default is MISSING and f.default_factory is MISSING:
                raise Malformed(f"{where}.{key} is missing")
        return cls(**given, absent=frozenset(f.name for f in _fields(cls) if f.name not in given))


_hints = functools.cache(typing.get_type_hints)


@functools.cache
def _fields(cls) -> tuple:
    return tuple(f for f in fields(cls) if f.name != "absent")


def _key(name: str) -> str:
    """A field's key in the file: its name, less the underscore that keeps a keyword a name (``from_``)."""
    return name.removesuffix("_")


def read(kind, value, where: str):
    """``value`` as the annotation ``kind`` says (the module's docstring); ``Malformed`` naming ``where``."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is types.UnionType:  # X | None
        return None if value is None else read(next(a for a in args if a is not type(None)), value, where)
    if origin is tuple:  # a phase may hand a tuple where the file holds a list
        items = list(value) if isinstance(value, tuple) else expect(value, list, where)
        return tuple(read(args[0], v, f"{where}[{i}]") for i, v in enumerate(items))
    if origin is dict:
        return {k: read(args[1], v, f"{where}.{k}") for k, v in expect(value, dict, where).items()}
    if isinstance(kind, type) and issubclass(kind, Section):
        return kind.from_dict(value, where)
    if kind is float:
        number(value, where)
        return value if isinstance(value, (int, float)) else float(value)  # an integer stays one, as written
    return expect(value, kind, where)


def written(value):
    """A section's value as the file holds it: sections as dicts, tuples as lists."""
    if isinstance(value, Section):
        return value.to_dict()
    if isinstance(value, (tuple, list)):
        return [written(v) for v in value]
    if isinstance(value, dict):
        return {k: written(v) for k, v in value.items()}
    return value


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


@dataclass(frozen=True, kw_only=True)
class BoxTolerance(Section):
    fraction: float  # of PyTorch's stable boxes a row may miss, and add
    slack: int
    noise: str | None = None  # the perturbation that means nothing for the variant, in words


@dataclass(frozen=True, kw_only=True)
class Tolerance(Section):
    """A variant's tolerance (None: that metric not gated); under ``channels``, each channel's of a quantised file."""

    max_abs_rel: float | None = None
    min_cosine: float | None = None
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
class BoardOp(Section):
    name: str | None = None
    version: int | None = None
    count: int | None = None
    notes: tuple[str, ...] = ()
    needs: int | None = None  # the version what these uses compute needs, where more than declared
    dtype: str | None = None


@dataclass(frozen=True, kw_only=True)
class BoardCheck(Section):
    """The board gate's verdict on one file (``validate.board.profiles.board_verdict``)."""

    runnable: bool
    reasons: tuple[str, ...] = ()
    min_runtime_version: str | None = None
    size_bytes: int | None = None
    ops: tuple[BoardOp, ...] = ()
    activation_dtypes: tuple[str, ...] = ()


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
