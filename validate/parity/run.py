"""Parity: every runtime on the same inputs, each compared with PyTorch as loaded.

Three steps, each with a typed result (as Polygraphy's runners and comparator):

1. ``plan_rows``: which rows, each a ``PlannedRow`` -- the reference (PyTorch, the checkpoint's
   model as loaded), ``folded`` (PyTorch after SyncBN revert, BN fold and upsample rewrites: a
   folding error shows up here first), ``onnx`` (ONNX Runtime), and per TFLite file its
   optimised kernels (XNNPACK), its reference kernels (BUILTIN_REF), the board emulator, and the
   board's own runtime where it can be reached;
2. ``execute``: every distinct run, side by side where runners allow (``RunOutput``);
3. ``judge``: each run against the reference -- per output, per channel group and, for
   quantised files, per channel; boxes against PyTorch's; a second invoke that differs -- into a
   ``ResultRow``; failing rows get their divergence point.

``run_parity`` returns a ``ParityResult``; ``validate/report/assemble.py`` assembles the report.
"""

from __future__ import annotations

import copy
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np

from edgeport.models.decode import COCO_EVAL, DETECT, Detections
from edgeport.models.heads import Head, Hints, resolve_head
from edgeport.models.outputs import output_shapes
from edgeport.process import usable_cores as _workers  # (tests set it)
from edgeport.validate.parity.compare import (
    DETECTION_TOLERANCES,
    FLOAT32_ERROR,
    FLOAT_VARIANTS,
    NOISE_BOUNDS,
    QUANTISED,
    TOLERANCES,
    Tolerance,
    align_rows,
    compare_channels,
    compare_tensors,
    error_histogram,
    probability_tolerance,
)
from edgeport.validate.parity.detections import (
    PERTURBATIONS,
    Stability,
    box_errors,
    compare_detections,
    perturb,
    possible_protocol,
    stability,
)
from edgeport.validate.parity.early import RANDOM_INPUTS, EarlyRuns, parity_inputs
from edgeport.validate.parity.result import FLOAT32_ERROR_BOUND, ResultRow, Verdict
from edgeport.validate.parity.runners import Runner, RunOutput, RuntimeRefused, Shares, TorchRunner

# the reference kernels' rows where the board runs other kernels (a current TFLite runs its optimised
# ones, and so does its emulator) or none is named: a diagnostic, judged on the first images only,
# which the row says (``ResultRow.images``). They take an order of magnitude XNNPACK's time an
# image: on every image, half of parity's time (docs/measured.md). The diagnostic is
# the quantised files' (``diagnosed``): integer kernels round their own way, which is where a board
# with other integer kernels parts from the optimised ones; float32's agree within float rounding
# (across the zoo its row failed exactly where float32/tflite did), at most of the diagnostic's time.
DIAGNOSTIC_IMAGES = 2
# quantised outputs compared in steps with a run that should compute the same integers: a uint8
# file against its int8 twin on the reference kernels (the same arithmetic shifted by 128: edgeport's
# own rewrite, bit-exact where no lowering rule changed the graph) is held to this; a board's
# kernels against today's reference kernels on the same file are reported and located, not gated
STEPS_ALLOWED = 1


@dataclass(frozen=True)
class ParitySubject:
    reference_module: object
    folded_module: object | None
    onnx_path: Path | None
    tflite: dict[str, Path]
    output_names: tuple[str, ...]
    strides: tuple[int, ...]  # per output: its stride, 0 where it is no grid
    inputs: np.ndarray  # real images, preprocessed as in training
    inputs_source: str
    board: object = None  # BoardProfile; None: no emulator rows
    workdir: Path | None = None
    ground_truth: list | None = None  # train.data.Sample per real image, for mAP
    letterboxes: list | None = None  # models.preprocess.Letterbox per real image
    seed: int = 0
    # writes the reference model as ONNX to the path given (for the divergence analysis)
    export_reference: Callable[[Path], None] | None = None
    head: Head | str | None = None  # resolved, or a name of models.heads.HEADS; None: auto, from the shapes and hints
    hints: Hints = field(default_factory=Hints)
    levels: tuple[int, ...] = ()  # the model's level strides, where one output holds every level's anchors
    # variant -> per output, channel ranges the file divides (convert/converters/int8_groups.py): multiplied back
    normalised: dict = field(default_factory=dict)
    # variant -> why the converter wrote no file: a failed row each, with that reason
    not_converted: dict = field(default_factory=dict)
    # variant -> the file it was rewritten from (uint8: its int8 twin, convert/uint8.py), compared
    # step for step on the reference kernels; held to STEPS_ALLOWED where the variant's graph is
    # the twin's op for op (``twin_gated``), reported where lowering rewrote ops (each rounds its own way)
    twins: dict = field(default_factory=dict)
    twin_gated: dict = field(default_factory=dict)
    # variant -> the board gate's verdict on the file (``profiles.board_verdict``): the emulator's row starts from it
    board_checks: dict = field(default_factory=dict)
    # runs started while the converter worked (``early.py``): taken where they are parity's own
    early: EarlyRuns | None = None
    held_out: bool = True  # ``inputs`` hold none of the images the quantised files were calibrated on
    sampled: bool = True  # the reference kernels' rows on a diagnostic sample (False: the files' own rows alone)


