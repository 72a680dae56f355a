"""Pass: every reason the board cannot run each TFLite file written.

A gate, not a check: an unrunnable model is still delivered, with the reasons in the report, and
``convert`` exits 1."""

from __future__ import annotations

from edgeport.convert.base import ConvertConfig, Converted, Gated, Given, Pass, PassResult
from edgeport.errors import PassCheckError
from edgeport.validate.board.profiles import board_verdict
from edgeport.validate.report.sections import Board


class BoardGatePass(Pass[Converted | Given, Gated]):
    name = "board_gate"

    def run(self, value: Converted | Given, config: ConvertConfig) -> PassResult[Gated]:
        board = config.board
        section = Board.of(board, {variant: board_verdict(path, board) for variant, path in value.files.items()})
        bad = [v for v, c in section.checks.items() if not c.runnable]
        summary = f"{board.name}: " + ("all runnable" if not bad else
                                       f"NOT runnable: {', '.join(bad)} ({section.checks[bad[0]].reasons[0]})")
        return PassResult(Gated(value, section), changed=False, summary=summary)

    def check(self, before: Converted | Given, after: Gated, config: ConvertConfig) -> None:
        if set(after.board.checks) != set(before.files):
            raise PassCheckError("a TFLite file went unchecked by the board gate")
