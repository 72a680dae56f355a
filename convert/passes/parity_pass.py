"""Pass: every runtime against PyTorch as loaded, on real images (``validate/parity/run.py``)."""

from __future__ import annotations

import functools
import math

from edgeport.convert.base import ConvertConfig, Gated, Pass, PassResult, Validated
from edgeport.convert.passes.export_onnx_pass import export_onnx
from edgeport.errors import PassCheckError
from edgeport.validate.parity.run import ParitySubject, run_parity


def subject_of(gated: Gated, config: ConvertConfig) -> ParitySubject:
    """What parity judges, from what the phases before it made."""
    converted = gated.converted
    prepared = converted.prepared
    return ParitySubject(
        reference_module=prepared.reference,
        folded_module=prepared.module,
        onnx_path=converted.exported.onnx,
        tflite=dict(converted.files),
        not_converted=dict(converted.not_written),
        output_names=prepared.output_names,
        strides=prepared.strides,
        inputs=prepared.val,
        inputs_source=prepared.val_source,
        board=config.board,
        head=prepared.head,
        normalised={v: converted.int8_plans for v in converted.files if v != "float32"} if converted.int8_plans else {},
        twins=dict(converted.twins),
        # a twin is held to its steps where the file is its graph op for op (a lowering rule rounds its own way)
        twin_gated={v: v not in converted.lowered_rules for v in converted.twins},
        board_checks=dict(gated.board.checks),
        workdir=config.work_dir,
        seed=config.seed,
        export_reference=functools.partial(export_onnx, prepared.reference, prepared.imgsz,
                                           output_names=list(prepared.output_names), opset=config.opset),
        early=converted.early,
    )


class ParityPass(Pass[Gated, Validated]):
    name = "parity"

    def run(self, value: Gated, config: ConvertConfig) -> PassResult[Validated]:
        try:
            parity = run_parity(subject_of(value, config))
        finally:
            if value.converted.early is not None:
                value.converted.early.close()  # what parity did not take is not needed
        failed = [f"{r.variant}/{r.runtime}" for r in parity.rows if not r.passed]
        summary = "all passed" if not failed else f"FAILED: {', '.join(failed)}"
        return PassResult(Validated(value, parity), changed=False, summary=summary)

    def check(self, before: Gated, after: Validated, config: ConvertConfig) -> None:
        expected = {"folded", "onnx", *before.converted.files, *before.converted.not_written}
        got = {r.variant for r in after.parity.rows[1:]}
        if got != expected:
            raise PassCheckError(f"parity has rows for {sorted(got)}, expected {sorted(expected)}")
        for r in after.parity.rows:
            for o in r.outputs:
                if not math.isfinite(o["max_abs"]) and r.passed:
                    raise PassCheckError(f"{r.variant}: non-finite error reported as passing")