@dataclass(frozen=True)
class PlannedRow:
    variant: str
    runtime: str  # the row's label
    runner: Runner | None  # None: the board cannot run the file (``verdict`` says why)
    analysis_file: Path | None = None  # the file the divergence analysis reads when the row fails
    verdict: Verdict | None = None  # the emulator's gate


@dataclass(frozen=True)
class ParityResult:
    head: Head
    rows: tuple[ResultRow, ...]
    inputs: dict  # source, count, random, random_seed, shape, labelled
    sample: dict | None  # the first image's boxes, as the board computes them where it can
    board_runtime: dict | None  # whose word the board rows are

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.rows)


# -- 1. which rows ----------------------------------------------------------------------------------


def diagnosed(variant: str) -> bool:
    """Whether ``variant`` gets the reference kernels' diagnostic row (``DIAGNOSTIC_IMAGES``): the quantised files do."""
    return variant != "float32"


def diagnostic(runner: Runner) -> Runner:
    """``runner``'s row judged on the first ``DIAGNOSTIC_IMAGES`` inputs only (``ResultRow.images``):
    the folded model's and the ONNX graph's, which say where an error entered. The TFLite files made
    from them, on the optimised kernels and on the board, are judged on every input, so an error they
    carry fails there; on every input these two rows would take seconds of CPU on a large model,
    beside the converter's calibration (docs/measured.md)."""
    runner.images = DIAGNOSTIC_IMAGES
    return runner


def reference_runner(module) -> TorchRunner:
    """The reference's run: the checkpoint's model as loaded, on every input."""
    return TorchRunner(module)


def plan_rows(subject: ParitySubject, expected_shapes) -> list[PlannedRow]:
    """The rows parity judges besides the reference, each with the run that makes it: what the
    conversion starts early (``convert/passes/to_tflite_pass.py``) is planned here too."""
    from edgeport.validate.board.runtime import transport_for
    from edgeport.validate.parity.board_runner import BoardRunner
    from edgeport.validate.parity.emulator import emulate, emulator_label
    from edgeport.validate.parity.runners import OnnxRuntimeRunner
    from edgeport.validate.parity.tflite_runner import TFLiteRunner

    transport = transport_for(subject.board) if subject.board is not None else None
    rows: list[PlannedRow] = []
    if subject.folded_module is not None:
        rows.append(PlannedRow("folded", "pytorch", diagnostic(TorchRunner(subject.folded_module)), subject.onnx_path))
    if subject.onnx_path is not None:
        rows.append(PlannedRow("onnx", "onnxruntime", diagnostic(OnnxRuntimeRunner(subject.onnx_path)), subject.onnx_path))
    # the reference kernels' rows: on every input for a board that runs those kernels (an old runtime's
    # emulator: its uint8 rows are held to the int8 twin there), else a diagnostic on the sample
    on_reference = subject.board is not None and subject.board.kernels == "reference"
    sample = None if on_reference else DIAGNOSTIC_IMAGES
    for variant, path in subject.tflite.items():
        for kernels in ("optimized", "reference") if on_reference or (subject.sampled and diagnosed(variant)) else ("optimized",):
            runner = TFLiteRunner(path, expected_shapes, kernels=kernels, images=sample if kernels == "reference" else None)
            rows.append(PlannedRow(variant, runner.runtime, runner, path))
        if subject.board is None:
            continue
        emulation = emulate(path, subject.board, expected_shapes, subject.workdir, subject.board_checks.get(variant))
        rows.append(PlannedRow(variant, emulator_label(subject.board), emulation.runner, emulation.file, emulation.verdict))
        if transport is not None:
            # the board's own runtime, whatever the emulator's gate said: it is the judge. It keeps
            # no intermediates, so a divergence is located on the emulator's file.
            label = board_label(subject.board, transport)
            rows.append(PlannedRow(variant, label, BoardRunner(transport, path, expected_shapes, runtime=label,
                                                               workdir=subject.workdir), emulation.file))
    return rows


def board_label(board, transport) -> str:
    return f"board:{board.name} ({transport.identity(board)})"


# -- 2. running them ---------------------------------------------------------------------------------


def _settled(compute) -> Future:
    """A finished future: ``compute()``'s result, or its ``RuntimeRefused``."""
    done: Future = Future()
    try:
        done.set_result(compute())
    except RuntimeRefused as exc:
        done.set_exception(exc)
    return done


