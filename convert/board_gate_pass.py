"""Pass: read every TFLite file written and list each reason the board cannot run it.

This is a gate, not a check: a model the board cannot run is still delivered, with the
reasons in the report, and ``convert`` exits 1.
"""

from __future__ import annotations

from dataclasses import asdict

from edgeport.convert.base import ConvertConfig, Converted, Gated, Pass, PassResult
from edgeport.errors import PassCheckError
from edgeport.ops.tflite_model import read_tflite
from edgeport.validate.board.profiles import check_model
from edgeport.validate.report.schema import BoardSection


def board_check(path, board) -> dict:
    """The board's verdict on one file: whether it runs, every reason it does not, and what it holds."""
    summary = read_tflite(path)
    reasons = check_model(summary, board)
    return {
        "runnable": not reasons,
        "reasons": reasons,
        "min_runtime_version": summary.min_runtime_version,
        "size_bytes": summary.size_bytes,
        "ops": [asdict(o) for o in summary.ops],
        "activation_dtypes": list(summary.activation_dtypes),
    }


class BoardGatePass(Pass[Converted, Gated]):
    name = "board_gate"

    def run(self, value: Converted, config: ConvertConfig) -> PassResult[Gated]:
        board = config.board
        section = BoardSection.of(board, {variant: board_check(path, board) for variant, path in value.files.items()})
        bad = [v for v, c in section.checks.items() if not c["runnable"]]
        summary = f"{board.name}: " + ("all runnable" if not bad else
                                       f"NOT runnable: {', '.join(bad)} ({section.checks[bad[0]]['reasons'][0]})")
        return PassResult(Gated(value, section), changed=False, summary=summary)

    def check(self, before: Converted, after: Gated, config: ConvertConfig) -> None:
        if set(after.board.checks) != set(before.files):
            raise PassCheckError("a TFLite file went unchecked by the board gate")
