"""What commands print: the progress console and its lines, the parity table, one-item-a-line verdicts.

Names from files reach the terminal through ``text.for_terminal`` and are never read as markup.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from edgeport.text import for_terminal

BAR = 30  # the progress bar's width, in characters

if TYPE_CHECKING:
    from edgeport.validate.report.schema import Report


def console():
    """The progress console, on stderr; logs and CI are not terminals: room instead of 80 columns."""
    from rich.console import Console

    return Console(stderr=True, width=None if sys.stderr.isatty() else 140)


def finish(out: Path, report: Report, what: str) -> int:
    """Print the parity table and where it diverges on stdout, then apply the gate (exit 1)."""
    from rich.console import Console

    from edgeport.validate.report.render import (
        board_runtime_lines,
        dataset_lines,
        divergence_lines,
        op_error_lines,
        print_table,
        repair_lines,
    )
    from edgeport.validate.report.schema import gate

    stdout = Console(width=None if sys.stdout.isatty() else 140)
    print_table(report, stdout)
    for line in [f"- {item}" for item in board_runtime_lines(report)] + divergence_lines(report) + op_error_lines(report) + \
            repair_lines(report) + [f"- {item}" for item in dataset_lines(report, classes=False)]:
        stdout.print(for_terminal(line), highlight=False, markup=False)
    gate(out, report, what=what)
    stdout.print(for_terminal(f"{what} in {out}/"), highlight=False, markup=False)
    return 0


def fail_with_list(header: str, items) -> int:
    """A gate's verdict on stdout: what failed, one item a line (names from files made inert); exit 1."""
    print(for_terminal(header))
    for item in items:
        print(f"  - {for_terminal(item)}")
    return 1


class Progress:
    """One line per stage, with its time, on stderr; on a terminal, a spinner while a stage runs, and
    a bar while validate scores a dataset."""

    def __init__(self, console):
        self.console = console
        self.status = None
        self.name, self.began = "", 0.0

    def start(self, name: str) -> None:
        self.name, self.began = name, time.perf_counter()
        if self.console is not None and self.console.is_terminal:  # a spinner's thread redraws nothing into a file
            self.status = self.console.status(f"{name} ...")
            self.status.start()

    def advance(self, done: int, total: int) -> None:
        """A bar under the running stage: ``done`` of ``total`` images, and the time left at this pace."""
        from rich.text import Text

        if self.status is None or not total:
            return
        left = f", {(time.perf_counter() - self.began) / done * (total - done):.0f} s left" if done > 0 else ""
        filled = round(BAR * done / total)  # plain text: "[###...]" is not markup
        self.status.update(Text(f"{self.name} [{'#' * filled}{'.' * (BAR - filled)}] {done}/{total} images{left}"))

    def close(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None

    def done(self, record) -> None:
        if self.console is None:
            return
        from rich.text import Text

        self.close()
        # a summary names paths, boards and layers from the user's files: plain text, never markup
        self.console.print(Text.assemble(("ok", "green"), f" {record.name:<16} {record.seconds:7.2f} s  {for_terminal(record.summary)}"),
                           highlight=False)
