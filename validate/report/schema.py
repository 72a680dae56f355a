"""The ``edgeport.parity/2`` report: typed records, assembled once, serialised once.

``Report`` gathers parity's typed rows (``ResultRow``) with what the other phases found (typed
parts, ``sections.py``) and decides ``passed`` in one place; ``to_dict`` is ``report.json``, which
``edgeport check`` reads back into one. No torch or numpy here, so ``edgeport check`` starts in a
fraction of a second. (Fields documented in ``validate/report/SCHEMA.md``.)
"""

from __future__ import annotations

import datetime as _dt
import typing
from dataclasses import dataclass, field

from edgeport.errors import BadInputError, ParityGateError
from edgeport.jsonfile import Malformed, expect, read, strings, written
from edgeport.text import clip, for_terminal, shown
from edgeport.validate.parity.result import QUANTISED_FILES, REPAIRED, ResultRow, row_failures, sections, timed
from edgeport.validate.report.sections import (
    Artifact,
    Board,
    BoardRuntime,
    ConverterSection,
    Dataset,
    InputsSection,
    ModelSection,
    Normalised,
    Repair,
    Sample,
    Stage,
    Tolerance,
    Upsample,
)

SCHEMA = "edgeport.parity/2"
# a repaired file running more of its ops in float than this share is no quantised file: float32 it is
MAX_FLOAT_SHARE = 0.5
# a quantised file is asked for its speed: a repaired file taking more than this factor of its pure file's
# time gives too much of it away to stand in for it (where the runtime timed runs even the pure file no faster
# than float32 -- TFLite 1.13.1's uint8 kernels on an x86 host, not on the board's ARM cores -- it is the one
# time condition that speaks of the board's)
SLOWER_THAN_PURE = 1.25
IDENTITY = (("model", "arch"), ("model", "weights_sha256"), ("model", "outputs"), ("inputs", "shape"))
REFERENCE = "the checkpoint's model as loaded, before SyncBN revert and BN fold"  # what every row is compared with
# the report's typed parts (``sections.py``), read alike from a file and from what the phases hand ``build_report``
SECTIONS = ("model", "inputs", "tolerances", "versions", "artifacts", "board", "board_runtime", "sample", "upsample",
            "int8_normalised", "converter", "stages", "repairs", "dataset")


