"""Pass: read every TFLite file written and list each reason the board cannot run it.

This is a gate, not a check: a model the board cannot run is still delivered, with the
reasons in the report, and ``convert`` exits 1.
"""

from __future__ import annotations

from dataclasses import asdict

from edgeport.convert.base import Pass, PassResult, State
from edgeport.errors import PassCheckError
from edgeport.validate.boards import check_model
from edgeport.validate.tflite_model import read_tflite


def board_check(path, board) -> dict:
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


def board_section(board, checks: dict[str, dict]) -> dict:
    """The report's ``board`` entry: the profile and each file's verdict."""
    return {
        "name": board.name, "runtime": board.runtime, "version": board.version, "dtypes": list(board.dtypes),
        "ram_bytes": board.ram_bytes, "flash_bytes": board.flash_bytes,
        "checks": checks, "runnable": all(c["runnable"] for c in checks.values()),
    }


class BoardGatePass(Pass):
    name = "board_gate"

    def run(self, state: State) -> PassResult:
        board = state.config.board
        checks = {variant: board_check(path, board) for variant, path in state.tflite.items()}
        bad = [v for v, c in checks.items() if not c["runnable"]]
        summary = f"{board.name}: " + ("all runnable" if not bad else f"NOT runnable: {', '.join(bad)} ({checks[bad[0]]['reasons'][0]})")
        return PassResult(state.evolve(board_checks=checks), changed=False, summary=summary)

    def check(self, before: State, after: State) -> None:
        if set(after.board_checks) != set(after.tflite):
            raise PassCheckError("a TFLite file went unchecked by the board gate")
