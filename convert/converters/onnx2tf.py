"""onnx2tf, driven: ONNX -> TFLite float32 and full-integer int8, in a child process, offline.

Two onnx2tf generations sit behind one interface (``Onnx2tfBackend``), chosen by what is
installed, which the Python version decides (pyproject):
- 2.x (Python 3.12+), the maintained line: writes the flatbuffer directly
  (``--tflite_backend flatbuffer_direct``), no TensorFlow;
- 1.28.x (Python 3.11), the deprecated line: converts through TensorFlow.
Both take the same flags for what edgeport asks (float32 + full-integer int8 with int8
input and output, per-channel, our calibration set) and write the same file names.

onnx2tf runs in a child process: it calls ``sys.exit`` on errors, prints a great deal,
and (1.28) imports TensorFlow, none of which should happen inside the caller's process
(a run starts it at once: ``warm_command``).

Offline, on purpose: onnx2tf 1.28 downloads sample images whenever an input looks like an NHWC
image, unless ``ONNX2TF_SAMPLE_FILE`` is in its working directory. We write that file from *our*
calibration images, pass the int8 calibration set with ``-cind``, and point the child's HTTP(S)
proxy at a closed local port, so any download fails at once.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from edgeport.convert.converters.base import _ANSI, Conversion, Converter, condense, offline_env
from edgeport.errors import ConversionError, MissingDependencyError

if TYPE_CHECKING:
    from edgeport.convert.context import RunContext

ONNX2TF_SAMPLE_FILE = "calibration_image_sample_data_20x128x128x3_float32.npy"
CALIB_FILE = "calib_nhwc.npy"
# variant name -> file onnx2tf writes for model.onnx
ONNX2TF_OUTPUTS = {"float32": "model_float32.tflite", "int8": "model_full_integer_quant.tflite"}
LEAN_MODULE = "edgeport.convert.converters.onnx2tf_lean"
# the lean driver's flag: import first, then take one job from standard input (``warm_command``)
AWAIT_JOB = "--await-job"
# the lean driver's own flag, taken off before onnx2tf reads its arguments: the variants the run
# ships (``ONNX2TF_OUTPUTS``' names); without it, every variant onnx2tf is asked for
SHIPS = "--ships"


def write_calibration(work: Path, calib_nchw: np.ndarray) -> None:
    """Write onnx2tf's sample-data file and our -cind calibration file (NHWC, [0, 1])."""
    from PIL import Image

    nhwc = np.ascontiguousarray(calib_nchw.transpose(0, 2, 3, 1), dtype=np.float32)
    save_npy(work / CALIB_FILE, nhwc)
    if nhwc.shape[-1] != 3:
        return  # onnx2tf only fetches sample images for 3-channel inputs
    # onnx2tf's own sanity check wants exactly 20 images of 128x128: resize ours
    idx = np.arange(20) % len(nhwc)
    small = np.stack(
        [
            np.asarray(Image.fromarray((nhwc[i] * 255).round().astype(np.uint8)).resize((128, 128), Image.BILINEAR))
            for i in idx
        ]
    ).astype(np.float32) / 255.0
    save_npy(work / ONNX2TF_SAMPLE_FILE, small)


def share_calibration(written: Path, work: Path, calib_nchw: np.ndarray) -> None:
    """The calibration files ``write_calibration`` wrote from ``calib_nchw`` in ``written``, in
    ``work`` too: linked, not written again (hundreds of MB at 640 px, which onnx2tf only reads).
    Where the file system links no file, written again."""
    names = [n for n in (CALIB_FILE, ONNX2TF_SAMPLE_FILE) if (written / n).is_file()]
    try:
        for name in names:
            os.link(written / name, work / name)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EACCES):
            raise
        for name in names:
            (work / name).unlink(missing_ok=True)
        write_calibration(work, calib_nchw)