def execute(runners: list[Runner], inputs: np.ndarray, early: EarlyRuns | None = None) -> dict[object, Future]:
    """Every distinct run (``Runner.cache_key``), finished, or taken from ``early`` where it started on
    the same inputs (``early.py``; its future waits for it). PyTorch's first, alone (it uses every core
    itself, on its untimed first invoke); then the others side by side, each on a thread or in a child
    process, at most one per core. A slow runner's images are shared out (``split``: the reference
    kernels), slow shares first, so the cores finish together (docs/measured.md). An optimised TFLite
    run (only it has a helper) is joined, when a core comes free, by a second interpreter taking its
    last images (``Runner.helper``, ``Shares``): a row left alone -- a slow int8 file, once its
    reference kernels' row aborted -- ends on both cores. Each image is still timed on its own, but
    beside another run: on a small machine the reference kernels' ms/img reads up to a fifth higher
    than alone. A refusal (``RuntimeRefused``: the runtime's verdict) waits in its future for its row."""
    needed: dict[object, int | None] = {}  # run -> how many of the first inputs it computes (None: all)
    for runner in runners:
        known = needed.get(runner.cache_key, 0)
        needed[runner.cache_key] = None if known is None or runner.images is None else max(known, runner.images)
    runs: dict[object, Future] = {}
    for runner in runners:
        started = early.taken(runner, inputs, needed[runner.cache_key]) if early is not None else None
        if started is not None:
            runs[runner.cache_key] = started
    for runner in runners:
        if not runner.side_by_side and runner.cache_key not in runs:
            runs[runner.cache_key] = _settled(lambda r=runner: r.run(inputs[: needed[r.cache_key]]))
    workers = _workers()
    shared: dict[object, list] = {}  # run -> (runner, image indices) per share
    for runner in runners:
        if runner.cache_key not in runs and runner.cache_key not in shared:
            count = len(inputs[: needed[runner.cache_key]])
            pieces = runner.split(min(workers, count))
            shared[runner.cache_key] = list(zip(pieces, np.array_split(np.arange(count), len(pieces))))
    stop = threading.Event()
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="edgeport-parity")
    try:
        jobs, helped = {}, {}
        for key, pieces in sorted(shared.items(), key=lambda kv: len(kv[1]) == 1):  # split (slow) runs first
            helper = pieces[0][0].helper() if len(pieces) == 1 and workers > 1 else None
            if helper is None:
                jobs[key] = [pool.submit(piece.run, inputs[idx], stop) for piece, idx in pieces]
                continue
            (piece, idx), = pieces
            x, shares = inputs[idx], Shares(len(idx))
            jobs[key] = [pool.submit(_share, piece, x, stop, shares, first=True)]
            helped[key] = (helper, piece, x, shares)
        for key, (helper, _, x, shares) in helped.items():  # queued last: each starts when a core comes free
            jobs[key].append(pool.submit(_share, helper, x, stop, shares, first=False))
        wait([f for fs in jobs.values() for f in fs])
    finally:
        stop.set()  # an interrupt, or an error: the others stop at their next image
        pool.shutdown(wait=True, cancel_futures=True)
    for key, fs in jobs.items():
        if key in helped:
            runs[key] = _settled(lambda fs=fs, h=helped[key]: _helped(fs, *h[1:]))
        else:
            runs[key] = _settled(lambda fs=fs: fs[0].result() if len(fs) == 1 else RunOutput.joined([f.result() for f in fs]))
    return runs


def _share(runner: Runner, x: np.ndarray, stop: threading.Event, shares: Shares, *, first: bool) -> RunOutput:
    """One side of a helped run: the runner from the first image, the helper from the last (loaded
    before it takes one, and only where two are left: a helper that comes late takes nothing).
    The runner failing ends the helper's share at its next image (the row is the runner's verdict);
    the helper failing leaves the rest to the runner, and what it took to ``_helped``."""
    if not first:
        if shares.left() < 2:
            return RunOutput([], float("nan"))
        runner.prepare()
        return runner.run(x, stop, shares.from_last())
    try:
        return runner.run(x, stop, shares.from_first())
    except BaseException:
        shares.close()
        raise


def _helped(fs: list[Future], runner: Runner, x: np.ndarray, shares: Shares) -> RunOutput:
    """The runner's share joined with its helper's; where only the helper failed (its own
    interpreter: memory, say), its images are run by the runner, so the helper decides nothing."""
    mine = fs[0].result()
    try:
        theirs = fs[1].result()
    except Exception:  # noqa: BLE001 -- the runner's own run is the verdict
        theirs = runner.run(x, None, iter(sorted(shares.helper_took)))
    return RunOutput.joined([mine, theirs])


# -- 3. judging each run -----------------------------------------------------------------------------


