"""The converter interface: what writes the TFLite files (``--converter``).

onnx2tf (``convert/converters/onnx2tf.py``, the default) and litert-torch (``convert/converters/litert.py``)
implement it. Whatever asks "which converter?" asks ``converter(name)`` (``convert/converters/registry.py``).
Adding a converter is a class implementing ``Converter``, and its name in ``NAMES`` and ``registry.py``.
"""

from __future__ import annotations

import abc
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ClassVar

if TYPE_CHECKING:
    from edgeport.convert.base import Exported, Prepared
    from edgeport.convert.context import RunContext

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


_CAUSED = "The above exception was the direct cause of the following exception"


# what TensorFlow and XLA log from C++ (glog/absl: "E0000 00:00:1765.. cuda_driver.cc:152] failed
# call to cuInit ..."), and its CUDA plugin's registrations: noise on a machine without a GPU, never
# the converter's reason
_NATIVE_LOG = re.compile(r"^([EWIF]\d{4} \d\d:\d\d:\d\d|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [EWIF] )"
                         r"|cuInit|cuda_driver|Unable to register cu(DNN|FFT|BLAS)|TF-TRT Warning")


# TensorFlow's listing of a saved model's signature (a line per captured tensor), printed as it saves: never a reason
_SIGNATURE_DUMP = re.compile(r"TensorSpec\(|^\* Endpoint|^(Output Type|Captures|Args|Returns|Inputs):$|^WARNING: All log messages")


def condense(output: str, limit: int = 240) -> str:
    """The most telling line of onnx2tf's output, for a one-line error: in a chain of Python
    exceptions, the first one (the cause), not the wrapper that re-raised it; never noise
    (``_NATIVE_LOG``, ``_SIGNATURE_DUMP``). Without an error line, it says so (and quotes the last)."""
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

    def warm(self, context: "RunContext") -> None:
        """Start its process now, in ``context``, so that its imports overlap the passes before the
        conversion (``RunContext.warm``: only in a one-shot process; ended with the run if not taken)."""
        return None

    def begin(self, prepared: "Prepared", work: Path, *, quantised: str | None, timeout_s: float, context: "RunContext"):
        """Hand the conversion to the converter's process now, from ``prepared``, where it does not
        need the ONNX graph: it then converts while the ONNX export runs, and ``convert`` takes what
        it began (``Exported.begun``); or what it needs besides the graph, made meanwhile (onnx2tf:
        ``onnx2tf.Ahead``). None: nothing begun. Whatever runs on is ended with the run if no
        conversion takes it (``context.own``)."""
        return None

    @abc.abstractmethod
    def convert(self, exported: "Exported", work: Path, *, quantised: str | None, timeout_s: float, context: "RunContext",
                meanwhile: Callable[[dict[str, Path]], None] | None = None) -> Conversion:
        """float32, and the quantised variant when asked (``int8``, or ``uint8``: its int8 twin per
        tensor). A float32 the converter cannot write raises ``ConversionError``; a quantised one is a reason.

        ``meanwhile(files)`` is called while the conversion waits on a child process, once the
        converter no longer reads the PyTorch module, with the files written so far (variant ->
        path; perhaps none), and again as more are written: the caller's work beside it (parity's
        runs, ``validate/parity/early.py``). Those files stay until the run's folder goes."""
