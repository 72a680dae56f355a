"""The exception hierarchy. Every error a user can cause maps to one exit code.

An error message says what failed, the value seen, the valid choices and the next step,
in one line: the CLI prints ``str(error)`` and nothing else.
"""

from __future__ import annotations

import errno


class EdgeportError(Exception):
    """Base class. ``exit_code`` is what the CLI exits with."""

    exit_code = 1


class BadInputError(EdgeportError):
    """The user's input or usage is wrong (exit 2, no artifacts left behind)."""

    exit_code = 2


class CheckpointError(BadInputError):
    """The checkpoint file is missing, unreadable, untrusted or of an unknown layout."""


class ArchitectureError(BadInputError):
    """Unknown architecture name, or an ``--arch module:callable`` that does not resolve."""


class KeyMismatchError(BadInputError):
    """The checkpoint's state_dict does not fit the architecture."""


class CalibrationError(BadInputError):
    """The calibration folder is missing, empty or unreadable."""


class ConversionError(EdgeportError):
    """The converter failed on a model edgeport accepted: it crashed, or wrote no float32 file, or
    did not finish. Not the user's input and not a failed gate (exit 3): the message is its reason,
    condensed, and names its log. (A quantised variant it cannot write is a row of the report.)"""

    exit_code = 3


class MissingDependencyError(EdgeportError):
    """A heavy optional back end is not installed."""

    exit_code = 2


class InternalError(EdgeportError):
    """Something edgeport should have handled went wrong: a bug, never a failed gate (exit 3)."""

    exit_code = 3


class PassCheckError(InternalError):
    """A pass ran but the check after it failed: a bug in edgeport or an unsupported model."""


class ParityGateError(EdgeportError):
    """Parity or board-compatibility gate failed; artifacts and report are kept."""

    exit_code = 1


# The user's environment, not edgeport: permissions, a full or read-only disk.
# A name over the file system's limit, or a path through a file, is the user's path, not a bug.
ENVIRONMENT_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.ENAMETOOLONG,
                                errno.ENOTDIR})


def is_environment_error(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in ENVIRONMENT_ERRNOS


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message, or its type's name where it says nothing."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


# the longest error line edgeport prints: a message longer than this (a name from a file, a path)
# is clipped on the terminal and written whole to a log file the line names
MAX_LINE = 300


def _log(prefix: str, text: str) -> str | None:
    """A new log file holding ``text``; None where none can be written (the line is then clipped only)."""
    import os
    import tempfile

    try:
        fd, log = tempfile.mkstemp(prefix=prefix, suffix=".log")
        with os.fdopen(fd, "w", errors="backslashreplace") as f:
            f.write(text)
    except OSError:
        return None
    return log


# a word (a name, a path) is shortened to no fewer characters than this before a message loses its middle
MIN_WORD = 24


def _fitted(text: str, room: int) -> str:
    """``text`` in at most ``room`` characters: its longest words (a path, a name: where a message
    grows without bound) shortened in their middle, the longest first and each only as much as it
    must, so the sentence around them -- what failed, why, the next step -- stays whole. Where even
    that is too long, a part of the message's middle goes."""
    import re

    words = re.split(r"(\s+)", text)
    over = len(text) - room
    while over > 0:
        i = max(range(len(words)), key=lambda k: len(words[k]))
        if len(words[i]) <= MIN_WORD:
            break
        keep = max(MIN_WORD, len(words[i]) - over) - 3  # (the "..." that marks the cut)
        shortened = words[i][: keep - keep // 2] + "..." + (words[i][len(words[i]) - keep // 2:] if keep // 2 else "")
        over -= len(words[i]) - len(shortened)
        words[i] = shortened
    if over <= 0:
        return "".join(words)
    # two thirds from the beginning (what failed, the value seen, why), a third from the end (the next step)
    gap = " ... "
    room = max(0, room - len(gap))
    end = room // 3
    return text[: room - end] + gap + (text[len(text) - end:] if end else "")


def error_line(prog: str, message: object, *, kind: str = "error", tail: str = "", logged: bool = False) -> str:
    """``prog: kind: message tail`` as one terminal-safe line (``text.for_terminal``) of at most
    ``MAX_LINE`` characters; a longer message is ``_fitted``, and written whole to a new log file the
    line names unless ``logged``: the caller's log, which ``tail`` names, holds it already."""
    from edgeport.text import for_terminal

    head, text, tail = f"{prog}: {kind}: ", for_terminal(message), for_terminal(tail)
    if len(head) + len(text) + len(tail) <= MAX_LINE:
        return head + text + tail
    note = ""
    if not logged:
        written = _log("edgeport-error-", f"{head}{text}{tail}\n")
        note = f" (whole message: {written})" if written else ""
    room = max(0, MAX_LINE - len(head) - len(note) - len(tail))
    return (head + _fitted(text, room) + note + tail)[:MAX_LINE]


def report(prog: str, exc: BaseException) -> int:
    """Print one line for ``exc`` on stderr (``error_line``) and return the exit code it maps to.

    - an ``EdgeportError``: its message, its ``exit_code`` (1 gate, 2 bad input, 3 the converter failed);
    - a permission or disk error: the file named, exit 2;
    - an ``InternalError`` or anything else is a bug: one line, exit 3, the traceback in a log file named there.
    """
    import sys

    if isinstance(exc, EdgeportError) and not isinstance(exc, InternalError):
        print(error_line(prog, exc), file=sys.stderr)
        return exc.exit_code
    if is_environment_error(exc):
        where = f" {str(exc.filename)!r}" if getattr(exc, "filename", None) else ""
        hint = {errno.ENOSPC: "free some disk space", errno.EROFS: "choose a writable location",
                errno.EDQUOT: "free some disk space", errno.ENAMETOOLONG: "choose a shorter name",
                errno.ENOTDIR: "a part of the path is a file: choose another path"}.get(exc.errno, "check its permissions")
        print(error_line(prog, f"cannot access{where}: {exc.strerror or exc}", tail=f"; {hint}"), file=sys.stderr)
        return 2
    return _internal(prog, exc)


def _internal(prog: str, exc: BaseException) -> int:
    import sys
    import traceback

    log = _log("edgeport-internal-", "".join(traceback.format_exception(exc)))
    first = first_line(exc) if str(exc).strip() else ""
    what = first if isinstance(exc, EdgeportError) else f"{type(exc).__name__}: {first}"
    where = f"with the traceback in {log}" if log else "with the command that caused it (no log file could be written)"
    print(error_line(prog, what, kind="internal error", tail=f"; not a failed gate: please report it {where}", logged=True),
          file=sys.stderr)
    return 3