def save_npy(path: Path, array: np.ndarray) -> None:
    """``np.save``, whose short write on a full disk is an OSError with neither an errno nor a file
    name ("884736 requested and 457696 written"): raised as the full disk it is, naming the file,
    so the CLI says so (exit 2) as it does for every other write."""
    try:
        np.save(path, array)
    except OSError as exc:
        if exc.errno is None:  # numpy's own short-write error: the disk (or the quota) is full
            raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} ({exc})", str(path)) from exc
        if not exc.filename:
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise


@dataclass(frozen=True)
class Onnx2tfBackend:
    """The installed onnx2tf: its version and how it writes TFLite."""

    version: str

    @property
    def generation(self) -> int:
        return int(self.version.split(".")[0])

    @property
    def writer(self) -> str:
        return "flatbuffer_direct" if self.generation >= 2 else "tensorflow"

    @property
    def checks_layouts_slowly(self) -> bool:
        """1.28's strict mode settles each ambiguous op's layout by running the TensorFlow graph up
        to that op and comparing with ONNX Runtime: once per such op, so its cost grows with the
        square of the depth; without it, the same file's outputs (docs/measured.md). 2.x
        (``flatbuffer_direct``) has no such pass: its ``-dsm`` changes nothing, byte for byte."""
        return self.generation < 2

    @property
    def keeps_validated_files(self) -> bool:
        """2.x checks each quantised file in an interpreter and moves it into place before it
        starts the next variant, so a later variant's failure (its int16-activation files,
        which edgeport does not use) leaves the files already written good. 1.28 exits
        non-zero only when the run as a whole failed."""
        return self.generation >= 2

    @property
    def int8_granularities(self) -> tuple[str, ...]:
        """Per-channel first; 2.x's per-channel quantiser fails where per-tensor does not (the
        bias of every depthwise convolution gets an out-of-range quantized_dimension)."""
        return ("per-channel", "per-tensor") if self.generation >= 2 else ("per-channel",)

    def prepare(self, onnx_path: Path, work: Path, *, int8: bool) -> Path:
        """The graph this line converts: for 2.x, a copy with the exact rewrites that steer it
        around its known bugs (``onnx_rewrites``; for int8, its quantiser's too), named like the
        original, since onnx2tf names its files after it; 1.28 takes the file as it is."""
        if self.generation < 2:
            return onnx_path
        from edgeport.convert.converters.onnx_rewrites import INT8_REWRITES, REWRITES, rewrite_file

        copy = work / onnx_path.name
        changed = rewrite_file(onnx_path, copy, INT8_REWRITES if int8 else REWRITES)
        return copy if changed and any(changed.values()) else onnx_path


def installed_backend() -> Onnx2tfBackend:
    import importlib.metadata as md

    try:
        return Onnx2tfBackend(md.version("onnx2tf"))
    except md.PackageNotFoundError as exc:
        raise MissingDependencyError("onnx2tf is not installed (needed to write TFLite); run `make setup`") from exc


def onnx2tf_command(onnx_path: Path, out_dir: Path, *, int8: bool, input_name: str, backend: Onnx2tfBackend | None = None,
                    python: str = sys.executable, granularity: str = "per-channel", lean: bool = True,
                    ships: tuple[str, ...] | None = None, fast: bool = False) -> list[str]:
    """``lean=False``: onnx2tf itself, with every file it writes (benchmarks' peers). ``ships``: the
    variants the run's caller takes (the lean driver skips the others' work); default, all asked for.
    ``fast``: without 1.28's strict mode (``-dsm``), whose files the caller checks (``FAST_CHECK_IMAGES``)."""
    backend = backend or installed_backend()
    cmd = [
        python, "-m", LEAN_MODULE if lean else "onnx2tf",
        *([SHIPS, ",".join(ships)] if lean and ships is not None else []),
        "-i", str(onnx_path),
        "-o", str(out_dir),
        "-coion",  # keep the ONNX input/output names
        "-nuo",  # the graph is already simplified by onnxslim
        "-n",
        # 2.x: say which writer, so a changed default never changes what edgeport ships
        *(["-tb", "flatbuffer_direct"] if backend.generation >= 2 else []),
        *(["-dsm"] if fast and backend.checks_layouts_slowly else []),
    ]
    if int8:
        # inputs are already in [0, 1]: mean 0, std 1 so onnx2tf does not renormalise
        cmd += ["-oiqt", "-qt", granularity, "-iqd", "int8", "-oqd", "int8",
                "-cind", input_name, CALIB_FILE, "[[[[0.0,0.0,0.0]]]]", "[[[[1.0,1.0,1.0]]]]"]
    return cmd


