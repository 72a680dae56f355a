"""The board gate's verdict on one file, as a record (``profiles.board_verdict`` makes it): light,
so the report reads it back without the board's code (``edgeport check`` starts without numpy)."""

from __future__ import annotations

from dataclasses import dataclass

from edgeport.jsonfile import Section


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
    runnable: bool
    reasons: tuple[str, ...] = ()
    min_runtime_version: str | None = None
    size_bytes: int | None = None
    ops: tuple[BoardOp, ...] = ()
    activation_dtypes: tuple[str, ...] = ()
