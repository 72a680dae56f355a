"""Running a .tflite file on today's TFLite (ai-edge-litert): the one place edgeport makes an
interpreter, below everything that runs one (convert's checks, the board probe, parity's runners
and its divergence search). The board's own runtime (``validate/board/worker.py``, in the board's
Python) and TFLite Micro (``validate/parity/tflm_runner.py``) are other runtimes.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np

from edgeport._lazy import require
from edgeport.process import caught_stderr

KERNELS = ("optimized", "reference")
# what the runtime's C++ writes on stderr, once a process, when it takes a file on XNNPACK: news to no user
DELEGATE_NOTE = b"INFO: Created TensorFlow Lite XNNPACK delegate for CPU."
# files whose reference kernels aborted a child process (sha256 -> what happened): loading one of
# them here would end this process (``validate/parity/tflite_runner.py: run_in_child``)
_ABORTED: dict[str, str] = {}


def note_abort(path: Path, why: str) -> None:
    _ABORTED[hashlib.sha256(Path(path).read_bytes()).hexdigest()] = why


def _aborted(path: Path) -> str | None:
    if not _ABORTED:
        return None
    return _ABORTED.get(hashlib.sha256(Path(path).read_bytes()).hexdigest())


def load_interpreter(path: Path, *, kernels: str = "optimized", source: Path | None = None):
    """An allocated interpreter of ``path``, one thread: XNNPACK where it takes the file
    (``optimized``) or the builtin reference kernels (``reference``). The runtime's refusal of
    the file is its ``RuntimeError`` or ``ValueError``; a file whose reference kernels aborted a
    child process (``note_abort``) is refused so, on those kernels, and so is a file made from
    ``source`` (the same ops with every tensor an output, or some of them alone) where ``source`` is."""
    litert = require("ai_edge_litert.interpreter", package="ai-edge-litert", purpose="running TFLite models")
    if kernels not in KERNELS:
        raise ValueError(f"kernels={kernels!r}; valid: {', '.join(KERNELS)}")
    if kernels == "reference" and (why := _aborted(path) or (_aborted(source) if source is not None else None)) is not None:
        raise RuntimeError(f"{why}: not run in this process")
    resolver = litert.OpResolverType.BUILTIN_REF if kernels == "reference" else litert.OpResolverType.AUTO
    said: list[bytes] = []
    try:
        with caught_stderr() as said:
            interp = litert.Interpreter(model_path=str(path), num_threads=1, experimental_op_resolver_type=resolver)
            interp.allocate_tensors()
    finally:  # what the runtime wrote meanwhile, passed on but for the note
        rest = [line for line in b"".join(said).splitlines(keepends=True) if not line.startswith(DELEGATE_NOTE)]
        if rest:
            sys.stderr.write(b"".join(rest).decode(errors="replace"))
    return interp


def run_tflite(path: Path, x: np.ndarray | list[np.ndarray], *, kernels: str = "reference",
               source: Path | None = None) -> list[np.ndarray]:
    """Every output of ``path``, in order, for ``x`` (its input, or one array per input, in order) as
    the file takes it: layout and type, no conversion here. ``source``: as for ``load_interpreter``."""
    interp = load_interpreter(path, kernels=kernels, source=source)
    for d, value in zip(interp.get_input_details(), x if isinstance(x, list) else [x]):
        interp.set_tensor(d["index"], value)
    interp.invoke()
    return [interp.get_tensor(d["index"]).copy() for d in interp.get_output_details()]
