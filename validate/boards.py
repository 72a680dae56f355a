"""Board profiles and the board-compatibility gate.

A profile (``boards/NAME.toml``) names the runtime (``tflite`` or ``tflm``), its version,
the dtypes it runs, RAM for the tensor arena, flash for the model, and optional per-op
overrides with a reason. For a ``tflite`` board the highest runnable version of each
builtin op follows from TFLite's op-version -> minimum-runtime table
(``boards/op_min_runtime.toml``); a ``tflm`` board lists the kernels it has.
``check_model`` lists every reason a board cannot run a model; an empty list means it can.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import tomllib

from edgeport.errors import BadInputError
from edgeport.validate.tflite_model import TFLiteSummary

BOARDS_DIR = Path(__file__).parent / "boards"
DEFAULT_BOARD = "default"
RUNTIMES = ("tflite", "tflm")
# index and shape tensors: every runtime has them whatever arithmetic it runs
INDEX_DTYPES = {"int32", "int64", "bool"}
# Option flags that only later kernel versions honour. A converter may set the flag yet declare
# version 1 (onnx2tf 2.x does for half_pixel_centers): an older runtime then loads the op and
# silently ignores the flag -- the write-up's bug -- so the flag, not the version, decides.
FLAG_NEEDS_VERSION = {("RESIZE_BILINEAR", "half_pixel_centers"): 3, ("RESIZE_NEAREST_NEIGHBOR", "half_pixel_centers"): 3}


def parse_version(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in str(text).split("."))
    except ValueError as exc:
        raise BadInputError(f"version {text!r} is not dotted numbers like 1.13.1") from exc


def version_le(a: str, b: str) -> bool:
    """``a <= b`` component by component (1.13.1 < 1.14.0; 2.2 == 2.2.0)."""
    va, vb = parse_version(a), parse_version(b)
    n = max(len(va), len(vb))
    return va + (0,) * (n - len(va)) <= vb + (0,) * (n - len(vb))


@dataclass(frozen=True)
class OpOverride:
    max_version: int
    reason: str


@dataclass(frozen=True)
class VerifiedOp:
    """An op version the board's real runtime was seen to run, whatever the table says."""

    max_version: int
    evidence: str


@dataclass(frozen=True)
class BoardProfile:
    name: str
    description: str
    runtime: str
    version: str
    dtypes: tuple[str, ...]
    ram_bytes: int
    flash_bytes: int
    ops: tuple[str, ...] | None = None  # tflm: kernels available
    overrides: dict[str, OpOverride] = field(default_factory=dict)
    differences: tuple[str, ...] = ()  # named ways it computes differently (validate/differences.py)
    # evidence from the real runtime beats TFLite's runtime_version.cc table, which records when
    # op versions were tabulated, not when the ops appeared
    verified: dict[str, VerifiedOp] = field(default_factory=dict)

    def runs_dtype(self, dtype: str) -> bool:
        return dtype in self.dtypes

    def max_op_version(self, op: str) -> int:
        """The highest version of ``op`` this board runs (0: none)."""
        if self.runtime == "tflm":
            return 10**6 if self.ops and op in self.ops else 0
        best = self.verified[op].max_version if op in self.verified else 0
        for version, needs in op_min_runtime().get(op, {}).items():
            if version_le(needs, self.version):
                best = max(best, version)
        if op in self.overrides:
            best = min(best, self.overrides[op].max_version)
        return best


@lru_cache(maxsize=1)
def op_min_runtime() -> dict[str, dict[int, str]]:
    raw = tomllib.loads((BOARDS_DIR / "op_min_runtime.toml").read_text())
    return {op: {int(v): str(rt) for v, rt in versions.items()} for op, versions in raw.items()}


def board_names() -> list[str]:
    return sorted(p.stem for p in BOARDS_DIR.glob("*.toml") if p.stem != "op_min_runtime")