@dataclass(frozen=True)
class Report:
    """Everything a run found. ``passed``: every row passed, the board can run every file, and no runtime
    refused images of validate --data's set."""

    results: tuple[ResultRow, ...]
    model: ModelSection = field(default_factory=ModelSection)
    inputs: InputsSection = field(default_factory=InputsSection)
    tolerances: dict[str, Tolerance] = field(default_factory=dict)  # variant (or ``channels``) -> its tolerance
    versions: dict[str, str] = field(default_factory=dict)  # package -> version
    artifacts: dict[str, Artifact] = field(default_factory=dict)  # file name -> its size
    board: Board | None = None
    board_runtime: BoardRuntime | None = None  # whose word the board rows are
    sample: Sample | None = None
    upsample: Upsample | None = None  # convert
    int8_normalised: Normalised | None = None  # convert
    converter: ConverterSection | None = None  # convert
    stages: tuple[Stage, ...] = ()
    repairs: dict[str, Repair] | None = None  # convert: per quantised variant that failed, its repair
    dataset: Dataset | None = None  # validate --data: mAP on every labelled image
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    claimed: bool | None = None  # read back (``from_dict``): the ``passed`` the file says, earned or not

    @property
    def says_passed(self) -> bool:
        """What the report says of itself: as read back, or (built in memory) as decided."""
        return self.claimed if self.claimed is not None else self.passed

    @property
    def passed(self) -> bool:
        """Parity passed (``parity_passed``), and no runtime refused images of validate --data's set."""
        return self.parity_passed and not (self.dataset and self.dataset.refused)

    @property
    def parity_passed(self) -> bool:
        """Every row earned its pass and the board runs every file -- where a quantised file failed
        and its repaired file stands in for it (``repaired``), the repaired file's rows and board verdict are
        the file's: the run delivers a file that computes what the model computes."""
        stands_in = set(self.repaired)
        checks = self.board.checks.items() if self.board is not None else ()
        return all(self.earned(r) for r in self.results if r.variant not in stands_in) and \
            all(c.runnable for v, c in checks if v not in stands_in)

    def failures(self, row: ResultRow) -> list[str]:
        """``row_failures`` under the report's tolerances: its variant's for each output (``channels`` for
        a channel check) and its variant's box tolerance (older reports: none)."""
        def limits(output: str) -> dict | None:
            tol = self.tolerances.get("channels" if output.endswith("[channels]") else row.variant)
            return tol.limits if tol is not None else None

        boxes = getattr(self.tolerances.get(row.variant), "boxes", None)
        return row_failures(row, (boxes.fraction, boxes.slack) if boxes is not None else None, limits)

    def earned(self, row: ResultRow) -> bool:
        """The row says it passed, and every one of its own checks agrees."""
        return row.passed and not self.failures(row)

    def stand_in_refusal(self, variant: str) -> str | None:
        """Why the repaired file of a quantised ``variant`` may not stand in for it; None: it may.
        On every runtime the pure file has a row, the repaired file has one judged alike -- the same outputs,
        the same images, the same detection sections -- and earns its pass; the board runs it; and it is
        still a quantised file: at most half its ops in float (``MAX_FLOAT_SHARE``), within
        ``SLOWER_THAN_PURE`` of the pure file's time, and faster than the float32 file on the board's
        runtime (``result.timed``) -- unless that runtime runs the pure file itself no faster than float32."""
        repaired = variant + REPAIRED
        pure = [r for r in self.results if r.variant == variant]
        rows = {r.runtime: r for r in self.results if r.variant == repaired}
        if variant not in QUANTISED_FILES or not pure or not rows:
            return f"{variant} has no repaired file"
        for p in pure:
            t = rows.get(p.runtime)
            if t is None:
                return f"{repaired} has no row on {p.runtime}, where {variant} has one"
            outputs_p, outputs_t = [o["name"] for o in p.outputs], [o["name"] for o in t.outputs]
            if outputs_t != outputs_p:
                return f"{t.key} compares {len(outputs_t)} outputs ({shown(outputs_t)}), {p.key} {len(outputs_p)}"
            if t.images != p.images:
                return f"{t.key} is judged on {_images(t.images)}, {p.key} on {_images(p.images)}"
            judged_p, judged_t = ({s: sorted(f) for s, f in sections(r).items()} for r in (p, t))
            if judged_t != judged_p:
                return f"{t.key} holds the sections {shown(judged_t)}, {p.key} {shown(judged_p)}"
            failed = [] if t.passed else ["it says it failed"]
            failed += self.failures(t)
            if failed:
                return f"{t.key} fails: {clip(failed[0])}"
        check = self.board.checks.get(repaired) if self.board is not None else None
        if self.board is not None and (check is None or not check.runnable):
            return f"{self.board.name} cannot run {repaired}"
        made = (self.repairs or {}).get(variant)
        if made is None or made.ops is None or made.float_ops is None:
            return f"{repaired} says nothing of the ops it runs in float (repairs.{variant})"
        if made.float_ops > MAX_FLOAT_SHARE * made.ops:
            return f"{repaired} runs {made.float_ops} of its {made.ops} ops in float: more than half is no quantised file"
        timing = made.latency if made.latency is not None and made.latency.interleaved else None
        if timing is not None:  # the three timed against each other, interleaved (convert/passes/repair_pass.py)
            where, mine, plain, floats = timing.runtime, timing.ms_per_image, timing.pure_ms_per_image, timing.float32_ms_per_image
        else:  # the rows' times
            rows = [timed(self.results, v) for v in (repaired, variant, "float32")]
            if rows[2] is None:
                return None
            if rows[0] is None or rows[0].runtime != rows[2].runtime:
                return f"{repaired} is not timed on {rows[2].runtime}, where float32 is"
            where = rows[0].runtime
            mine, plain, floats = (r.ms_per_image if r is not None and r.runtime == where else None for r in rows)
        if None in (mine, floats):
            return f"{repaired} is not timed against float32 on {where}"
        if not mine < floats and (plain is None or plain < floats):
            return f"{repaired} is no faster than float32 ({mine:.3g} ms/img against {floats:.3g} on {where})"
        if plain is not None and not mine <= SLOWER_THAN_PURE * plain:
            return f"{repaired} takes {mine / plain:.2f}x its pure file's time on {where} ({mine:.3g} against {plain:.3g} ms/img)"
        return None

    @property
    def repaired(self) -> list[str]:
        """The quantised variants (int8, uint8) whose repaired file stands in for them (``stand_in_refusal``)."""
        return [v for v in QUANTISED_FILES if self.stand_in_refusal(v) is None]

    def _passes(self, variant: str) -> bool:
        rows = [r for r in self.results if r.variant == variant]
        check = self.board.checks.get(variant) if self.board is not None else None
        return bool(rows) and all(self.earned(r) for r in rows) and (self.board is None or (check is not None and check.runnable))

    @property
    def ship(self) -> "Ship":
        """The file to ship, and what it is: the quantised file where it passes, else its repaired file
        where that stands in, else the float32 file where it passes (the report then fails where a
        quantised file was asked for: the verdict names float32 as the file that passes); else none."""
        for v in QUANTISED_FILES:  # a variant with no rows neither passes nor has a repaired file
            if self._passes(v):
                return self._shipped(v)
            if v in self.repaired:
                return self._shipped(v + REPAIRED)
        if self._passes("float32"):
            return self._shipped("float32")
        return Ship(None, None, False)

    def artifact_bytes(self, variant: str) -> int | None:
        entry = self.artifacts.get(file_name(variant))
        return entry.bytes if entry is not None else None

    def _shipped(self, variant: str) -> "Ship":
        def at(v: str) -> tuple[float, str] | None:
            row = timed(self.results, v)
            return (row.ms_per_image, row.runtime) if row is not None else None

        pure = variant.removesuffix(REPAIRED)
        made = (self.repairs or {}).get(pure) if pure != variant else None
        given = self.artifacts.get(file_name(variant))
        return Ship(given.path if given is not None and given.path else file_name(variant), variant,
                    self.passed, changes=tuple(made.changes()) if made else (),
                    float_ops=made.float_ops if made else None, ops=made.ops if made else None,
                    bytes=self.artifact_bytes(variant), timed=at(variant), pure=(self.artifact_bytes(pure), at(pure)) if made else None,
                    float32=(self.artifact_bytes("float32"), at("float32")) if variant != "float32" else None)

    @property
    def identity(self) -> dict:
        """What says which model a report is about: reports of two models are never compared."""
        return {f"{section}.{f}": written(getattr(getattr(self, section), f)) for section, f in IDENTITY}

    @classmethod
    def from_dict(cls, data, what: str = "report") -> "Report":
        """A report as ``to_dict`` wrote it, read back strictly: what says which model it is about; its
        parts (``read_sections``, its tolerances among them); then its rows (``ResultRow.from_dict``), one
        per variant and runtime, each with the box tolerance it is held to. ``BadInputError`` (exit 2), one line naming the first
        problem. Fields no type names are allowed (new ones come within a schema version)."""
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            schema = data.get("schema") if isinstance(data, dict) else None
            raise BadInputError(f"{what} is not an {SCHEMA} report (schema: {for_terminal(repr(schema))[:80]}); pass a "
                                f"report.json edgeport wrote")
        try:
            for section, f in IDENTITY:
                if f not in expect(data.get(section), dict, section):
                    raise Malformed(f"{section}.{f} is missing: it says which model the report is about")
            parts = read_sections(data)
            boxes = {v for v, t in parts.get("tolerances", {}).items() if t.boxes is not None}
            rows = [ResultRow.from_dict(r, f"results[{i}]") for i, r in enumerate(expect(data.get("results"), list, "results"))]
            seen = set()
            for i, row in enumerate(rows):
                if row.key in seen:
                    raise Malformed(f"results[{i}] repeats the row {row.key!r}: one row per variant and runtime")
                seen.add(row.key)
                if "stable_boxes" in (row.detections or {}) and row.variant not in boxes:
                    raise Malformed(f"results[{i}] counts boxes above the noise floor, and tolerances.{row.variant}.boxes is "
                                    f"missing: nothing says how many it may miss")
            claimed = expect(data.get("passed"), bool, "passed")
            report = cls(tuple(rows), **parts, created=data.get("created", ""), claimed=claimed)
            for variant in strings(data.get("repaired") or [], "repaired"):  # (absent: an older report)
                refused = report.stand_in_refusal(variant)
                if refused:
                    raise Malformed(f"repaired names {shown(variant)}, but its repaired file does not stand in for it: {refused}")
            return report
        except Malformed as exc:
            raise BadInputError(f"{what} is malformed: {exc}; edited, or written by another version: write it again "
                                f"(edgeport validate)") from None

    def to_dict(self) -> dict:
        part = {name: written(getattr(self, name)) for name in SECTIONS}
        return {
            "schema": SCHEMA, "created": self.created, "passed": self.passed, "model": part["model"], "inputs": part["inputs"],
            "reference": {"runtime": "pytorch", "what": REFERENCE}, "tolerances": part["tolerances"],
            "versions": part["versions"], "artifacts": part["artifacts"], "results": [r.to_dict() for r in self.results],
            "sample": part["sample"], "board": part["board"], "board_runtime": part["board_runtime"],
            "upsample": part["upsample"], "int8_normalised": part["int8_normalised"], "converter": part["converter"],
            "stages": part["stages"], "repairs": part["repairs"], "repaired": self.repaired, "ship": self.ship.to_dict(),
            **({"dataset": part["dataset"]} if self.dataset is not None else {}),  # validate --data with labels
        }


