"""The argument parser every edgeport command uses, and the value checks its options share.

Numbers are checked where they are parsed, so a NaN learning rate or a zero image size never
reaches the work. No torch, no numpy: imported at start-up.
"""

from __future__ import annotations

import argparse
import math


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (what was wrong, where to look), exit 2."""

    def error(self, message: str):  # type: ignore[override]
        from edgeport.errors import error_line

        # argparse quotes the value it refused, which may be megabytes (an --arch choice, an unknown argument)
        self.exit(2, error_line(self.prog, message, tail=f"; see `{self.prog} --help`") + "\n")


def whole_number(value, lo: int | None = None, hi: int | None = None) -> bool:
    """An int that is not a bool (JSON and pickles both make ``True`` look like 1), in [lo, hi] where given."""
    return isinstance(value, int) and not isinstance(value, bool) and (lo is None or value >= lo) and (hi is None or value <= hi)


def real_number(value) -> bool:
    """A finite int or float that is not a bool: a number read from a file (an integer past float's range is none)."""
    try:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    except OverflowError:
        return False


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {value}")
    return value


def _finite(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


def positive_float(text: str) -> float:
    value = _finite(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    value = _finite(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def int_range(lo: int, hi: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be between {lo} and {hi}, got {value}")
        return value

    parse.__name__ = f"int in [{lo}, {hi}]"
    return parse


# numpy's legacy seeding (``np.random.seed``) takes 32 bits; every seed edgeport takes is one
SEED_RANGE = (0, 2**32 - 1)


def seed(text: str) -> int:
    """A seed: a whole number in ``SEED_RANGE``."""
    return int_range(*SEED_RANGE)(text)


def explicit_options(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The option destinations given on the command line (not left at their defaults)."""
    import copy

    probe = argparse.ArgumentParser(add_help=False)
    probe.error = parser.error  # type: ignore[method-assign]
    for action in parser._actions:  # noqa: SLF001 - argparse offers no public walk of its options
        if action.option_strings and action.dest != "help":
            clone = copy.copy(action)
            clone.default, clone.required = argparse.SUPPRESS, False
            probe._add_action(clone)  # noqa: SLF001
    namespace, _ = probe.parse_known_args(argv)
    return set(vars(namespace))
