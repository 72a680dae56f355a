"""Run every runtime on the same inputs and compare each against PyTorch as loaded.

Rows: the reference (PyTorch, the checkpoint's model as loaded), ``folded`` (PyTorch after
SyncBN revert, BN fold and upsample rewrites: a folding error shows up here first),
``onnx`` (ONNX Runtime), and for each TFLite variant: TFLite's optimised kernels (XNNPACK),
its reference kernels (BUILTIN_REF), and the board emulator. Inputs are real images plus
seeded random ones. Each failing row gets its divergence point. Builds the
``edgeport.parity/1`` report from typed rows (``report.ResultRow``); rendering lives in
``render.py``.
"""

from __future__ import annotations

import datetime as _dt
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from edgeport._lazy import installed_versions
from edgeport.checkpoints import weights_digest
from edgeport.models.decode import COCO_EVAL, DETECT, DecodeProtocol, Detections
from edgeport.models.heads import channel_groups, decode_head, resolve_head
from edgeport.validate.compare import TOLERANCES, compare_tensors, error_histogram
from edgeport.validate.detections import compare_detections
from edgeport.validate.report import SCHEMA, ResultRow
from edgeport.validate.runners import OnnxRuntimeRunner, RunOutput, RuntimeRefused, TorchRunner

VERSION_PACKAGES = ("edgeport", "torch", "onnx", "onnxruntime", "onnxslim", "onnx2tf", "tensorflow", "ai-edge-litert",
                    "tflite-micro", "numpy")
RANDOM_INPUTS = 2


@dataclass(frozen=True)
class ParitySubject:
    """What is being validated, and on what."""

    reference_module: object
    folded_module: object | None
    onnx_path: Path | None
    tflite: dict[str, Path]
    output_names: tuple[str, ...]
    strides: tuple[int, ...]
    inputs: np.ndarray  # real images, preprocessed as in training
    inputs_source: str
    model_info: dict = field(default_factory=dict)
    board: object = None  # BoardProfile; None: no emulator rows
    workdir: Path | None = None
    ground_truth: list | None = None  # train.data.Sample per real image, for mAP
    letterboxes: list | None = None  # models.preprocess.Letterbox per real image
    seed: int = 0
    # writes the reference model as ONNX to the path given (for the divergence analysis)
    export_reference: Callable[[Path], None] | None = None
    head: str | None = None  # models.heads.HEADS; None: auto, from the output shapes
    # variant -> per output, channel ranges the file divides (convert/int8_groups.py): multiplied back
    normalised: dict = field(default_factory=dict)
    # variant -> why the converter wrote no file: a failed row each, with that reason
    not_converted: dict = field(default_factory=dict)


def _detections(outputs: list[np.ndarray], head: str, strides: tuple[int, ...],
                protocol: DecodeProtocol = DETECT) -> list[Detections] | None:
    return decode_head(head, outputs, strides, protocol)  # None: no detector head, tensor parity only


def _map_vs_truth(subject: ParitySubject, head: str, outputs: list[np.ndarray]) -> dict | None:
    """mAP against ground truth, by the same protocol (``COCO_EVAL``) as the trainer's."""
    if not subject.ground_truth or not subject.letterboxes:
        return None
    dets = _detections(outputs, head, subject.strides, COCO_EVAL)
    if dets is None:
        return None
    from edgeport.validate.metrics import coco_map

    mapped = [Detections(lb.to_original(d.boxes), d.scores, d.classes) for d, lb in zip(dets, subject.letterboxes)]
    return coco_map(subject.ground_truth, mapped)


def _comparisons(names, head: str, refs: list[np.ndarray], gots: list[np.ndarray], tol) -> list:
    """Per output, and per channel group where one output mixes scales (box pixels against
    scores): a collapsed score channel then fails by name instead of hiding in the boxes' range."""
    out = []
    for name, r, g in zip(names, refs, gots, strict=True):
        out.append(compare_tensors(name, r, g, tol))
        for group, sl, axis in channel_groups(head, r.shape):
            index = (slice(None),) * axis + (sl,)
            out.append(compare_tensors(f"{name}[{group}]", r[index], g[index], tol))
    return out


def emulator_label(board) -> str:
    """The emulator row's runtime: ``board:NAME``, marked emulated when the board's real runtime
    lives elsewhere (installed, or over SSH) and so could say otherwise."""
    return f"board:{board.name} (emulated)" if board.has_real_runtime else f"board:{board.name}"