def read_sections(data: dict) -> dict:
    """The report's typed parts (``SECTIONS``) from a dict holding them as ``to_dict`` writes them: a
    file, or what the phases hand ``build_report``; a part null or absent takes its default.
    ``jsonfile.Malformed`` naming the first field of the wrong type."""
    kinds = typing.get_type_hints(Report)
    return {name: read(kinds[name], data[name], name) for name in SECTIONS if data.get(name) is not None}


@dataclass(frozen=True)
class Ship:
    """The file a report says to ship (``Report.ship``), what it is, and what it costs beside the pure
    quantised file and the float32 one: size in bytes, and ms/img on the board's runtime (``result.timed``)."""

    file: str | None  # None: no file passes
    variant: str | None
    passes: bool  # the report passes with it (a float32 file named where a quantised one was asked: it does not)
    changes: tuple[str, ...] = ()  # what a repair changed (``sections.Repair.changes``)
    float_ops: int | None = None  # a repaired file's ops in float, of its ``ops``
    ops: int | None = None
    bytes: int | None = None
    timed: tuple[float, str] | None = None  # (ms/img, on which runtime)
    pure: tuple | None = None  # the pure quantised file's (bytes, timed), beside a repaired one
    float32: tuple | None = None  # the float32 file's (bytes, timed), beside a quantised one

    @property
    def what(self) -> str:
        """"int8", "int8 with 12 of 251 ops in float (islands)", "float32"."""
        if self.variant is None:
            return "none"
        kind = self.variant.removesuffix(REPAIRED)
        return f"{kind} with {', '.join(self.changes)}" if self.changes else kind

    def to_dict(self) -> dict:
        def cost(c):
            return None if c is None else {"bytes": c[0], "ms_per_image": c[1][0] if c[1] else None,
                                           "runtime": c[1][1] if c[1] else None}

        return {"file": self.file, "variant": self.variant, "what": self.what, "passes": self.passes,
                **({} if self.variant is None else {"float_ops": self.float_ops, "ops": self.ops, **cost((self.bytes, self.timed)),
                                                    "pure": cost(self.pure), "float32": cost(self.float32)})}


