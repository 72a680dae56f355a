"""Pass: every runtime against PyTorch as loaded, on real images (``validate/parity/run.py``)."""

from __future__ import annotations

import functools
import math

from edgeport.convert.base import ConvertConfig, Gated, Given, Pass, PassResult, Validated
from edgeport.convert.passes.export_onnx_pass import export_onnx
from edgeport.errors import PassCheckError
from edgeport.models.registry import level_strides
from edgeport.validate.parity.run import ParitySubject, run_parity


def subject_of(gated: Gated, config: ConvertConfig) -> ParitySubject:
    """What parity judges, from what the phases before it made: the files converted (with the folded
    model's and the ONNX graph's rows, and what the conversion knows of its files), or the file given."""
    made, prepared = gated.tflite, gated.tflite.prepared
    common = dict(reference_module=prepared.reference, tflite=dict(made.files), not_converted=dict(made.not_written),
                  output_names=prepared.output_names, strides=prepared.strides, levels=level_strides(prepared.reference),
                  board=None if config.rows in ("kernels", "file") else config.board, head=prepared.head,
                  board_checks=dict(gated.board.checks), workdir=config.work_dir, seed=config.seed,
                  export_reference=functools.partial(export_onnx, prepared.reference, prepared.imgsz,
                                                     output_names=list(prepared.output_names), opset=config.opset))
    if isinstance(made, Given):
        return ParitySubject(folded_module=None, onnx_path=None, inputs=made.inputs, inputs_source=made.inputs_source,
                             ground_truth=made.ground_truth, letterboxes=made.letterboxes, sampled=config.rows != "file", **common)
    diagnostics = config.rows == "all"
    return ParitySubject(
        folded_module=prepared.module if diagnostics else None, onnx_path=made.exported.onnx if diagnostics else None,
        inputs=prepared.val, inputs_source=prepared.val_source, held_out=prepared.held_out,
        normalised={v: made.int8_plans for v in made.files if v != "float32"} if made.int8_plans else {},
        twins=dict(made.twins),
        # a twin is held to its steps where the file is its graph op for op (a lowering rule rounds its own way)
        twin_gated={v: v not in made.lowered_rules for v in made.twins},
        early=made.early, **common)


class ParityPass(Pass[Gated, Validated]):
    name = "parity"

    def run(self, value: Gated, config: ConvertConfig) -> PassResult[Validated]:
        try:
            parity = run_parity(subject_of(value, config), divergence=config.rows == "all")
        finally:
            early = getattr(value.tflite, "early", None)
            if early is not None:
                early.close()  # what parity did not take is not needed
        failed = [f"{r.variant}/{r.runtime}" for r in parity.rows if not r.passed]
        summary = "all passed" if not failed else f"FAILED: {', '.join(failed)}"
        return PassResult(Validated(value, parity), changed=False, summary=summary)

    def check(self, before: Gated, after: Validated, config: ConvertConfig) -> None:
        made = before.tflite
        expected = {*(() if isinstance(made, Given) or config.rows != "all" else ("folded", "onnx")), *made.files, *made.not_written}
        got = {r.variant for r in after.parity.rows[1:]}
        if got != expected:
            raise PassCheckError(f"parity has rows for {sorted(got)}, expected {sorted(expected)}")
        for r in after.parity.rows:
            for o in r.outputs:
                if not math.isfinite(o["max_abs"]) and r.passed:
                    raise PassCheckError(f"{r.variant}: non-finite error reported as passing")
