"""What an upsample is, and what a rewrite rule promises.

``UpsampleSpec`` describes one upsampling site (an ``nn.Upsample``, an ``F.interpolate``
call, or edgeport's own ``BoardUpsample``). A rule matches some specs; it either keeps the
board's native resize (``native``: the board computes exactly PyTorch's values) or builds a
replacement module made of operators the board runs with identical values. ``exact`` is
False only for the legacy rule, which reproduces an old converter's bug on purpose.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar

from torch import nn

from edgeport.errors import BadInputError


class UnsupportedUpsampleError(BadInputError):
    """No rule computes this upsample exactly on the chosen board."""


@dataclass(frozen=True)
class UpsampleSpec:
    where: str  # module path or graph node name
    mode: str  # "nearest", "bilinear", "tf_legacy_bilinear"
    scale: tuple[float, float]  # output / input, per spatial axis
    align_corners: bool
    channels: int | None = None

    @property
    def integer_scale(self) -> int | None:
        sh, sw = self.scale
        return int(sh) if sh == sw and float(sh).is_integer() and sh >= 1 else None

    def describe(self) -> str:
        s = "x".join(f"{v:g}" for v in self.scale)
        ac = f", align_corners={self.align_corners}" if self.mode != "nearest" else ""
        return f"{self.where}: {self.mode} x{s}{ac}"


class UpsampleRule(abc.ABC):
    """A rule names what it matches (``what``) and the TFLite builtin ops, with the version
    each needs, that its result runs as (``requires``); whether a board can take it and the
    description in errors and reports both follow from those, so they cannot disagree."""

    name: ClassVar[str]
    what: ClassVar[str]  # the sites it matches, e.g. "nearest, integer factor"
    requires: ClassVar[dict[str, int]]  # TFLite builtin op -> minimum op version
    note: ClassVar[str] = ""  # why it is exact (or, for the legacy rule, why it is not)
    exact: ClassVar[bool] = True
    native: ClassVar[bool] = False  # keeps the board's own resize op

    @abc.abstractmethod
    def matches(self, spec: UpsampleSpec) -> bool: ...

    @abc.abstractmethod
    def build(self, spec: UpsampleSpec) -> nn.Module: ...

    def available(self, board) -> bool:
        """Whether the board runs every op this rule relies on, at the version it needs."""
        return all(board.max_op_version(op) >= version for op, version in self.requires.items())

    @property
    def description(self) -> str:
        ops = " + ".join(f"{op} v{version}" for op, version in self.requires.items())
        how = "native" if self.native else "rewritten as"
        return f"{self.what}: {how} {ops}" + (f" ({self.note})" if self.note else "")