def comparisons(names, head: Head, refs: list[np.ndarray], gots: list[np.ndarray], variant: str,
                errors: list[np.ndarray] | None = None) -> list:
    """Per output; per channel group where one output mixes scales (box pixels against scores);
    and, for a quantised file, per channel: a collapsed score or visibility channel then fails by
    name instead of hiding in a larger channel's range. ``errors``: float32's own error on each
    output, element by element, which a float file may lie from the reference by (``FLOAT32_ERROR``)."""
    tol = TOLERANCES[variant]

    def within(ref: np.ndarray, tensor_errors) -> Tolerance:
        held = tol
        if variant in FLOAT_VARIANTS and _unit_scale(ref) and float(np.max(ref)) < 1.0:
            # a probability's scale is 1, whatever one run's values: an untrained head's scores of 1e-4
            # are held to 1e-4 of 1, not of 1e-4 (ONNX Runtime's sigmoid differs from PyTorch's by 5e-8 there)
            held = replace(tol, scale=1.0)
        if errors is None:
            return held
        # never beyond the share of the output's largest value a report may hold (a model whose float32
        # outputs float64 does not settle -- a top-k among ties -- is no float file's to match there)
        own, bound = FLOAT32_ERROR * float(np.max(tensor_errors, initial=0.0)), FLOAT32_ERROR_BOUND * float(np.abs(ref).max(initial=0.0))
        return replace(held, float32_error=min(own, bound))

    out = []
    for k, (name, r, g) in enumerate(zip(names, refs, gots, strict=True)):
        probability = variant in QUANTISED and head.name == "raw" and _unit_scale(r)
        out.append(compare_tensors(name, r, g, probability_tolerance(r) if probability else within(r, errors[k] if errors else None)))
        for group in head.groups(k, r.shape):
            if len(head.groups(k, r.shape)) > 1:
                out.append(compare_tensors(f"{name}[{group.name}]", group.take(r), group.take(g),
                                           within(group.take(r), group.take(errors[k]) if errors else None)))
        axis = head.channel_axis(k, r.shape)
        if variant in QUANTISED and axis is not None:
            groups = tuple((grp.name, grp.channels) for grp in head.groups(k, r.shape))
            out.append(compare_channels(name, r, g, axis, groups=groups))
    return out


def _unit_scale(ref: np.ndarray) -> bool:
    """Whether PyTorch keeps ``ref`` within [0, 1] (a probability: a softmax's or a sigmoid's)."""
    return bool(ref.size) and 0.0 <= float(np.min(ref)) and float(np.max(ref)) <= 1.0


def _detection_reasons(variant: str, agreement) -> list[str]:
    """Boxes missed or added beyond the tolerance, counted above the noise floor where it was measured."""
    tol = DETECTION_TOLERANCES[variant]
    held, missed, extra = agreement.judged
    allowed = tol.allowed(held)
    above = agreement.stable_boxes is not None
    floor = (f"; a change within {agreement.noise_bound} of PyTorch's outputs moves up to {agreement.noise_floor}"
             if above else "")
    reasons = []
    if missed > allowed:
        reasons.append(f"missed {missed} of PyTorch's {held} {'stable ' if above else ''}boxes (allowed {allowed}{floor})")
    if extra > allowed:
        what = (f"boxes that no change within {agreement.noise_bound} of PyTorch's outputs produces" if above
                else "boxes PyTorch does not find")
        reasons.append(f"{extra} {what} (allowed {allowed})")
    return reasons


@dataclass
class _Reference:
    """The reference run and what is derived from it once."""

    outputs: list[np.ndarray]
    n_real: int
    detections: list[Detections] | None
    head: Head | None = None
    tensors: object = None  # every intermediate of the reference ONNX, on the first image, when a row fails
    floors: dict = field(default_factory=dict)  # NoiseBound -> Stability, measured once per bound
    samples: dict = field(default_factory=dict)  # n -> the reference on the first n inputs (``first``)
    errors: object = None  # float32's own error on each output (``float32_errors``), once measured; False: not measurable

    def first(self, n: int) -> "_Reference":
        """The reference on the first ``n`` inputs only: what a row judged on a sample is held to."""
        if n >= self.outputs[0].shape[0]:
            return self
        if n not in self.samples:
            real = min(n, self.n_real)
            self.samples[n] = _Reference([o[:n] for o in self.outputs], real,
                                         self.detections[:real] if self.detections is not None else None, self.head,
                                         errors=[e[:n] for e in self.errors] if self.errors else self.errors)
        return self.samples[n]

    def float32_errors(self, module, inputs: np.ndarray) -> list[np.ndarray] | None:
        """Per output, float32's own error element by element (``models.inference.float32_error``) on
        the inputs these outputs are of (the first of ``inputs``); None where the model cannot say."""
        if self.errors is None:
            from edgeport.models.inference import float32_error

            self.errors = float32_error(module, inputs[: self.outputs[0].shape[0]], self.outputs) or False
        return self.errors or None

    def floor(self, variant: str) -> Stability | None:
        """The reference's boxes under changes that mean nothing for ``variant`` (``NOISE_BOUNDS``)."""
        bound = NOISE_BOUNDS.get(variant)
        if bound is None or self.detections is None or self.head is None:
            return None
        if bound not in self.floors:
            real = [o[: self.n_real] for o in self.outputs]
            # the bound measured where the tensor tolerance is (every input the row is judged on), applied to the real images
            perturbed = [self.head.decode(perturb(real, self.head.groups, bound, how, self.outputs)) for how in PERTURBATIONS]
            possible = self.head.decode(perturb(real, self.head.groups, bound, "+", self.outputs), possible_protocol(DETECT))
            self.floors[bound] = stability(self.detections, perturbed, possible, bound)
        return self.floors[bound]


