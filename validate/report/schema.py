"""The ``edgeport.parity/2`` report: typed records, assembled once, serialised once.

Parity returns typed rows (``ResultRow``); ``Report`` gathers them with what the other phases
found (the model, the board's verdict on each file, the converter, the stages) and decides
``passed`` in one place. ``to_dict`` is what ``report.json`` holds; the renderers and
``edgeport check`` read that. This module imports neither torch nor numpy, so ``edgeport check``
starts in a fraction of a second. (Fields documented in ``validate/report/SCHEMA.md``.)
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field

from edgeport.errors import ParityGateError
from edgeport.validate.parity.result import ResultRow

SCHEMA = "edgeport.parity/2"


@dataclass(frozen=True)
class BoardSection:
    """The board the files are for, and the board gate's verdict on each file."""

    name: str
    runtime: str
    version: str
    dtypes: tuple[str, ...]
    ram_bytes: int
    flash_bytes: int
    checks: dict  # variant -> {runnable, reasons, min_runtime_version, size_bytes, ops, activation_dtypes}

    @property
    def runnable(self) -> bool:
        return all(c["runnable"] for c in self.checks.values())

    @classmethod
    def of(cls, board, checks: dict) -> "BoardSection":
        return cls(board.name, board.runtime, board.version, tuple(board.dtypes), board.ram_bytes, board.flash_bytes, dict(checks))

    def to_dict(self) -> dict:
        return {"name": self.name, "runtime": self.runtime, "version": self.version, "dtypes": list(self.dtypes),
                "ram_bytes": self.ram_bytes, "flash_bytes": self.flash_bytes, "checks": self.checks, "runnable": self.runnable}


@dataclass(frozen=True)
class Report:
    """Everything a run found. ``passed``: every row passed and the board can run every file."""

    model: dict
    inputs: dict
    results: tuple[ResultRow, ...]
    tolerances: dict
    versions: dict
    artifacts: dict
    board: BoardSection | None = None
    board_runtime: dict | None = None  # {real, via, install}: whose word the board rows are
    sample: dict | None = None
    upsample: dict | None = None  # convert: {legacy_resize, sites}
    int8_normalised: list | None = None  # convert: per output, [axis, first, end, factor]
    converter: dict | None = None  # convert: {name, version, writer, notes}
    stages: tuple[dict, ...] = ()
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results) and (self.board is None or self.board.runnable)

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA, "created": self.created, "passed": self.passed, "model": self.model, "inputs": self.inputs,
            "reference": {"runtime": "pytorch", "what": "the checkpoint's model as loaded, before SyncBN revert and BN fold"},
            "tolerances": self.tolerances, "versions": self.versions, "artifacts": self.artifacts,
            "results": [r.to_dict() for r in self.results], "sample": self.sample,
            "board": self.board.to_dict() if self.board else None, "board_runtime": self.board_runtime,
            "upsample": self.upsample, "int8_normalised": self.int8_normalised, "converter": self.converter,
            "stages": list(self.stages),
        }


@dataclass(frozen=True)
class Failure:
    """One thing that failed in a report: a row, or a file the board cannot run."""

    what: str
    reasons: tuple[str, ...] = field(default=())

    def __str__(self) -> str:
        return f"{self.what}: {'; '.join(self.reasons)}" if self.reasons else self.what


def failures(report: dict) -> list[Failure]:
    """Every failed row and every file the board cannot run, from a report dictionary.

    The one place the failed rows are listed: the pipeline's summary, the gate's error and
    the renderers all read this. A row's reasons name every check it failed, each with its value
    and its threshold, in the order a reader acts on them: its outputs ("p3 cosine 0.97 < 0.99"),
    the row's own reasons (boxes, a second invoke, steps), a step check or a repeat those do not
    already say, and why the file does not run.
    """

    def said(r: dict) -> list[str]:
        out = [f"{o['name']} {why}" for o in r.get("outputs") or () if not o.get("passed", True)
               for why in (o.get("reasons") or ["failed"])]
        own = list(r.get("reasons") or ())
        out += own
        for c in r.get("steps") or ():
            if not c.get("passed", True) and not any(str(c.get("against")) in why for why in own):
                out.append(f"computes {c['max_steps']} steps apart from {c.get('against')} (allowed {c.get('allowed')})"
                           if c.get("max_steps") is not None else f"{c.get('against')} did not run: nothing to check it against")
        repeat = r.get("repeat") or {}
        if repeat and not repeat.get("passed", True) and not any("second invoke" in why for why in own):
            diff = repeat.get("max_abs")
            out.append(f"a second invoke of the same image answers differently (max |difference| "
                       f"{format(diff, '.3g') if isinstance(diff, (int, float)) else diff})")
        verdict = r.get("verdict") or {}
        if verdict and not verdict.get("runnable", True):
            out += list(verdict.get("reasons") or ()) or [f"the {verdict.get('judge')} says it cannot run"]
        return out

    out = [Failure(f"{r['variant']}/{r['runtime']}", tuple(said(r))) for r in report["results"] if not r["passed"]]
    board = report.get("board") or {}
    for variant, check in (board.get("checks") or {}).items():
        if not check["runnable"]:
            out.append(Failure(f"{variant} not runnable on {board['name']}", tuple(check["reasons"])))
    return out


def gate(out, report: dict, *, what: str = "artifacts and report") -> None:
    """Raise ``ParityGateError`` (exit 1) naming what failed -- each check with its value and its
    threshold -- when the report did not pass. One line, bounded: three reasons a failure and five
    failures, then how many more (the report lists them all). ``what``: the files in ``out``
    ("report" for ``edgeport validate``, which writes no artifacts)."""
    if report["passed"]:
        return
    shown_reasons, shown_failures = 3, 5

    def one(f: Failure) -> str:
        more = len(f.reasons) - shown_reasons
        return str(Failure(f.what, f.reasons[:shown_reasons])) + (f"; and {more} more" if more > 0 else "")

    failed = failures(report)
    named = [one(f) for f in failed[:shown_failures]]
    if len(failed) > shown_failures:
        named.append(f"and {len(failed) - shown_failures} more")
    raise ParityGateError(f"gate failed: {' | '.join(named) or 'the report says it did not pass'}; {what} in {out}/")
