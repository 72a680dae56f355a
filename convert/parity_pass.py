"""The parity summary -- every runtime against PyTorch as loaded, on real images."""

from __future__ import annotations

import functools
import math

from edgeport.convert.base import Pass, PassResult, State
from edgeport.convert.board_gate_pass import board_section
from edgeport.convert.export_onnx_pass import export_onnx
from edgeport.errors import PassCheckError
from edgeport.validate.parity import ParitySubject, run_parity
from edgeport.validate.report import failures


class ParityPass(Pass):
    name = "parity"
    imports = ("onnxruntime", "ai_edge_litert.interpreter")

    def run(self, state: State) -> PassResult:
        cfg = state.config
        subject = ParitySubject(
            reference_module=state.reference_module,
            folded_module=state.module,
            onnx_path=state.onnx_path,
            tflite=dict(state.tflite),
            not_converted=dict(state.not_converted),
            output_names=state.output_names,
            strides=state.strides,
            inputs=state.val_inputs,
            inputs_source=state.val_source,
            board=cfg.board,
            head=cfg.head,
            normalised={"int8": state.int8_plans} if state.int8_plans else {},
            workdir=cfg.work_dir,
            seed=cfg.seed,
            export_reference=functools.partial(export_onnx, state.reference_module, state.imgsz,
                                               output_names=list(state.output_names), opset=cfg.opset),
            model_info={
                "checkpoint": str(cfg.checkpoint),
                "layout": state.layout,
                "arch": state.arch or type(state.reference_module).__name__,
                "config": state.arch_config,
                "imgsz": state.imgsz,
                "calibration": state.calib_source,
            },
        )
        report = run_parity(subject)
        if state.converter:
            report["versions"]["onnx2tf"] = state.converter  # version and writer (flatbuffer_direct or tensorflow)
        if state.converter_notes:
            report["converter_notes"] = dict(state.converter_notes)  # e.g. int8 per-tensor, and why
        board = cfg.board
        report["board"] = board_section(board, state.board_checks)
        report["upsample"] = {"legacy_resize": cfg.legacy_resize, "sites": list(state.upsample_decisions)}
        if state.int8_plans:
            # per output: [axis, first channel, end, factor] the int8 file's values are divided by
            report["int8_normalised"] = [[list(r) for r in plan] for plan in state.int8_plans]
        report["passed"] = bool(report["passed"] and report["board"]["runnable"])
        failed = failures(report)
        summary = "all passed" if not failed else f"FAILED: {', '.join(f.what for f in failed)}"
        return PassResult(state.evolve(report=report), changed=False, summary=summary)

    def check(self, before: State, after: State) -> None:
        report = after.report
        # reference, folded, onnx, then per TFLite variant: optimised, reference kernels, board emulator,
        # and the board's own runtime where it can be reached
        per_variant = 4 if (report.get("board_runtime") or {}).get("real") else 3
        expected = 3 + per_variant * len(after.tflite) + len(after.not_converted)
        if len(report["results"]) != expected:
            raise PassCheckError(f"parity report has {len(report['results'])} results, expected {expected}")
        for r in report["results"]:
            for o in r["outputs"]:
                if not math.isfinite(o["max_abs"]) and r["passed"]:
                    raise PassCheckError(f"{r['variant']}: non-finite error reported as passing")