def judged_reference(run: RunOutput, n_real: int, head: Head, variants) -> _Reference:
    """The reference as rows are judged against it: its boxes on the ``n_real`` real images and the
    noise floor of each of ``variants``, on them and on a diagnostic row's sample. Made while the converter works (``EarlyRuns.start``'s
    ``then``), after the conversion otherwise."""
    ref = _Reference(run.outputs, n_real, head.decode([o[:n_real] for o in run.outputs]), head)
    for variant in variants:
        ref.floor(variant)
        ref.first(DIAGNOSTIC_IMAGES).floor(variant)  # a diagnostic row's sample (the PyTorch and ONNX rows share float32's bound)
    return ref


def judge(row: PlannedRow, run: RunOutput, subject: ParitySubject, head: Head, ref: _Reference, inputs: np.ndarray,
          located: dict, *, divergence: bool, steps: tuple["_Steps", ...] = ()) -> tuple[ResultRow, list[Detections] | None]:
    """One run against the reference: its row, and its detections on the real images; ``steps``:
    runs it must match integer for integer."""
    step_checks = [check.compare(run.outputs) for check in steps]
    for check, c in zip(steps, step_checks):
        if c["max_steps"] is not None and c["max_steps"] > STEPS_ALLOWED and check.locate is not None and divergence:
            # where the two part, op by op: once per file and check
            key = (check.against, row.runtime if row.runtime.startswith("board:") else "")
            if key not in located:
                try:
                    parting = check.locate(row.runner, inputs)
                    located[key] = parting.to_dict() if parting is not None else None
                except Exception as exc:  # noqa: BLE001 - locating is an aid: its failure is said, not raised
                    located[key] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            c["first_parting"] = located[key]
    full, images = ref, run.outputs[0].shape[0] if run.outputs else inputs.shape[0]
    ref = full.first(images)  # a diagnostic row's sample (``DIAGNOSTIC_IMAGES``), or every input
    # a second row of the same run as this variant (a board that runs the file as tflite does): compared once
    same = ("compared", row.runner.cache_key if row.runner is not None else id(run), row.variant)
    if same not in located:
        located[same] = _compared(run, row.variant, subject, head, ref, whole=ref is full, inputs=inputs)
    outputs, compared, real, dets, agreement, boxes, histogram, mapped = located[same]
    reasons = _detection_reasons(row.variant, agreement) if agreement is not None else []
    repeat = None
    if run.repeat_max_abs is not None:
        repeat = {"max_abs": run.repeat_max_abs, "passed": run.repeat_max_abs == 0.0}
        if not repeat["passed"]:
            reasons.append(f"a second invoke of the same image answers differently (max |difference| {run.repeat_max_abs:.3g}): "
                           f"the runtime keeps state between invokes")
    reasons += [c.pop("reason") for c in step_checks if not c["passed"]]
    for c in step_checks:
        c.pop("reason", None)
    passed = all(c.passed for c in compared) and not reasons
    found = None
    if divergence and not passed and row.analysis_file is not None:
        # where it stops computing what the trained model computes
        if full.tensors is None:
            full.tensors = _reference_tensors(subject, inputs[:1]) or False
        # once per file's bytes and variant: a board row's emulator file that is the tflite row's file, copied, is not analysed again
        analysed = ("divergence", row.variant, _content(row.analysis_file))
        if analysed not in located:
            located[analysed] = (_divergence(full.tensors, row.analysis_file, inputs[:1], TOLERANCES[row.variant])
                                 if full.tensors else None)
        found = dict(located[analysed]) if located[analysed] is not None else None
        if found is not None and row.runner is not None and row.runner.board_runtime:
            found["located_on"] = "the emulator: the board's runtime exposes no intermediate tensors"
    op_errors = None
    if divergence and not passed and row.variant in QUANTISED and "float32" in subject.tflite \
            and row.analysis_file is not None and Path(row.analysis_file).suffix == ".tflite":
        # which ops carry the quantisation error, each on its own: once per file's bytes
        key = ("op_errors", _content(row.analysis_file))
        if key not in located:
            located[key] = _op_errors(row.analysis_file, subject.tflite["float32"], inputs[:1], subject.workdir)
        op_errors = located[key]
    verdict = Verdict("runtime", True) if row.runner is not None and row.runner.board_runtime else row.verdict
    result = ResultRow(
        row.variant, row.runtime, passed, ms_per_image=run.ms_per_image, outputs=tuple(c.to_dict() for c in compared),
        detections={**agreement.to_dict(), **(boxes or {})} if agreement is not None else None,
        map=copy.deepcopy(mapped),
        verdict=verdict, divergence=found, error_histogram=copy.deepcopy(histogram), repeat=repeat,
        reasons=tuple(reasons), reported_runtime=run.reported,
        steps=tuple(step_checks), op_errors=op_errors, images=images if ref is not full else None)
    return result, dets


