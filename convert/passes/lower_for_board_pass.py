"""Pass: rewrite what the board lacks into operators it has (``ops/lowering``).

Runs on every file the board gets, by the board's probed op table: a file the board runs as it
is stays byte for byte; otherwise its operators get the versions they need and each operator
the board still lacks goes to its lowering rule. Boards without a probed table (TFLite Micro) are
not lowered.

A lowered file is a new file (``lowered/`` in the work folder); the converter's is left as it was
written. What no rule covers stays: a float32 file ships, and the board gate names it; a quantised
file is not shipped, and its variant gets a converter row naming the operators.

The check runs the float32 file before and after on TFLite's reference kernels: the lowering
must compute the same values (within ``LOWERED_REL_TOL`` of the output's range: every rule is
exact in real arithmetic, float32 rounds the two sides apart). A quantised file is judged
against its int8 twin by parity instead, where a step's difference is a verdict, not a bug.
"""

from __future__ import annotations

from dataclasses import replace

from edgeport.convert.base import ConvertConfig, Converted, Pass, PassResult
from edgeport.errors import PassCheckError
from edgeport.ops.lowering.registry import lower_for_board
from edgeport.ops.tflite_graph import Graph
from edgeport.validate.board.profiles import min_runtime_of

LOWERED_REL_TOL = 1e-5


class LowerForBoardPass(Pass[Converted, Converted]):
    name = "lower_for_board"

    def run(self, value: Converted, config: ConvertConfig) -> PassResult[Converted]:
        board = config.board
        if board.op_table is None:
            return PassResult(value, changed=False, summary=f"{board.name}: no probed op table, nothing lowered")
        lowered, rules = {}, {}
        files, not_written = dict(value.files), dict(value.not_written)
        for variant, path in value.files.items():
            result = lower_for_board(path.read_bytes(), board.lacks)
            if result.changed:
                files[variant] = config.work_dir / "lowered" / path.name
                files[variant].parent.mkdir(exist_ok=True)
                files[variant].write_bytes(restamped(result.model))
                lowered[variant] = result.describe()
                if result.rules:
                    rules[variant] = dict(result.rules)
            elif result.left:
                lowered[variant] = result.describe()
            if result.left and variant != "float32":
                del files[variant]
                not_written[variant] = (f"{board.name} cannot run {', '.join(result.left)} on {variant}, and no lowering "
                                        f"rule writes it in operators it has (ops/lowering)")
        summary = "; ".join(f"{v}: {how}" for v, how in lowered.items()) or f"{board.name} runs every op as converted"
        converted = replace(value, files=files, not_written=not_written, lowered=lowered, lowered_rules=rules,
                            twins={v: p for v, p in value.twins.items() if v in files})
        return PassResult(converted, changed=files != value.files, summary=summary)

    def check(self, before: Converted, after: Converted, config: ConvertConfig) -> None:
        from edgeport.ops.tflite_model import read_tflite
        from edgeport.validate.parity.cross_check import compare_files

        converted, path = before.files.get("float32"), after.files.get("float32")
        if path is None or path == converted:
            return
        shapes = list(read_tflite(converted).output_shapes)  # the two files' outputs, paired as they are
        same = compare_files(converted, path, after.prepared.calib[:1], shapes, tolerance=LOWERED_REL_TOL,
                             names=("the converted", "the lowered"))
        if not same["ran"] and same["reason"].startswith("the converted"):
            return  # the converted file itself does not run: nothing to compare with
        if not same["ran"] or not same["agree"]:
            parting = same.get("first_parting")
            where = f"; they first part at {parting['op']} {parting['tensor']!r}" if parting else ""
            how = same.get("reason") or f"its outputs differ from the converted one's by {same['max_abs_rel']:.2g} x their range"
            raise PassCheckError(f"the lowered float32 file does not compute what the converted one does ({how}, allowed "
                                 f"{LOWERED_REL_TOL:g}{where}): {after.lowered.get('float32')}")


def restamped(model: bytes) -> bytes:
    """The converter's ``min_runtime_version`` metadata recomputed from the lowered file's operators (dropped
    when one is not in TFLite's table), so that no lowered file claims a runtime newer than it needs."""
    g = Graph(model)
    if g.metadata_text("min_runtime_version") is None:
        return model
    g.set_metadata_text("min_runtime_version", min_runtime_of({(g.name(op), g.version(op)) for op in g.ops}))
    return g.to_bytes()
