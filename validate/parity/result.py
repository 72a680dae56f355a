"""Parity's typed results: a row per (variant, runtime), and the verdict on whether a file runs.

Imports neither torch nor numpy: ``edgeport check`` and the renderers read reports without them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from edgeport.jsonfile import Malformed, count, expect, number, strings
from edgeport.text import clip, shown

JUDGES = ("emulator", "runtime", "converter")
# a repaired file's variant suffix (``int8-repaired``: convert/passes/repair_pass.py); it stands in for its pure
# file where it passes (``Report.passed``)
REPAIRED = "-repaired"
QUANTISED_FILES = ("int8", "uint8")  # the full-integer files: the variants a repaired file may stand in for

# what a row's fields must hold when read back (``from_dict``); NaN and infinities are read, and
# the gate then reports them as regressions: they mean something broke
INF = math.inf
OUTPUT_METRICS = {"max_abs": (0.0, INF), "mean_abs": (0.0, INF), "rmse": (0.0, INF), "p99_abs": (0.0, INF),
                  "max_abs_rel": (0.0, INF), "ref_max_abs": (0.0, INF), "cosine": (-1.0, 1.0), "snr_db": (-INF, INF)}
REQUIRED_OUTPUT_METRICS = ("cosine", "max_abs_rel")
# a float file's output may lie from PyTorch's by what float32 itself errs by there (``compare.FLOAT32_ERROR``):
# never more than this share of the output's largest value, which no rounding of float32's comes near
FLOAT32_ERROR_BOUND = 1e-3
# the fields of a section that are read (others are allowed and kept as they are), and those it must have
SECTIONS = {"detections": {"recall": (0.0, 1.0), "precision": (0.0, 1.0), "reference_boxes": (0.0, INF),
                           "matched": (0.0, INF), "missed": (0.0, INF), "extra": (0.0, INF), "stable_boxes": (0.0, INF),
                           "missed_stable": (0.0, INF), "extra_beyond": (0.0, INF), "noise_floor": (0.0, INF),
                           "box_centre_px": (0.0, INF), "box_corner_px": (0.0, INF), "boxes_judged": (0.0, INF)},
            "map": {"map50": (0.0, 1.0), "map50_95": (0.0, 1.0)}}
REQUIRED_SECTION_FIELDS = {"detections": ("recall",), "map": ("map50", "map50_95")}
# counts of boxes: finite, never NaN (a NaN count is no count)
DETECTION_COUNTS = ("reference_boxes", "matched", "missed", "extra", "stable_boxes", "missed_stable", "extra_beyond", "noise_floor")


@dataclass(frozen=True)
class Verdict:
    """Whether a file runs, and who says so: the board ``emulator`` (its op gate; TFLite Micro's
    arena), the board's own ``runtime``, or the ``converter`` that wrote no file at all."""

    judge: str
    runnable: bool
    reasons: tuple[str, ...] = ()
    differences: dict = field(default_factory=dict)  # emulator: named board differences -> ops affected
    arena_bytes: int | None = None  # TFLite Micro: what the model needs
    model_bytes: int | None = None

    def to_dict(self) -> dict:
        return {"judge": self.judge, "runnable": self.runnable, "reasons": list(self.reasons), "differences": dict(self.differences),
                "arena_bytes": self.arena_bytes, "model_bytes": self.model_bytes}

    @classmethod
    def from_dict(cls, value, where: str) -> "Verdict | None":
        """As ``to_dict`` wrote it (null: none); ``jsonfile.Malformed`` naming the first field that is not."""
        if value is None:
            return None
        expect(value, dict, where)
        if value.get("judge") not in JUDGES:
            raise Malformed(f"{where}.judge is {shown(value.get('judge'))}, not one of {', '.join(JUDGES)}")
        return cls(value["judge"], expect(value.get("runnable"), bool, f"{where}.runnable"),
                   strings(value.get("reasons"), f"{where}.reasons"))