def _content(path) -> bytes | str:
    """A file's identity by its bytes (``ops.tflite_file.digest``); by its path where it cannot be read."""
    from edgeport.ops.tflite_file import digest

    try:
        return digest(Path(path).read_bytes())
    except OSError:
        return str(path)


def _compared(run: RunOutput, variant: str, subject: ParitySubject, head: Head, ref: _Reference, *, whole: bool,
              inputs: np.ndarray | None = None) -> tuple:
    """A run's outputs as ``variant`` against the reference: the outputs (multiplied back where
    the file divides them), each output's comparison, the real images' outputs and boxes, the
    boxes' agreement, the error histogram and the mAP (``whole``: ``ref`` is every input, not a sample; else None)."""
    outputs = run.outputs
    if subject.normalised.get(variant):
        from edgeport.validate.parity.tensors import denormalise

        outputs = denormalise(outputs, subject.normalised[variant])
    if head.unordered_rows:  # top-k rows: a set, compared in the reference's order
        outputs = [align_rows(r, o) for r, o in zip(ref.outputs, outputs)]
    # a quantised file's tensors are judged on the images, not on the noise inputs: its calibration
    # never saw noise, and no board runs on it (a float file's are judged on both: a path no image takes)
    judged = ref.first(ref.n_real) if variant in QUANTISED and ref.n_real else ref
    compared = comparisons(subject.output_names, head, judged.outputs, [o[: judged.outputs[0].shape[0]] for o in outputs], variant)
    if variant in FLOAT_VARIANTS and any(not c.passed for c in compared) and inputs is not None:
        # beyond its relative tolerance: a float file is judged against float32's own error there too
        errors = ref.float32_errors(subject.reference_module, inputs)
        if errors is not None:
            compared = comparisons(subject.output_names, head, ref.outputs, outputs, variant, errors)
    real = [o[: ref.n_real] for o in outputs]
    dets = head.decode(real)
    agreement = (compare_detections(ref.detections, dets, ref.floor(variant))
                 if ref.detections is not None and dets is not None else None)
    boxes = box_errors(head, [o[: ref.n_real] for o in ref.outputs], real, _anchor_levels(subject), int(subject.inputs.shape[-1]),
                       DETECT.conf_thres) if agreement is not None else None
    mapped = _map_vs_truth(subject, head, real) if whole else None  # mAP on a sample of two images says nothing
    return outputs, compared, real, dets, agreement, boxes, error_histogram(ref.outputs, outputs), mapped


def _anchor_levels(subject: ParitySubject) -> tuple[int, ...]:
    """The strides the head's anchors run over: the outputs' own where each is a level, else the model's."""
    return subject.strides if subject.strides and all(subject.strides) else subject.levels


@dataclass
class _Steps:
    """A run a quantised row must match step for step: what it is, its outputs, each output's step."""

    against: str  # "the reference kernels on this file", "its int8 twin on the reference kernels"
    outputs: list[np.ndarray] | None  # None: that run was refused (``refused`` says why)
    steps: list[float]
    gated: bool = True  # False: reported, not held to STEPS_ALLOWED
    refused: str | None = None
    locate: Callable | None = None  # (row's runner, inputs) -> divergence.Parting or None: where they part

    def compare(self, outputs: list[np.ndarray]) -> dict:
        check = {"against": self.against, "max_steps": None, "allowed": STEPS_ALLOWED if self.gated else None}
        if self.outputs is None:
            return {**check, "passed": not self.gated, "reason": f"{self.against} did not run ({self.refused}): nothing to check it against"}
        n = min(len(outputs[0]), len(self.outputs[0])) if outputs and self.outputs else 0  # the images both computed
        if outputs and n < len(outputs[0]):
            check["images"] = n  # against a diagnostic's sample: said, as its row says it
        diffs = [np.abs(o[:n].astype(np.float64) - t[:n]).max() / s if o[:n].size and s > 0 else 0.0
                 for o, t, s in zip(outputs, self.outputs, self.steps, strict=True)]
        if not all(np.isfinite(d) for d in diffs):  # NaN or infinity on either side: no step count means anything
            return {**check, "passed": not self.gated, "reason": f"non-finite outputs: no step count against {self.against}"}
        worst = max((int(np.rint(d)) for d in diffs), default=0)
        return {**check, "max_steps": worst, "passed": not self.gated or worst <= STEPS_ALLOWED,
                "reason": f"computes {worst} quantisation steps apart from {self.against} (allowed {STEPS_ALLOWED})"}


