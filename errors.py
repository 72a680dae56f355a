"""The exception hierarchy. Every error a user can cause maps to one exit code.

An error message says what failed, the value seen, the valid choices and the next step,
in one line: the CLI prints ``str(error)`` and nothing else.
"""

from __future__ import annotations


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


class ConversionError(BadInputError):
    """An external converter (onnx2tf) refused the model; the reason is condensed."""


class MissingDependencyError(EdgeportError):
    """A heavy optional back end is not installed."""

    exit_code = 2


class PassCheckError(EdgeportError):
    """A pass ran but the check after it failed: a bug in edgeport or an unsupported model."""

    exit_code = 1


class ParityGateError(EdgeportError):
    """Parity or board-compatibility gate failed; artifacts and report are kept."""

    exit_code = 1