@dataclass(frozen=True)
class ResultRow:
    """One (variant, runtime) row: how a runtime's outputs compare with the reference's."""

    variant: str  # reference, folded, onnx, float32, int8, uint8
    runtime: str  # pytorch, onnxruntime, tflite, tflite-ref, board:NAME ..., converter
    passed: bool
    ms_per_image: float | None = None
    outputs: tuple[dict, ...] = ()  # per model output (and channel group): compare.TensorComparison.to_dict()
    detections: dict | None = None  # detections.DetectionAgreement.to_dict()
    map: dict | None = None  # {"map50", "map50_95"} against ground truth
    verdict: Verdict | None = None  # whether the file runs there, and who says so
    divergence: dict | None = None  # divergence.Divergence.to_dict()
    error_histogram: dict | None = None  # compare.error_histogram()
    repeat: dict | None = None  # {"max_abs", "passed"}: each image invoked twice
    reasons: tuple[str, ...] = ()  # why the row failed beyond its outputs (boxes, a second invoke that differs)
    reported_runtime: str | None = None  # what a board's runtime called itself, when its label says otherwise
    # quantised rows: runs it must match step for step, each {"against", "max_steps", "allowed", "passed"}
    # (a board's kernels against the reference kernels on the same file; uint8 against its int8 twin)
    steps: tuple[dict, ...] = ()
    same_run_as: str | None = None  # the runtime of an earlier row whose run this row reuses
    # a failing quantised row: the ops whose quantisation carries the error, each measured alone
    # (validate/parity/op_errors.py): {judged, worst: [{index, op, tensor, own, reached}], on} or {error}
    op_errors: dict | None = None
    # judged on the first ``images`` inputs only (a diagnostic row: ``run.DIAGNOSTIC_IMAGES``); None: on every input
    images: int | None = None

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["outputs"] = list(self.outputs)
        d["reasons"] = list(self.reasons)
        d["steps"] = [dict(c) for c in self.steps]
        d["verdict"] = self.verdict.to_dict() if self.verdict else None
        return d

    @property
    def key(self) -> str:
        return f"{self.variant}/{self.runtime}"

    @classmethod
    def from_dict(cls, r, where: str) -> "ResultRow":
        """A row as ``to_dict`` wrote it, read strictly: every metric a number in its range, one entry
        per output name and per run its steps are against, a check that passed consistent with its own
        numbers; ``jsonfile.Malformed`` naming the first field that is not. Fields it does not read are
        kept as they are; ``reasons``, ``repeat``, ``verdict`` and ``steps`` are optional (older reports)."""
        expect(r, dict, where)
        variant, runtime = expect(r.get("variant"), str, f"{where}.variant"), expect(r.get("runtime"), str, f"{where}.runtime")
        key = f"{variant}/{runtime}"
        outputs = [_output(o, f"{where}.outputs[{j}]") for j, o in enumerate(expect(r.get("outputs"), list, f"{where}.outputs"))]
        _unique([o["name"] for o in outputs], lambda name: f"{where} ({key}) has two outputs named {name!r}")
        sections = {s: _section(r.get(s), s, f"{where}.{s}") for s in SECTIONS}
        steps = [_steps(c, f"{where}.steps[{i}]") for i, c in enumerate(expect(r.get("steps", []), list, f"{where}.steps"))]
        _unique([c["against"] for c in steps], lambda a: f"{where}.steps ({key}) has two entries against {shown(a)}")
        passed = expect(r.get("passed"), bool, f"{where}.passed")
        kept = {f.name: r[f.name] for f in fields(cls) if f.name in r}
        return cls(**{**kept, "variant": variant, "runtime": runtime, "passed": passed, "outputs": tuple(outputs), **sections,
                      "reasons": strings(r["reasons"], f"{where}.reasons") if "reasons" in r else (),
                      "repeat": _repeat(r.get("repeat"), f"{where}.repeat"), "steps": tuple(steps),
                      "verdict": Verdict.from_dict(r.get("verdict"), f"{where}.verdict"),
                      "images": _images(r.get("images"), f"{where}.images")})

    @classmethod
    def not_runnable(cls, variant: str, runtime: str, verdict: Verdict) -> "ResultRow":
        """A file that does not run there (or was never written): a failed row carrying the reasons."""
        return cls(variant=variant, runtime=runtime, passed=False, verdict=verdict)


def timed(rows, variant: str) -> "ResultRow | None":
    """The row timing ``variant`` on the board: its real runtime's, else TFLite's optimised kernels'
    (XNNPACK); never the reference kernels', which time nothing a board runs."""
    mine = [r for r in rows if r.variant == variant and r.ms_per_image]
    return next((r for r in mine if r.verdict is not None and r.verdict.judge == "runtime"), None) or \
        next((r for r in mine if r.runtime == "tflite"), None)


def _images(value, where: str) -> int | None:
    """A row's sample: null (every input) or a count of at least one image (a row judged on none proves nothing)."""
    n = count(value, where, nullable=True)
    if n == 0:
        raise Malformed(f"{where} is 0: a row is judged on at least one image (null: on every input)")
    return n


def _unique(values: list, message) -> None:
    seen = set()
    for v in values:
        if v in seen:
            raise Malformed(message(v))
        seen.add(v)