class Onnx2tfFailed(ConversionError):
    """onnx2tf exited non-zero or did not write a file it had to write: at which ONNX node, where it
    says, and which converter to try instead (``generation``: the line that failed)."""

    def __init__(self, returncode: int, output: str, missing: list[str], generation: int | None = None):
        self.returncode, self.output = returncode, output
        what = f"exit {returncode}" if returncode else f"wrote no {', '.join(missing)}"
        node = [re.sub(r"^wa/", "/", n) for n in re.findall(r"onnx_op_name: (\S+)", _ANSI.sub("", output))]  # onnx2tf's wa/: a /
        at = f" at the ONNX node {node[-1][:80]}" if node else ""
        other = ("; try onnx2tf 2.x (make setup PYTHON=python3.12 VENV=.venv312) or --converter litert-torch"
                 if generation == 1 else "; try --converter litert-torch" if generation else "")
        cause = condense(output)
        if node and len(cause) > 64:  # room for what to try: the cause cut at a word
            cause = cause[:61].rsplit(" ", 1)[0] + " ..."
        super().__init__(f"onnx2tf failed ({what}){at}: {cause}{other if node else ''}")

    def with_log(self) -> ConversionError:
        """The error for a run that ends here: the output folder is removed, so the full log is
        kept in the system temp dir and named."""
        fd, log = tempfile.mkstemp(prefix="edgeport-onnx2tf-", suffix=".log")
        with os.fdopen(fd, "w") as f:
            f.write(self.output)
        return ConversionError(f"{self}; full log: {log}")


class FastRunDiffers(ConversionError):
    """A run without strict mode wrote a float32 file that computes something else than ONNX
    Runtime on the same graph, or that cannot be checked: the conversion is done again, strict."""


# the first calibration images a fast run's float32 file is checked on, against ONNX Runtime, to parity's
# float32 tolerance. A layout onnx2tf guessed wrong moves every value after it; its float32 and int8
# files are one TensorFlow graph, so the float32 file answers for both
FAST_CHECK_IMAGES = 2


def graph_outputs(onnx_path: Path, images: np.ndarray) -> list[np.ndarray] | Exception:
    """What the check holds a fast run's file to: ONNX Runtime's outputs of ``onnx_path`` on the
    first ``FAST_CHECK_IMAGES`` (each invoked once), or what stopped it."""
    from edgeport.validate.parity.runners import OnnxRuntimeRunner

    runner = OnnxRuntimeRunner(onnx_path)
    runner.once = True
    try:
        return runner.run(np.ascontiguousarray(images[:FAST_CHECK_IMAGES], np.float32)).outputs
    except Exception as exc:  # noqa: BLE001 -- said by the check
        return exc