def _step_checks(subject: ParitySubject, rows: list[PlannedRow], runs: dict, twins: dict, expected) -> dict:
    """(variant, runtime) -> the step checks of that row: a board's rows of a quantised file against
    the reference kernels on the same file; every row but XNNPACK's (its own rounding) of a
    variant with a twin against the twin."""
    from edgeport.validate.parity.divergence import first_parting
    from edgeport.validate.parity.tflite_runner import output_steps

    checks: dict = {}
    for variant, path in subject.tflite.items():
        reference = next((r for r in rows if r.variant == variant and r.runtime == "tflite-ref" and r.runner), None)
        if variant == "float32" or reference is None:
            continue
        steps = output_steps(path, expected)
        work = subject.workdir or Path(path).parent
        # a board's kernels against today's on the same file: a diagnostic that says where the two
        # part, never a verdict -- the board row is judged, like every row, by its outputs against
        # PyTorch (1.13.1 computes some held-out files 8 steps from today's kernels, and PyTorch's
        # outputs within 0.996 cosine on every channel; its LOGISTIC bug, 124 steps, also broke that)
        same_file = _steps_from(runs, reference.runner, "the reference kernels on this file", steps, False)
        same_file = replace(same_file, locate=lambda runner, x, path=path, work=work: first_parting(
            path, x, transport=getattr(runner, "transport", None), work=work) if getattr(runner, "transport", None) else None)
        twin = None
        if variant in twins:
            twin = _steps_from(runs, twins[variant], "its int8 twin on the reference kernels", steps,
                               subject.twin_gated.get(variant, True))
            twin = replace(twin, locate=lambda runner, x, path=path, twin_path=subject.twins[variant], work=work:
                           first_parting(path, x, twin=twin_path, work=work))
        for row in rows:
            if row.variant != variant or row.runner is None or row.runtime == "tflite":
                continue
            mine = []
            board = row.runtime.startswith("board:")
            if board:
                mine.append(same_file)
            if twin is not None:
                mine.append(replace(twin, gated=False) if board else twin)
            checks[(variant, row.runtime)] = tuple(mine)
    return checks


def _steps_from(runs: dict, runner: Runner, against: str, steps: list[float], gated: bool) -> _Steps:
    try:
        return _Steps(against, runs[runner.cache_key].result().outputs, steps, gated)
    except RuntimeRefused as exc:
        return _Steps(against, None, steps, gated, str(exc))


def _twin_runners(subject: ParitySubject, expected) -> dict[str, Runner]:
    from edgeport.validate.parity.tflite_runner import TFLiteRunner

    return {variant: TFLiteRunner(path, expected, kernels="reference", runtime="tflite-ref (int8 twin)")
            for variant, path in subject.twins.items() if variant in subject.tflite}


def run_parity(subject: ParitySubject, *, divergence: bool = True, plan=plan_rows) -> ParityResult:
    """Every runtime against PyTorch as loaded. ``plan(subject, expected_shapes)`` lists the rows
    (tests pass fakes)."""
    inputs = parity_inputs(subject.inputs, subject.seed)
    n_real = subject.inputs.shape[0]
    ref_runner = reference_runner(subject.reference_module)
    started = subject.early.taken(ref_runner, inputs) if subject.early is not None else None
    ref_run = started.result() if started is not None else ref_runner.run(inputs)
    head = subject.head if isinstance(subject.head, Head) else \
        resolve_head(subject.head, [o.shape for o in ref_run.outputs], subject.strides, subject.hints)
    ref_real = [o[:n_real] for o in ref_run.outputs]
    made = subject.early.made(ref_runner, inputs) if started is not None else None
    ref = made if isinstance(made, _Reference) and made.head == head and made.n_real == n_real else \
        _Reference(ref_run.outputs, n_real, head.decode(ref_real), head)
    results = [ResultRow("reference", "pytorch", True, ms_per_image=ref_run.ms_per_image, map=_map_vs_truth(subject, head, ref_real))]
    expected = output_shapes(ref_run.outputs)
    rows = plan(subject, expected)
    twins = _twin_runners(subject, expected)
    runs = execute([r.runner for r in rows if r.runner is not None] + list(twins.values()), inputs, subject.early)
    steps = _step_checks(subject, rows, runs, twins, expected)
    located: dict = {}  # what rows share, computed once: a file's analysis (by its bytes), a run's comparison (``judge``)
    sample = None
    first_of: dict = {}  # a run's cache key -> the runtime of the first row that shows it
    for row in rows:
        if row.runner is None:  # the board cannot run it: a failed row with the reasons
            results.append(ResultRow.not_runnable(row.variant, row.runtime, row.verdict))
            continue
        try:
            run = runs[row.runner.cache_key].result()
        except RuntimeRefused as exc:  # the runtime refused the file: its word is final
            results.append(ResultRow.not_runnable(row.variant, row.runtime, Verdict("runtime", False, (str(exc),))))
            continue
        result, dets = judge(row, run, subject, head, ref, inputs, located, divergence=divergence,
                             steps=steps.get((row.variant, row.runtime), ()))
        if row.runner.cache_key in first_of:
            result = replace(result, same_run_as=first_of[row.runner.cache_key])
        first_of.setdefault(row.runner.cache_key, row.runtime)
        results.append(result)
        if dets is not None and ref.detections is not None and (row.runtime.startswith("board:") or sample is None):
            # the boxes of the image PyTorch finds most on (the first of them), preferably as the board computes them
            shown = max(range(min(len(ref.detections), len(dets))), key=lambda i: len(ref.detections[i]))  # (a diagnostic: its images)
            sample = {"row": f"{row.variant} / {row.runtime}", "image": shown, "reference": _boxes(ref.detections[shown]),
                      "candidate": _boxes(dets[shown])}
    for variant, why in subject.not_converted.items():
        results.append(ResultRow.not_runnable(variant, "converter", Verdict("converter", False, (why,))))
    info = {"source": subject.inputs_source, "count": int(n_real), "random": RANDOM_INPUTS, "random_seed": subject.seed + 7,
            "shape": list(subject.inputs.shape[1:]), "labelled": bool(subject.ground_truth), "held_out": subject.held_out}
    return ParityResult(head, tuple(results), info, sample, _board_runtime(subject.board, results))


