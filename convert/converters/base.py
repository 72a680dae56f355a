"""The converter interface: what writes the TFLite files (``--converter``).

Two converters implement it: onnx2tf (``convert/converters/onnx2tf.py``: from the exported ONNX graph, in
a child process; the default) and litert-torch (``convert/converters/litert.py``: from the PyTorch model,
in its own environment). Whatever asks "which converter?" asks ``converter(name)``: the
conversion pass, the cross-check (``other``), the convert command (what to require and start
before the run) and ``edgeport converters``; both are in ``convert/converters/registry.py``. Adding a
converter is a class implementing ``Converter``, and its name in ``NAMES`` and ``converters.py``.
"""

from __future__ import annotations

import abc
import contextlib
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar

NAMES = ("onnx2tf", "litert-torch")  # (cli.py's choices: this module imports nothing heavy)
_CLOSED_PORT_PROXY = "http://127.0.0.1:9"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class Conversion:
    """What a converter wrote: the files (variant -> path), why a variant has none, how a variant
    was made when not as asked first, the converter's wall time, and (onnx2tf) the int8 output
    groups' normalisation (``convert/converters/int8_groups.py``), which parity multiplies back."""

    files: dict[str, Path]
    not_written: dict[str, str]
    notes: dict[str, str]
    seconds: float
    plans: tuple | None = None


def offline_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HTTP_PROXY=_CLOSED_PORT_PROXY,
        HTTPS_PROXY=_CLOSED_PORT_PROXY,
        http_proxy=_CLOSED_PORT_PROXY,
        https_proxy=_CLOSED_PORT_PROXY,
        NO_PROXY="",
        no_proxy="",
        CUDA_VISIBLE_DEVICES="",
        ORT_DISABLE_TELEMETRY="1",  # see edgeport/__init__.py
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONUNBUFFERED="1",
    )
    return env


# -- a converter's child, started before its job: its imports overlap the passes before the conversion --

_waiting: list[tuple[tuple[str, ...], subprocess.Popen]] = []  # (its command, the child awaiting one job line)


@contextlib.contextmanager
def started_early(argv: list[str], env: dict[str, str], *, start: bool | None = None):
    """Start ``argv`` at once: a child that imports, then reads one job line from standard input
    (``take_started`` hands it one). An untaken child is killed when the block ends, so none
    outlives the run. Only a one-shot process (the ``edgeport`` command, ``_lazy.one_shot_process``)
    starts one: edgeport used as a library starts no process it was not asked for (``start=True`` asks)."""
    from edgeport._lazy import is_one_shot

    if not (is_one_shot() if start is None else start):
        yield
        return
    entry = (tuple(argv), _spawn(argv, env))
    _waiting.append(entry)
    try:
        yield
    finally:
        if entry in _waiting:  # not taken
            _waiting.remove(entry)
            end_child(entry[1])


def _spawn(argv: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)


def start_with_job(argv: list[str], env: dict[str, str], job: str, *, more: bool = False) -> subprocess.Popen:
    """The child ``started_early`` started as ``argv`` given its ``job`` line, else a fresh one given
    it. A fresh child that ends before it takes the job is returned all the same: its log says why.
    ``more``: its standard input stays open, for lines the job asks for later (``tell``)."""
    proc = take_started(argv, job, more=more)
    if proc is None:
        proc = _spawn(argv, env)
        tell(proc, job, last=not more)
    return proc


_begun: list[Callable[[], None]] = []  # how to end what was begun before its conversion pass (``Converter.begin``)


def hand_over(argv: list[str], env: dict[str, str], job: str, *, more: bool = False) -> subprocess.Popen:
    """``start_with_job``, for a conversion begun ahead of its pass: the child is ended with the
    run if no conversion took it (``end_begun``)."""
    proc = start_with_job(argv, env, job, more=more)
    begun_ahead(lambda: end_child(proc))
    return proc


def begun_ahead(end: Callable[[], None]) -> None:
    """``end`` ends work begun ahead of its conversion pass (a child, a thread) with the run (``end_begun``)."""
    _begun.append(end)


def end_begun() -> None:
    """End everything begun ahead that still runs (a child is killed, a thread waited for): the
    run ended before its conversion pass took the files (a pass between failed). What the pass
    took has ended already."""
    while _begun:
        end = _begun.pop()
        try:
            end()
        finally:
            if _begun:  # whatever this one raised (an interrupt during a thread's join): the rest still end
                end_begun()


def take_started(argv: list[str], job: str, *, more: bool = False) -> subprocess.Popen | None:
    """The child ``started_early`` started as ``argv``, given its ``job`` line; None when none
    awaits one, or it ended while importing (a fresh child then shows why, in its log)."""
    for entry in [e for e in _waiting if e[0] == tuple(argv)][:1]:
        _waiting.remove(entry)
        proc = entry[1]
        if proc.poll() is None and tell(proc, job, last=not more):
            return proc
        end_child(proc)
    return None