def fast_run_differs(onnx_path: Path, tflite: Path, images: np.ndarray, graph: list | Exception | None = None) -> str | None:
    """Why ``tflite`` (float32) cannot stand for the graph ``onnx_path``, or None; ``graph``: its
    ``graph_outputs``, where computed already."""
    from edgeport.models.outputs import output_shapes
    from edgeport.validate.parity.compare import FLOAT32, compare_tensors
    from edgeport.validate.parity.tflite_runner import TFLiteRunner

    x = np.ascontiguousarray(images[:FAST_CHECK_IMAGES], np.float32)
    try:
        ref = graph_outputs(onnx_path, images) if graph is None else graph
        if isinstance(ref, Exception):
            raise ref
        runner = TFLiteRunner(tflite, output_shapes(ref))
        runner.once = True
        got = runner.run(x).outputs
    except Exception as exc:  # noqa: BLE001 -- whatever stops the check (a runtime that refuses either file): unchecked, so strict
        return f"it cannot be checked ({condense(f'{type(exc).__name__}: {exc}')})"
    for k, (r, g) in enumerate(zip(ref, got)):
        compared = compare_tensors(f"output {k}", r, g, FLOAT32)
        if not compared.passed:
            return f"output {k} differs from ONNX Runtime's (max |difference| {compared.metrics.max_abs:.3g})"
    return None


def warm_command() -> list[str] | None:
    """The onnx2tf child a run starts at once (``RunContext.warm``), importing onnx2tf (and
    TensorFlow, on 1.28) while the caller is still importing torch and exporting; the run's first
    conversion takes it (``Onnx2tfRun``). None without onnx2tf installed: the conversion says what
    is missing."""
    try:
        installed_backend()
    except MissingDependencyError:
        return None
    return [sys.executable, "-m", LEAN_MODULE, AWAIT_JOB]