def _row_runners(subject: ParitySubject, expected_shapes) -> list[tuple[str, object, Path | None, dict | None]]:
    """(variant, runner or None, file the divergence analysis should read, emulator verdict)."""
    from edgeport.validate.board_runtime import BoardRunner, transport_for
    from edgeport.validate.emulator import build_emulator
    from edgeport.validate.tflite_runner import TFLiteRunner

    transport = transport_for(subject.board) if subject.board is not None else None

    rows: list[tuple[str, object, Path | None, dict | None]] = []
    if subject.folded_module is not None:
        rows.append(("folded", TorchRunner(subject.folded_module), subject.onnx_path, None))
    if subject.onnx_path is not None:
        rows.append(("onnx", OnnxRuntimeRunner(subject.onnx_path), subject.onnx_path, None))
    for variant, path in subject.tflite.items():
        rows.append((variant, TFLiteRunner(path, expected_shapes), path, None))
        rows.append((variant, TFLiteRunner(path, expected_shapes, kernels="reference"), path, None))
        if subject.board is not None:
            runner, verdict, emulated = build_emulator(path, subject.board, expected_shapes, subject.workdir)
            if runner is not None:
                runner.runtime = emulator_label(subject.board)
            rows.append((variant, runner, emulated, verdict.to_dict()))
            if transport is not None:
                # the board's own runtime, whatever the emulator's gate said: it is the judge. It keeps
                # no intermediates, so a divergence is located on the emulator's file.
                rows.append((variant, BoardRunner(transport, path, expected_shapes, board=subject.board.name,
                                                  workdir=subject.workdir), emulated, None))
    return rows


def _run_key(runner) -> object:
    """Rows that compute the same thing share one run: an emulator whose board changes nothing
    in the file computes the reference kernels' row (``cache_key``)."""
    return getattr(runner, "cache_key", None) or id(runner)


def _workers() -> int:
    """The cores this process may use."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def _run_rows(runners: list, inputs: np.ndarray) -> dict[object, Future]:
    """Every distinct run, finished: PyTorch's first, alone (it uses every core itself); then the
    others -- each on one thread, or in a child process -- side by side, at most one per core. A
    slow runner's images are shared out (``split``: the reference kernels), slow shares first, so
    the cores finish together: YOLOv8n's parity at 320 px takes 8 s instead of 11 on two cores.
    Each image is still timed on its own, but beside another run: on a small machine the
    reference kernels' ms/img reads up to a fifth higher than alone. A run's error
    (``RuntimeRefused``: the runtime's verdict) waits in its future for its row."""
    runs: dict[object, Future] = {}
    for runner in runners:
        if not runner.side_by_side and _run_key(runner) not in runs:
            runs[_run_key(runner)] = _settled(lambda r=runner: r.run(inputs))
    workers = _workers()
    shared: dict[object, list] = {}  # run -> (runner, image indices) per share
    for runner in runners:
        if _run_key(runner) not in runs and _run_key(runner) not in shared:
            pieces = runner.split(min(workers, inputs.shape[0]))
            shared[_run_key(runner)] = list(zip(pieces, np.array_split(np.arange(inputs.shape[0]), len(pieces))))
    stop = threading.Event()
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="edgeport-parity")
    try:
        jobs = {key: [pool.submit(piece.run, inputs[idx], stop) for piece, idx in pieces]
                for key, pieces in sorted(shared.items(), key=lambda kv: len(kv[1]) == 1)}  # split (slow) runs first
        wait([f for fs in jobs.values() for f in fs])
    finally:
        stop.set()  # an interrupt, or an error: the others stop at their next image
        pool.shutdown(wait=True, cancel_futures=True)
    for key, fs in jobs.items():
        runs[key] = _settled(lambda fs=fs: fs[0].result() if len(fs) == 1 else RunOutput.joined([f.result() for f in fs]))
    return runs


def _settled(compute) -> Future:
    """A finished future: ``compute()``'s result, or its ``RuntimeRefused``."""
    done: Future = Future()
    try:
        done.set_result(compute())
    except RuntimeRefused as exc:
        done.set_exception(exc)
    return done