def _output(o, where: str) -> dict:
    """One output's comparison (``compare.TensorComparison.to_dict``) with its numbers read."""
    expect(o, dict, where)
    expect(o.get("name"), str, f"{where}.name")
    for metric in REQUIRED_OUTPUT_METRICS:
        if metric not in o:
            raise Malformed(f"{where}.{metric} is missing")
    metrics = {m: number(o[m], f"{where}.{m}", lo, hi) for m, (lo, hi) in OUTPUT_METRICS.items() if m in o}
    tol = expect(o.get("tolerance"), dict, f"{where}.tolerance")
    tolerance = {k: None if tol.get(k) is None else number(tol[k], f"{where}.tolerance.{k}", lo, hi)
                 for k, lo, hi in (("max_abs_rel", 0.0, INF), ("min_cosine", -1.0, 1.0), ("float32_error", 0.0, INF), ("scale", 0.0, 1.0))
                 if k in tol or k not in ("float32_error", "scale")}  # (a float file's, where measured; a probability's)
    bound = FLOAT32_ERROR_BOUND * metrics.get("ref_max_abs", 0.0)
    if tolerance.get("float32_error") is not None and not tolerance["float32_error"] <= bound:
        raise Malformed(f"{where}.tolerance.float32_error is {tolerance['float32_error']!r}, more than float32 errs by on an "
                        f"output ({FLOAT32_ERROR_BOUND:g} x its max|ref|, {bound!r})")
    return {**o, **metrics, "tolerance": tolerance, "passed": expect(o.get("passed"), bool, f"{where}.passed"),
            "reasons": strings(o["reasons"], f"{where}.reasons") if "reasons" in o else ()}


def _section(value, section: str, where: str) -> dict | None:
    if value is None:
        return None
    expect(value, dict, where)
    for f in REQUIRED_SECTION_FIELDS[section]:
        if f not in value:
            raise Malformed(f"{where}.{f} is missing")
    read = {f: number(value[f], f"{where}.{f}", lo, hi) for f, (lo, hi) in SECTIONS[section].items() if f in value}
    for f in DETECTION_COUNTS if section == "detections" else ():
        if f in read and not math.isfinite(read[f]):
            raise Malformed(f"{where}.{f} is {read[f]!r}: a count of boxes is a finite number")
    return {**value, **{f: v for f, v in read.items() if not isinstance(value[f], int)}}  # a count stays an integer, as written


def _repeat(value, where: str) -> dict | None:
    """Each image invoked twice: the check is "the same answer twice", so it passes exactly when max_abs is 0."""
    if value is None:
        return None
    expect(value, dict, where)
    if "max_abs" not in value:
        raise Malformed(f"{where}.max_abs is missing")
    max_abs = number(value["max_abs"], f"{where}.max_abs", 0.0, INF)
    passed = expect(value.get("passed"), bool, f"{where}.passed")
    if passed != (max_abs == 0.0):
        raise Malformed(f"{where} says passed {passed} with max_abs {max_abs!r}: it passes exactly when max_abs is 0")
    return {**value, "max_abs": max_abs}


def _steps(c, where: str) -> dict:
    """One steps entry: ``max_steps`` null when that run did not run, ``allowed`` null when not gated."""
    expect(c, dict, where)
    against = expect(c.get("against"), str, f"{where}.against")
    for f in ("max_steps", "allowed"):
        if f not in c:
            raise Malformed(f"{where}.{f} is missing (null: {'that run did not run' if f == 'max_steps' else 'not gated'})")
    steps, allowed = count(c["max_steps"], f"{where}.max_steps", nullable=True), count(c["allowed"], f"{where}.allowed", nullable=True)
    passed = expect(c.get("passed"), bool, f"{where}.passed")
    if passed and allowed is not None and (steps is None or steps > allowed):
        seen = "no run to check against" if steps is None else f"max_steps {steps}"
        raise Malformed(f"{where} says passed with {seen} and allowed {allowed}")
    return {**c, "against": against, "max_steps": steps, "allowed": allowed, "passed": passed}


# -- a row's own checks, as the report states them: the report's verdict and the gate both judge by these

# where a non-finite value means something broke (+inf SNR is a bit-exact match)
FINITE_METRICS = ("max_abs", "mean_abs", "rmse", "cosine", "max_abs_rel", "p99_abs", "ref_max_abs")


def sections(row: ResultRow) -> dict:
    """"detections" / "map" -> {field: float} of the fields the gate reads, where the row has them."""
    return {s: {f: v for f, v in getattr(row, s).items() if f in fields} for s, fields in SECTIONS.items()
            if getattr(row, s) is not None}