def tell(proc: subprocess.Popen, line: str | None, *, last: bool = True) -> bool:
    """Write ``line`` (unless None) to ``proc``'s standard input, closing it when ``last``; False
    where the child has gone."""
    try:
        if line is not None:
            proc.stdin.write(line + "\n")
            proc.stdin.flush()
        if last:
            proc.stdin.close()
        return True
    except (OSError, ValueError):  # a closed pipe, or one closed here already
        return False


def end_child(proc: subprocess.Popen) -> None:
    """Kill ``proc`` if it still runs, reap it, and close its pipes."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


_CAUSED = "The above exception was the direct cause of the following exception"


# what TensorFlow and XLA log from C++ (glog/absl: "E0000 00:00:1765.. cuda_driver.cc:152] failed
# call to cuInit ..."), and its CUDA plugin's registrations: noise on a machine without a GPU, never
# the converter's reason
_NATIVE_LOG = re.compile(r"^([EWIF]\d{4} \d\d:\d\d:\d\d|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [EWIF] )"
                         r"|cuInit|cuda_driver|Unable to register cu(DNN|FFT|BLAS)|TF-TRT Warning")


# TensorFlow's listing of a saved model's signature (one line per captured tensor): what it
# prints as it saves, never a reason
_SIGNATURE_DUMP = re.compile(r"TensorSpec\(|^\* Endpoint|^(Output Type|Captures|Args|Returns|Inputs):$|^WARNING: All log messages")


def condense(output: str, limit: int = 240) -> str:
    """The most telling line of onnx2tf's output, for a one-line error: in a chain of Python
    exceptions, the first one (the cause), not the wrapper that re-raised it; never a line
    TensorFlow logs from C++ (``failed call to cuInit`` on every machine without a GPU) or its
    listing of a saved model's signature. Without an error line, it says so (and quotes the last)."""
    output = output.split(_CAUSED, 1)[0]
    lines = [_ANSI.sub("", line).strip() for line in output.splitlines()]
    lines = [line for line in lines if line and not _NATIVE_LOG.search(line) and not _SIGNATURE_DUMP.search(line)]
    for pattern in (r"^\w*(Error|Exception)\b.*:", r"ERROR:", r"Error", r"error"):
        hits = [line for line in lines if re.search(pattern, line)]
        if hits:
            return hits[-1][:limit]
    return (f"it printed no error (its last line: {lines[-1]})" if lines else "no output")[:limit]


class Converter(abc.ABC):
    name: ClassVar[str]
    source: ClassVar[str]  # what it converts from, in words

    @abc.abstractmethod
    def version(self) -> str:
        """Its version, or "not installed"."""

    @abc.abstractmethod
    def info(self) -> dict:
        """The report's ``converter`` entry: name, version, writer."""

    @abc.abstractmethod
    def describe(self) -> str:
        """Its name, version and writer, for the pass's summary line."""

    @abc.abstractmethod
    def require(self) -> None:
        """A ``MissingDependencyError`` saying how to install it, unless it is installed and usable."""

    @abc.abstractmethod
    def where(self) -> str:
        """Where it is installed, or how to install it (``edgeport converters``)."""

    def install(self, *, log=print) -> None:
        log(f"{self.name} {self.version()} comes with edgeport's own environment (make setup)")

    def warm(self, *, start: bool | None = None) -> contextlib.AbstractContextManager:
        """Start its process now, so that its imports overlap the passes before the conversion
        (only in a one-shot process unless ``start`` says; ended with the block if not taken)."""
        return contextlib.nullcontext()

    def begin(self, prepared, work: Path, *, quantised: str | None, timeout_s: float):
        """Hand the conversion to the converter's process now, from ``prepared`` (``convert/base.Prepared``),
        where it does not need the ONNX graph: it then converts while the ONNX export runs, and
        ``convert`` takes what it began (``Exported.begun``); or what it needs besides the graph,
        made meanwhile (onnx2tf: ``onnx2tf.Ahead``). None: nothing begun. Whatever runs on is
        ended with the run if no conversion takes it (``begun_ahead``)."""
        return None

    @abc.abstractmethod
    def convert(self, exported, work: Path, *, quantised: str | None, timeout_s: float,
                meanwhile: Callable[[dict[str, Path]], None] | None = None) -> Conversion:
        """float32, and the quantised variant when asked (``int8``, or ``uint8``: its int8 twin
        per tensor), from ``exported`` (``convert/base.Exported``), in ``work``. A float32 the
        converter cannot write raises ``ConversionError``; a quantised one is a reason.

        ``meanwhile(files)`` is called while the conversion waits on a child process, once the
        converter no longer reads the PyTorch module, with the files written so far (variant ->
        path; perhaps none), and again as more are written: the caller's work beside it (parity's
        runs, ``validate/parity/early.py``). Those files stay until the run's folder goes."""