def file_name(variant: str) -> str:
    """The file a variant is written to: its key in ``Report.artifacts``."""
    return "model.onnx" if variant == "onnx" else f"model_{variant.replace('-', '_')}.tflite"


def _images(n: int | None) -> str:
    return "every input" if n is None else f"the first {n} images"


@dataclass(frozen=True)
class Failure:
    """One thing that failed in a report: a row, or a file the board cannot run."""

    what: str
    reasons: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.what}: {'; '.join(self.reasons)}" if self.reasons else self.what


def failures(report: Report) -> list[Failure]:
    """Every failed row, every file the board cannot run, and every runtime that refused images of
    validate --data's set: the one list the pipeline's summary, the gate's error and the renderers read.
    A row's reasons name each failed check with its value and threshold, in the order a reader acts on
    them: its outputs ("p3 cosine 0.97 < 0.99"), its own reasons, a step check or repeat those do not
    already say, and why the file does not run."""

    def said(r: ResultRow) -> list[str]:
        out = [f"{o['name']} {why}" for o in r.outputs if not o.get("passed", True) for why in (o.get("reasons") or ["failed"])]
        own = list(r.reasons)
        out += own
        for c in r.steps:
            if not c.get("passed", True) and not any(str(c.get("against")) in why for why in own):
                out.append(f"computes {c['max_steps']} steps apart from {c.get('against')} (allowed {c.get('allowed')})"
                           if c.get("max_steps") is not None else f"{c.get('against')} did not run: nothing to check it against")
        repeat = r.repeat or {}
        if repeat and not repeat.get("passed", True) and not any("second invoke" in why for why in own):
            diff = repeat.get("max_abs")
            out.append(f"a second invoke of the same image answers differently (max |difference| "
                       f"{format(diff, '.3g') if isinstance(diff, (int, float)) else diff})")
        if r.verdict is not None and not r.verdict.runnable:
            out += list(r.verdict.reasons) or [f"the {r.verdict.judge} says it cannot run"]
        return out

    out = [Failure(r.key, tuple(said(r))) for r in report.results if not r.passed]
    board = report.board
    for variant, check in (board.checks if board is not None else {}).items():
        if not check.runnable:
            out.append(Failure(f"{variant} not runnable on {board.name}", check.reasons))
    for row, why in (report.dataset.refused if report.dataset is not None else {}).items():
        out.append(Failure(f"dataset {row}", (f"refused {why}",)))
    return out


def gate(out, report: Report, *, what: str = "artifacts and report") -> None:
    """Raise ``ParityGateError`` (exit 1) naming what failed -- each check with its value and its
    threshold -- when the report did not pass: one line, bounded (the report lists them all).
    ``what``: the files in ``out`` ("report" for ``edgeport validate``, which writes no artifacts)."""
    if report.passed:
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