def _map_vs_truth(subject: ParitySubject, head: Head, outputs: list[np.ndarray]) -> dict | None:
    """mAP against ground truth, by the same protocol (``COCO_EVAL``) as the trainer's."""
    if not subject.ground_truth or not subject.letterboxes:
        return None
    dets = head.decode(outputs, COCO_EVAL)
    if dets is None:
        return None
    from edgeport.validate.metrics import coco_map

    mapped = [Detections(lb.to_original(d.boxes), d.scores, d.classes) for d, lb in zip(dets, subject.letterboxes)]
    return coco_map(subject.ground_truth, mapped)


def _board_runtime(board, results: list[ResultRow]) -> dict | None:
    """Whose word the board rows are: the board's own runtime (and which files it refused), or the
    emulator alone and how to install the real one."""
    if board is None or not board.has_real_runtime:
        return None
    from edgeport.validate.board.runtime import install_hint, transport_for

    transport = transport_for(board)
    refused = [r.variant for r in results if r.verdict is not None and r.verdict.judge == "runtime" and not r.verdict.runnable]
    return {"real": transport is not None, "via": getattr(transport, "what", None), "install": install_hint(board), "refused": refused}


def _boxes(d: Detections) -> list[dict]:
    return [{"box": [round(float(v), 2) for v in b], "score": round(float(s), 4), "class": int(c)}
            for b, s, c in zip(d.boxes, d.scores, d.classes)]


def _reference_tensors(subject: ParitySubject, x: np.ndarray):
    from edgeport.validate.parity.divergence import onnx_intermediates

    if subject.export_reference is None or subject.workdir is None:
        return None
    path = Path(subject.workdir) / "reference.onnx"
    if not path.exists():
        subject.export_reference(path)
    return onnx_intermediates(path, x)


def _op_errors(path: Path, float_file: Path, x: np.ndarray, work: Path | None) -> dict:
    """``op_errors.op_errors`` for the report: how many ops were judged and the worst, or why none were."""
    import tempfile

    from edgeport.validate.parity.op_errors import SHOWN, op_errors

    try:
        with tempfile.TemporaryDirectory(prefix="op-errors-", dir=work) as tmp:
            found = op_errors(path, float_file, x, Path(tmp))
    except Exception as exc:  # noqa: BLE001 - an aid: its failure is said, not raised
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}
    return {"judged": len(found), "worst": [e.to_dict() for e in found[:SHOWN]],
            "on": "the first image, the quantised file on the reference kernels: each op fed the float32 file's values of its "
                  "inputs (the optimised kernels') on their grid"}


def _divergence(reference_tensors, path: Path, x: np.ndarray, tol) -> dict | None:
    from edgeport.validate.parity.divergence import locate, onnx_intermediates, tflite_intermediates

    try:
        candidates = onnx_intermediates(path, x) if Path(path).suffix == ".onnx" else tflite_intermediates(path, x, "both")
    except RuntimeError:  # the reference kernels cannot run the file (they aborted a process: its row says so): not located
        return None
    return locate(reference_tensors, candidates, max_abs_rel=tol.max_abs_rel, min_cosine=tol.min_cosine).to_dict()