class Onnx2tfRun:
    """One onnx2tf child process, started at once (or the run's warm one, ``warm_command``). Its output
    goes to ``onnx2tf.log`` in its work folder (no pipes), so two runs can proceed side by side;
    ``kill`` ends an unwanted run (Ctrl-C, an error elsewhere), so no child outlives the run and
    writes into a folder being removed."""

    def __init__(self, onnx_path: Path, calib: np.ndarray, work: Path, *, int8: bool, input_name: str,
                 backend: Onnx2tfBackend | None = None, granularity: str = "per-channel", ships: tuple[str, ...] | None = None,
                 fast: bool = False, calibrated: Path | None = None, context: RunContext | None = None):
        """``ships``: the variants taken from this run (default: float32, and int8 when asked for).
        ``fast``: without strict mode where it costs (``checks_layouts_slowly``); ``finish`` then
        checks the run's float32 file (written for that, if not shipped) against ONNX Runtime.
        ``calibrated``: a folder where ``write_calibration`` wrote the same ``calib``'s files, shared."""
        work.mkdir(parents=True, exist_ok=True)
        if calibrated is not None:
            share_calibration(calibrated, work, calib)
        else:
            write_calibration(work, calib)
        self.work = work.resolve()
        self.backend = backend or installed_backend()
        self.ships = ships or (("float32", "int8") if int8 else ("float32",))
        self.fast = fast and self.backend.checks_layouts_slowly
        self.check_images = calib[:FAST_CHECK_IMAGES]
        if self.fast and "float32" not in self.ships:
            self.ships = ("float32", *self.ships)
        self.log = self.work / "onnx2tf.log"
        self.failure: Onnx2tfFailed | None = None  # what failed in a run whose files were still taken
        self.onnx_path = onnx_path = self.backend.prepare(onnx_path.resolve(), self.work, int8=int8)
        cmd = onnx2tf_command(onnx_path, self.work / "tf", int8=int8, input_name=input_name, backend=self.backend,
                              granularity=granularity, ships=self.ships, fast=self.fast)
        self.t0 = time.perf_counter()
        job = {"argv": cmd[3:], "cwd": str(self.work), "log": str(self.log)}  # (cmd: python -m LEAN_MODULE ...)
        warm = context.take([*cmd[:3], AWAIT_JOB], json.dumps(job)) if context and cmd[1:3] == ["-m", LEAN_MODULE] else None
        if warm is not None:
            self.proc = warm.proc
            return
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(cmd, cwd=self.work, env=offline_env(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)

    def finish(self, timeout_s: float, require: tuple[str, ...] | None = None) -> tuple[dict[str, Path], float]:
        """{variant: tflite path} and the wall time. Raises ``Onnx2tfFailed`` when a variant in
        ``require`` (default: every variant asked for) was not written, or onnx2tf failed and its
        line does not keep validated files; otherwise ``failure`` says what else failed."""
        graph = graph_outputs(self.onnx_path, self.check_images) if self.fast else None  # (while the child converts)
        try:
            returncode = self.proc.wait(timeout=max(1.0, timeout_s - (time.perf_counter() - self.t0)))
        except subprocess.TimeoutExpired as exc:
            self.kill()
            raise ConversionError(f"onnx2tf did not finish within {timeout_s:.0f} s; the model may be too large") from exc
        elapsed = time.perf_counter() - self.t0
        wanted = {k: self.work / "tf" / v for k, v in ONNX2TF_OUTPUTS.items() if k in self.ships}
        written = {k: p for k, p in wanted.items() if p.is_file()}
        missing = [k for k in (wanted if require is None else require) if k not in written]
        if missing or (returncode != 0 and not self.backend.keeps_validated_files):
            raise Onnx2tfFailed(returncode, self.log.read_text(errors="replace"), missing, self.backend.generation)
        if returncode != 0 or len(written) < len(wanted):
            self.failure = Onnx2tfFailed(returncode, self.log.read_text(errors="replace"), sorted(set(wanted) - set(written)),
                                         self.backend.generation)
        if self.fast:
            if "float32" not in written:
                raise FastRunDiffers("onnx2tf without strict mode wrote no float32 file to check the run by")
            why = fast_run_differs(self.onnx_path, written["float32"], self.check_images, graph)
            if why is not None:
                raise FastRunDiffers(f"onnx2tf without strict mode wrote a float32 file that {why}")
        return written, elapsed

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def run_onnx2tf(onnx_path: Path, calib: np.ndarray, work: Path, *, int8: bool, input_name: str, timeout_s: float,
                backend: Onnx2tfBackend | None = None, require: tuple[str, ...] | None = None,
                granularity: str = "per-channel", ships: tuple[str, ...] | None = None,
                context: RunContext | None = None) -> tuple[dict[str, Path], float]:
    """Convert; return {variant: tflite path} and onnx2tf's wall time in seconds (``Onnx2tfRun``)."""
    run = Onnx2tfRun(onnx_path, calib, work, int8=int8, input_name=input_name, backend=backend, granularity=granularity,
                     ships=ships, context=context)
    try:
        return run.finish(timeout_s, require)
    finally:
        run.kill()


def convert_variants(onnx_path: Path, int8_onnx: Path | None, calib: np.ndarray, work: Path, *, input_name: str,
                     timeout_s: float, backend: Onnx2tfBackend, granularities: tuple[str, ...] | None = None,
                     meanwhile: Callable[[dict[str, Path]], None] | None = None, calibrated: Path | None = None,
                     context: RunContext | None = None) -> Conversion:
    """float32 from ``onnx_path``, and int8 from ``int8_onnx`` when given (the same file, or one
    with its output groups normalised, converted side by side).

    Only a float32 that cannot be written ends the run. An int8 is tried in each of ``granularities``
    in turn (default: the line's; ``("per-tensor",)`` for a uint8 board; a fallback noted), and
    otherwise reported as a failed row with the converter's reason, beside a float32 that ships.

    Where strict mode costs (1.28: ``checks_layouts_slowly``), each run goes without it first and
    its float32 file is checked against ONNX Runtime (``fast_run_differs``); a run that fails, or
    fails the check, and the conversion is done again in strict mode (noted).

    ``meanwhile`` (``Converter.convert``): called once the runs have started, and again with the
    float32 file while the int8 run goes on. ``calibrated``: a folder holding ``calib``'s
    calibration files already (``Ahead``), which every run shares.
    """
    t0 = time.perf_counter()
    runs = functools.partial(_convert_variants, onnx_path, int8_onnx, calib, input_name=input_name, backend=backend,
                             granularities=granularities, meanwhile=meanwhile, calibrated=calibrated, context=context)
    if backend.checks_layouts_slowly:
        try:
            return runs(work / "fast", timeout_s=timeout_s, fast=True)
        except (FastRunDiffers, Onnx2tfFailed) as exc:
            why = str(exc).split("; full log: ")[0]
        timeout_s -= time.perf_counter() - t0
    conversion = runs(work, timeout_s=timeout_s, fast=False)
    if backend.checks_layouts_slowly:
        strict = f"in onnx2tf's strict mode (without it: {why})"
        notes = {v: f"{strict}; {conversion.notes[v]}" if v in conversion.notes else strict for v in conversion.files}
        conversion = dataclasses.replace(conversion, notes=notes, seconds=time.perf_counter() - t0)
    return conversion


def _convert_variants(onnx_path: Path, int8_onnx: Path | None, calib: np.ndarray, work: Path, *, input_name: str,
                      timeout_s: float, backend: Onnx2tfBackend, granularities: tuple[str, ...] | None, fast: bool,
                      meanwhile: Callable[[dict[str, Path]], None] | None = None, calibrated: Path | None = None,
                      context: RunContext | None = None) -> Conversion:
    meanwhile = meanwhile or (lambda files: None)
    granularities = granularities or backend.int8_granularities
    together = int8_onnx == onnx_path  # one run writes both (1.28 only warns when its int8 fails)
    runs: list[Onnx2tfRun] = []  # float32's run, then int8's where it is another
    notes: dict[str, str] = {}
    why = None  # why there is no int8 yet
    try:
        if int8_onnx is not None and not together:
            # int8's run, which calibrates and takes the longer, started first: it takes the child
            # that imported while the passes ran (``warm_command``), and float32's a fresh one
            runs.append(Onnx2tfRun(int8_onnx, calib, work / "onnx2tf-int8", int8=True, input_name=input_name,
                                   backend=backend, granularity=granularities[0], ships=("int8",), fast=fast,
                                   calibrated=calibrated, context=context))
        runs.insert(0, Onnx2tfRun(onnx_path, calib, work / "onnx2tf", int8=together, input_name=input_name, backend=backend,
                                  granularity=granularities[0], fast=fast, calibrated=calibrated or (runs[0].work if runs else None),
                                  context=context))
        meanwhile({})
        try:
            files, seconds = runs[0].finish(timeout_s, require=("float32",))
        except Onnx2tfFailed as exc:
            if "No space left on device" in exc.output:  # the disk filled as it wrote: the user's disk (exit 2), not the converter
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(runs[0].work)) from exc
            if fast:
                raise  # done again in strict mode (``convert_variants``), whose failure is the one reported
            raise exc.with_log() from exc
        if together and "int8" not in files:
            why = str(runs[0].failure)
        elif len(runs) == 2:
            meanwhile(dict(files))
            try:
                more, more_s = runs[1].finish(timeout_s, require=("int8",))
                files["int8"], seconds = more["int8"], max(seconds, more_s)
            except Onnx2tfFailed as exc:
                why = str(exc)
        for granularity in granularities[1:]:
            if why is None:
                break
            try:
                more, more_s = run_onnx2tf(int8_onnx, calib, work / f"onnx2tf-int8-{granularity}", int8=True,
                                           input_name=input_name, timeout_s=timeout_s, backend=backend,
                                           require=("int8",), granularity=granularity, ships=("int8",))
                files["int8"], seconds = more["int8"], seconds + more_s
                notes["int8"] = f"{granularity} ({granularities[0]} failed: {why})"
                why = None
            except Onnx2tfFailed as exc:
                why = f"{why}; {granularity} too: {exc}"
    finally:
        for run in runs:
            run.kill()
    return Conversion(files, {"int8": why} if why else {}, notes, seconds)