def run_parity(subject: ParitySubject, *, divergence: bool = True, row_runners=_row_runners) -> dict:
    """Every runtime against PyTorch as loaded; returns the ``edgeport.parity/1`` report dict.

    ``row_runners(subject, expected_shapes)`` lists the rows to run (tests pass fakes).
    """
    rng = np.random.default_rng(subject.seed + 7)
    noise = rng.random((RANDOM_INPUTS, *subject.inputs.shape[1:]), dtype=np.float32)
    all_inputs = np.concatenate([subject.inputs, noise])
    n_real = subject.inputs.shape[0]
    ref_run = TorchRunner(subject.reference_module).run(all_inputs)
    ref_out = ref_run.outputs
    ref_real = [o[:n_real] for o in ref_out]
    head = resolve_head(subject.head, [o.shape for o in ref_out], subject.strides)
    ref_dets = _detections(ref_real, head, subject.strides)
    expected_shapes = [(1, *o.shape[1:]) for o in ref_out]
    results = [ResultRow("reference", "pytorch", True, ms_per_image=ref_run.ms_per_image, map=_map_vs_truth(subject, head, ref_real))]
    reference_tensors = None
    sample = None
    located: dict = {}  # analysis file -> where it diverges: rows on one file share one analysis
    rows = row_runners(subject, expected_shapes)
    runs = _run_rows([runner for _, runner, _, _ in rows if runner is not None], all_inputs)
    for variant, runner, analysis_file, verdict in rows:
        tol = TOLERANCES[variant]
        if runner is None:  # the board cannot run it: a failed row with the reasons
            results.append(ResultRow.not_runnable(variant, emulator_label(subject.board), verdict))
            continue
        try:
            run = runs[_run_key(runner)].result()
        except RuntimeRefused as exc:  # the board's own runtime refused the file: its word is final
            results.append(ResultRow.not_runnable(variant, runner.runtime, {"runnable": False, "reasons": [str(exc)],
                                                                             "judge": "runtime"}))
            continue
        real = getattr(runner, "board_runtime", False)
        if real:
            verdict = {"runnable": True, "reasons": [], "judge": "runtime"}
        if subject.normalised.get(variant):
            from edgeport.validate.tensors import denormalise

            run = RunOutput(denormalise(run.outputs, subject.normalised[variant]), run.ms_per_image)
        comparisons = _comparisons(subject.output_names, head, ref_out, run.outputs, tol)
        real_images = [o[:n_real] for o in run.outputs]
        dets = _detections(real_images, head, subject.strides)
        passed = all(c.passed for c in comparisons)
        found = None
        if divergence and not passed and analysis_file is not None:
            # where it stops computing what the trained model computes: only for rows that fail
            if reference_tensors is None:
                reference_tensors = _reference_tensors(subject, all_inputs[:1])
            if analysis_file not in located:
                located[analysis_file] = (_divergence(reference_tensors, analysis_file, all_inputs[:1], tol)
                                          if reference_tensors else None)
            found = dict(located[analysis_file]) if located[analysis_file] is not None else None
            if found is not None and real:
                found["located_on"] = "the emulator: the board's runtime exposes no intermediate tensors"
        results.append(ResultRow(
            variant, runner.runtime, passed, ms_per_image=run.ms_per_image, outputs=tuple(c.to_dict() for c in comparisons),
            detections=compare_detections(ref_dets, dets).to_dict() if ref_dets is not None and dets is not None else None,
            map=_map_vs_truth(subject, head, real_images), emulator=verdict, divergence=found,
            error_histogram=error_histogram(ref_out, run.outputs),
        ))
        if dets is not None and ref_dets is not None and (runner.runtime.startswith("board:") or sample is None):
            # the first image's boxes, preferably as the board computes them
            sample = {"row": f"{variant} / {runner.runtime}", "image": 0, "reference": _boxes(ref_dets[0]), "candidate": _boxes(dets[0])}
    for variant, why in subject.not_converted.items():
        results.append(ResultRow.not_runnable(variant, "converter", {"runnable": False, "reasons": [why], "judge": "converter"}))
    artifacts = {}
    for label, path in [("model.onnx", subject.onnx_path), *[(f"model_{v}.tflite", p) for v, p in subject.tflite.items()]]:
        if path is not None:
            artifacts[label] = {"bytes": Path(path).stat().st_size}
    return {
        "schema": SCHEMA,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "passed": all(r.passed for r in results),
        "model": dict(subject.model_info, weights_sha256=weights_digest(subject.reference_module), outputs=list(subject.output_names),
                      strides=list(subject.strides), head=head),
        "inputs": {"source": subject.inputs_source, "count": int(n_real), "random": RANDOM_INPUTS,
                   "random_seed": subject.seed + 7, "shape": list(subject.inputs.shape[1:]),
                   "labelled": bool(subject.ground_truth)},
        "reference": {"runtime": "pytorch", "what": "the checkpoint's model as loaded, before SyncBN revert and BN fold"},
        "tolerances": {v: {"max_abs_rel": t.max_abs_rel, "min_cosine": t.min_cosine} for v, t in TOLERANCES.items()},
        "versions": installed_versions(VERSION_PACKAGES),
        "artifacts": artifacts,
        "results": [r.to_dict() for r in results],
        "sample": sample,
        "board_runtime": _board_runtime(subject.board),
    }


def _board_runtime(board) -> dict | None:
    """Whose word the board rows are: the board's own runtime, or the emulator alone and how
    to install the real one."""
    if board is None or not board.has_real_runtime:
        return None
    from edgeport.validate.board_runtime import install_hint, transport_for

    transport = transport_for(board)
    return {"real": transport is not None, "via": getattr(transport, "what", None), "install": install_hint(board)}


def _boxes(d: Detections) -> list[dict]:
    return [{"box": [round(float(v), 2) for v in b], "score": round(float(s), 4), "class": int(c)}
            for b, s, c in zip(d.boxes, d.scores, d.classes)]


def _reference_tensors(subject: ParitySubject, x: np.ndarray):
    from edgeport.validate.divergence import onnx_intermediates

    if subject.export_reference is None or subject.workdir is None:
        return None
    path = Path(subject.workdir) / "reference.onnx"
    if not path.exists():
        subject.export_reference(path)
    return onnx_intermediates(path, x)


def _divergence(reference_tensors, path: Path, x: np.ndarray, tol) -> dict:
    from edgeport.validate.divergence import locate, onnx_intermediates, tflite_intermediates

    candidates = onnx_intermediates(path, x) if Path(path).suffix == ".onnx" else tflite_intermediates(path, x)
    return locate(reference_tensors, candidates, max_abs_rel=tol.max_abs_rel, min_cosine=tol.min_cosine).to_dict()