def load_board(name_or_path: str) -> BoardProfile:
    path = Path(name_or_path)
    if not (path.suffix == ".toml" and path.is_file()):
        path = BOARDS_DIR / f"{name_or_path}.toml"
    if not path.is_file() or path.stem == "op_min_runtime":
        raise BadInputError(f"unknown board {name_or_path!r}; valid: {', '.join(board_names())} (or a path to a profile .toml)")
    try:
        raw = tomllib.loads(path.read_text())
        runtime = raw["runtime"]
        if runtime not in RUNTIMES:
            raise ValueError(f"runtime {runtime!r} is not one of {', '.join(RUNTIMES)}")
        parse_version(raw["version"])
        overrides = {op: OpOverride(int(o["max_version"]), str(o["reason"])) for op, o in raw.get("overrides", {}).items()}
        verified = {op: VerifiedOp(int(o["max_version"]), str(o["evidence"])) for op, o in raw.get("verified", {}).items()}
        from edgeport.validate.differences import DIFFERENCES

        unknown = [d for d in raw.get("differences", ()) if d not in DIFFERENCES]
        if unknown:
            raise ValueError(f"unknown differences {unknown}; valid: {', '.join(DIFFERENCES)}")
        return BoardProfile(
            name=raw.get("name", path.stem), description=raw.get("description", ""), runtime=runtime,
            version=str(raw["version"]), dtypes=tuple(raw["dtypes"]), ram_bytes=int(raw["ram_bytes"]),
            flash_bytes=int(raw["flash_bytes"]), ops=tuple(raw["ops"]) if "ops" in raw else None, overrides=overrides,
            differences=tuple(raw.get("differences", ())), verified=verified,
        )
    except (KeyError, ValueError, TypeError, tomllib.TOMLDecodeError) as exc:
        raise BadInputError(f"board profile {str(path)!r} is invalid ({type(exc).__name__}: {exc}); see validate/boards/*.toml") from exc


def _op_label(op) -> str:
    notes = f" ({', '.join(op.notes)})" if op.notes else ""
    return f"{op.name} v{op.version}{notes}"


def check_model(summary: TFLiteSummary, board: BoardProfile) -> list[str]:
    """Every reason ``board`` cannot run the model; empty when it can."""
    reasons: list[str] = []
    runs = f"{board.name} runs {board.version}" if board.runtime == "tflite" else f"{board.name} is TFLite Micro"
    for custom in summary.custom_ops:
        reasons.append(f"{custom} is a custom op; {board.name} has only builtin kernels")
    table = op_min_runtime()
    for op in summary.ops:
        if op.name.startswith("CUSTOM:"):
            continue
        override = board.overrides.get(op.name)
        if override and op.version > override.max_version:
            reasons.append(f"{_op_label(op)}: {override.reason}")
            continue
        if board.runtime == "tflm":
            if not board.ops or op.name not in board.ops:
                reasons.append(f"{op.name} has no TFLite Micro kernel on {board.name}")
            continue
        for note in op.notes:
            need = FLAG_NEEDS_VERSION.get((op.name, note))
            # (a declared version >= need is judged by the version rule below)
            if need is not None and op.version < need and board.max_op_version(op.name) < need:
                reasons.append(f"{_op_label(op)}: only {op.name} v{need} kernels honour {note}; {runs}, whose kernel "
                               f"would load the op and ignore it (computing something else)")
        proven = board.verified.get(op.name)
        if proven is not None and op.version <= proven.max_version:
            continue  # the real runtime ran it
        needs = table.get(op.name, {}).get(op.version)
        if needs is None:
            reasons.append(f"{_op_label(op)} is not in TFLite's op-version table; cannot prove {board.name} runs it")
        elif not version_le(needs, board.version):
            reasons.append(f"{_op_label(op)} needs runtime {needs}; {runs}")
    if board.runtime == "tflite" and summary.min_runtime_version and not version_le(summary.min_runtime_version, board.version):
        reasons.append(f"the model's min_runtime_version metadata is {summary.min_runtime_version}; {runs}")
    for dtype in summary.activation_dtypes:
        if dtype not in INDEX_DTYPES and not board.runs_dtype(dtype):
            reasons.append(f"{dtype} tensors; {board.name} runs {', '.join(board.dtypes)}")
    if summary.size_bytes > board.flash_bytes:
        reasons.append(f"model is {summary.size_bytes:,} bytes; {board.name} has {board.flash_bytes:,} bytes of flash")
    return reasons