def stricter(*tolerances: dict | None) -> dict:
    """The strictest of ``{"max_abs_rel", "min_cosine", "float32_error", "scale"}`` tolerances, metric by
    metric (None: that metric ungated there, no float32 error measured, or no probability)."""
    given = [t for t in tolerances if t]

    def each(key: str) -> list:
        return [t[key] for t in given if t.get(key) is not None]

    rel, cos, own, scale = each("max_abs_rel"), each("min_cosine"), each("float32_error"), each("scale")
    return {"max_abs_rel": min(rel) if rel else None, "min_cosine": max(cos) if cos else None,
            "float32_error": min(own) if own else None, "scale": min(scale) if scale else None}


def own_tolerance_failure(o: dict, tolerance: dict | None = None) -> str | None:
    """How an output's metrics fail the tolerance it states -- or ``tolerance`` where that is
    stricter (the report's for its variant) -- in words (NaN fails); None: they pass."""
    tol = stricter(o["tolerance"], tolerance)
    rel, cos, own, scale = tol["max_abs_rel"], tol["min_cosine"], tol["float32_error"], tol["scale"]
    for m in FINITE_METRICS:
        if m in o and not math.isfinite(o[m]):
            return f"{m} {o[m]!r}"
    on_scale = scale is not None and rel is not None and o.get("max_abs", math.inf) <= rel * max(o.get("ref_max_abs", 0.0), scale)
    if rel is not None and not o["max_abs_rel"] <= rel and not (own is not None and o.get("max_abs", math.inf) <= own) and not on_scale:
        return f"max_abs_rel {o['max_abs_rel']!r} > {rel!r}" + (f" and max_abs {o['max_abs']!r} > {own!r}" if own is not None else "")
    if cos is not None and not o["cosine"] >= cos:
        return f"cosine {o['cosine']!r} < {cos!r}"
    return None


def _output_failure(o: dict, tolerance: dict | None) -> str | None:
    """Why an output fails, in words: as it says, by its reasons, or by its tolerance."""
    if not o["passed"]:
        return f"output {o['name']} failed" + (f" ({clip(o['reasons'][0])})" if o["reasons"] else "")
    if o["reasons"]:
        return f"output {o['name']}: {clip(o['reasons'][0])}"
    why = own_tolerance_failure(o, tolerance)
    return f"output {o['name']} fails its tolerance ({why})" if why else None


def steps_label(c: dict) -> str:
    return f"steps against {clip(c['against'])}"


def _steps_failure(c: dict) -> str | None:
    """How many quantisation steps a row's outputs lie from a run that must compute the same integers."""
    if c["passed"]:
        return None
    if c["max_steps"] is None:
        return f"{steps_label(c)}: that run did not run, so nothing was checked"
    if c["allowed"] is not None and c["max_steps"] > c["allowed"]:
        return f"{steps_label(c)} {c['max_steps']} > allowed {c['allowed']}"
    allowed = "not gated" if c["allowed"] is None else f"allowed {c['allowed']}"
    return f"{steps_label(c)} failed ({c['max_steps']}, {allowed})"


def row_failures(row: ResultRow, boxes: tuple[float, int] | None = None, tolerance=lambda name: None) -> list[str]:
    """Each of the row's own checks that failed, in words; empty: its numbers earn a pass. ``boxes``:
    (fraction, slack), how many stable boxes the row may miss or add; ``tolerance``: output name ->
    the report's tolerance for it, which holds the output where it is stricter than its own."""
    out = [f for o in row.outputs if (f := _output_failure(o, tolerance(o["name"])))]
    det = sections(row).get("detections", {})
    if boxes is not None and {"stable_boxes", "missed_stable", "extra_beyond"} <= det.keys():
        fraction, slack = boxes
        allowed = max(slack, int(fraction * det["stable_boxes"]))
        for what in ("missed_stable", "extra_beyond"):
            if not det[what] <= allowed:
                count = {k: int(v) if float(v).is_integer() else v for k, v in det.items() if math.isfinite(v)}
                out.append(f"detections {what} {count.get(what, det[what])!r} > allowed {allowed} "
                           f"(of {count.get('stable_boxes', det['stable_boxes'])!r} stable boxes)")
    if row.reasons:
        more = f" (and {len(row.reasons) - 1} more)" if len(row.reasons) > 1 else ""
        out.append(f"its reasons say: {clip(row.reasons[0])}{more}")
    if row.repeat is not None and not row.repeat["passed"]:
        out.append(f"a second invoke answers differently (repeat max_abs {row.repeat['max_abs']!r})")
    if row.verdict is not None and not row.verdict.runnable:
        why = clip(row.verdict.reasons[0]) if row.verdict.reasons else "no reason given"
        out.append(f"the {row.verdict.judge} says the file does not run ({why})")
    return out + [f for f in map(_steps_failure, row.steps) if f]