class Ahead:
    """The calibration files every onnx2tf run reads (``write_calibration``, and onnx2tf's 20 sample
    images), written on a thread while the graph is exported (``Onnx2tf.begin``), not between the
    export and the int8 run's start. (int8's group plans run the model, and stay after the export: a
    model may branch on ``torch.onnx.is_in_onnx_export``, which the export sets for the whole process.)"""

    def __init__(self, prepared, work: Path, context: RunContext):
        import threading
        from concurrent.futures import Future

        self.folder, self.prepared, self._done = work / "onnx2tf-calibration", prepared, Future()
        self._thread = threading.Thread(target=self._write, args=(prepared.calib,), name="edgeport-onnx2tf-ahead", daemon=True)
        self._thread.start()
        context.own(self._thread.join)  # where a pass fails before the conversion takes it: nothing writes after the run

    def _write(self, calib: np.ndarray) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_calibration(self.folder, calib)
            self._done.set_result(self.folder)
        except BaseException as exc:  # noqa: BLE001 -- raised where the conversion takes it (a full disk: exit 2)
            self._done.set_exception(exc)

    def result(self) -> Path:
        """The folder holding the calibration files (``Onnx2tfRun``'s ``calibrated``), once written."""
        return self._done.result()


class Onnx2tf(Converter):
    """``--converter onnx2tf`` (the default): from the exported ONNX graph; int8 from the graph with
    each output's channel groups scaled apart where one output mixes scales (``int8_groups.py``)."""

    name, source = "onnx2tf", "from the ONNX graph (default)"

    def version(self) -> str:
        try:
            return installed_backend().version
        except MissingDependencyError:
            return "not installed"

    def info(self) -> dict:
        backend = installed_backend()
        return {"name": self.name, "version": backend.version, "writer": backend.writer}

    def describe(self) -> str:
        backend = installed_backend()
        return f"onnx2tf {backend.version} ({backend.writer})"

    def require(self) -> None:
        installed_backend()

    def where(self) -> str:
        return "in this environment"

    def warm(self, context: RunContext) -> None:
        command = warm_command()
        if command is not None:
            context.warm(command, offline_env())

    def begin(self, prepared, work: Path, *, quantised: str | None, timeout_s: float, context: RunContext) -> Ahead:
        return Ahead(prepared, work, context)

    def convert(self, exported, work: Path, *, quantised: str | None, timeout_s: float, context: RunContext,
                meanwhile: Callable[[dict[str, Path]], None] | None = None) -> Conversion:
        prepared, backend = exported.prepared, installed_backend()
        plans, int8_onnx = None, exported.onnx if quantised else None
        ahead = getattr(exported, "begun", None)
        # written while the graph was exported, from these very images (not those a pass has replaced since)
        calibrated = ahead.result() if isinstance(ahead, Ahead) and ahead.prepared is prepared else None
        if int8_onnx is not None:
            from edgeport.convert.converters.int8_groups import normalise_onnx, plan_for

            plans = plan_for(prepared)
            if plans is not None:
                normalised = work / "int8" / "model.onnx"  # onnx2tf names what it writes after the file
                normalised.parent.mkdir(parents=True, exist_ok=True)
                if normalise_onnx(exported.onnx, normalised, plans):
                    int8_onnx = normalised
                else:
                    plans = None  # the groups cannot be scaled apart: int8 as it is; parity says what it costs
        # uint8 kernels have one scale per tensor: its int8 file is quantised so
        granularities = ("per-tensor",) if quantised == "uint8" else None
        conversion = convert_variants(exported.onnx, int8_onnx, prepared.calib, work, input_name=exported.input_name,
                                      timeout_s=timeout_s, backend=backend, granularities=granularities, meanwhile=meanwhile,
                                      calibrated=calibrated, context=context)
        return dataclasses.replace(conversion, plans=plans if "int8" in conversion.files else None)
