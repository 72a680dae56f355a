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


def report(prog: str, exc: BaseException) -> int:
    """Print one line for ``exc`` on stderr and return the exit code it maps to.

    - an ``EdgeportError``: its message, its ``exit_code`` (1 gate, 2 bad input, 3 the converter failed);
    - a permission or disk error: the file named, exit 2;
    - an ``InternalError`` or anything else is a bug: one line, exit 3, the traceback in a log file named there.
    """
    import sys

    from edgeport.text import for_terminal

    if isinstance(exc, EdgeportError) and not isinstance(exc, InternalError):
        print(f"{prog}: error: {for_terminal(exc)}", file=sys.stderr)
        return exc.exit_code
    if is_environment_error(exc):
        where = f" {str(exc.filename)!r}" if getattr(exc, "filename", None) else ""
        hint = {errno.ENOSPC: "free some disk space", errno.EROFS: "choose a writable location",
                errno.EDQUOT: "free some disk space", errno.ENAMETOOLONG: "choose a shorter name",
                errno.ENOTDIR: "a part of the path is a file: choose another path"}.get(exc.errno, "check its permissions")
        print(f"{prog}: error: cannot access{for_terminal(where)}: {for_terminal(exc.strerror or exc)}; {hint}", file=sys.stderr)
        return 2
    return _internal(prog, exc)


def _internal(prog: str, exc: BaseException) -> int:
    import os
    import sys
    import tempfile
    import traceback

    fd, log = tempfile.mkstemp(prefix="edgeport-internal-", suffix=".log")
    with os.fdopen(fd, "w") as f:
        f.write("".join(traceback.format_exception(exc)))
    from edgeport.text import for_terminal

    first = for_terminal((str(exc).strip().splitlines() or [""])[0][:300])
    what = first if isinstance(exc, EdgeportError) else f"{type(exc).__name__}: {first}"
    print(f"{prog}: internal error: {what}; not a failed gate: please report it with the traceback in {log}", file=sys.stderr)
    return 3
