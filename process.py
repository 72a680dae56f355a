"""This process's end: SIGTERM unwinds like Ctrl-C (so staging folders are removed, ``folders.py``),
and an exit without the interpreter's teardown once everything is cleaned up; and what native code
writes on its stderr, caught. No torch, no numpy: the CLI imports this at start-up."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
import threading
from typing import NoReturn

_STDERR = threading.RLock()  # one thread at a time points fd 2 elsewhere
MAX_CAUGHT = 1 << 20


class Terminated(BaseException):
    """SIGTERM arrived: unwind like Ctrl-C so staging folders are removed."""


def _raise_terminated(signum, frame):  # noqa: ARG001 - signal handler signature
    raise Terminated()


def handle_sigterm() -> None:
    """Make SIGTERM clean up exactly as SIGINT does (only from the main thread)."""
    with contextlib.suppress(ValueError):
        signal.signal(signal.SIGTERM, _raise_terminated)


def exit_now(code: int) -> NoReturn:
    """Everything is cleaned up: flush the logs, stdout and stderr, then exit with ``code`` at once,
    without the interpreter's teardown (atexit handlers, finalizers, a last garbage collection).
    Interpreter shutdown after an interrupt can end in a death by SIGINT (exit -2 instead of 130;
    seen on Python 3.12 under load), and torch's teardown only keeps the caller waiting."""
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader that went away (`| head`), a closed stream
            stream.flush()
    os._exit(code)


def usable_cores() -> int:
    """The cores this process may run on (where the platform says; else every core)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def in_halves(run, items: list) -> list:
    """``run`` on each half of ``items`` at once, each on its own thread (work that leaves Python's
    lock: a TFLite invoke), given two items and two usable cores; else on them all. Results in order."""
    if len(items) < 2 or usable_cores() < 2:
        return [run(items)]
    from concurrent.futures import ThreadPoolExecutor

    cut = (len(items) + 1) // 2
    with ThreadPoolExecutor(2, thread_name_prefix="edgeport-halves") as pool:
        return [f.result() for f in [pool.submit(run, part) for part in (items[:cut], items[cut:])]]


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with(parent: int) -> None:
    """A child this process's ``parent`` started dies when the parent dies, however it dies (SIGKILL
    included): Linux sends the signal asked for with ``PR_SET_PDEATHSIG``; a parent that died before
    this line ran is seen by the parent process id, which is no longer its own."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(128 + signal.SIGKILL)


@contextlib.contextmanager
def caught_stderr():
    """What native code writes on fd 2 while the block runs, caught in a temporary file (up to
    ``MAX_CAUGHT`` bytes): yields a list that holds those bytes once the block ends, however it ends."""
    caught: list[bytes] = []
    with _STDERR, tempfile.TemporaryFile() as tmp:
        try:
            saved = os.dup(2)
        except OSError:  # no fd 2 (2>&-): the file stands in for it during the block, and it is closed again after
            saved = None
        if sys.stderr is not None:
            sys.stderr.flush()
        os.dup2(tmp.fileno(), 2)
        try:
            yield caught
        finally:
            if saved is None:
                os.close(2)
            else:
                os.dup2(saved, 2)
                os.close(saved)
            tmp.seek(0)
            caught.append(tmp.read(MAX_CAUGHT))
