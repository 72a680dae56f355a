"""Export ONNX with a static ``images`` input, check it, simplify it.

The TorchScript exporter (``dynamo=False``) is used: torch 2.13's default dynamo exporter
needs ``onnxscript`` and produces graphs onnx2tf 1.28 handles less well. The graph is
checked with ``onnx.checker``, simplified with onnxslim (constant folding, dead nodes), and
must run in ONNX Runtime with the same outputs as the model it came from.
"""

from __future__ import annotations

import warnings

from edgeport._lazy import require
from edgeport.convert.base import Pass, PassResult, State
from edgeport.errors import PassCheckError

INPUT_NAME = "images"
# ONNX Runtime vs PyTorch on the same float32 graph: only summation order differs
ORT_REL_TOL = 1e-4


def export_onnx(module, imgsz: int, path, *, output_names: list[str], opset: int) -> None:
    import torch

    dummy = torch.zeros(1, 3, imgsz, imgsz)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy-exporter deprecation notice
        torch.onnx.export(
            module,
            (dummy,),
            str(path),
            input_names=[INPUT_NAME],
            output_names=list(output_names),
            opset_version=opset,
            do_constant_folding=True,
            dynamo=False,
        )


def simplify(path, out=None) -> int:
    """Simplify with onnxslim, in place or into ``out``; return the node count."""
    onnx = require("onnx", purpose="ONNX export")
    onnxslim = require("onnxslim", purpose="ONNX simplification")
    model = onnx.load(str(path))
    slim = onnxslim.slim(model)
    onnx.checker.check_model(slim, full_check=True)
    onnx.save(slim, str(out or path))
    return len(slim.graph.node)


def op_counts(path) -> dict[str, int]:
    onnx = require("onnx")
    counts: dict[str, int] = {}
    for node in onnx.load(str(path)).graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


def run_onnxruntime(path, inputs):
    ort = require("onnxruntime", purpose="ONNX Runtime parity")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {INPUT_NAME: inputs})


class ExportOnnxPass(Pass):
    name = "export_onnx"

    def run(self, state: State) -> PassResult:
        path = state.config.work_dir / "model.onnx"
        export_onnx(state.module, state.imgsz, path, output_names=list(state.output_names), opset=state.config.opset)
        onnx = require("onnx")
        onnx.checker.check_model(onnx.load(str(path)), full_check=True)
        from edgeport.convert.to_tflite_pass import simplify_in_warm_child

        nodes = simplify_in_warm_child(path)
        if nodes is None:
            nodes = simplify(path)
        return PassResult(state.evolve(onnx_path=path), changed=True, summary=f"opset {state.config.opset}, {nodes} nodes")

    def check(self, before: State, after: State) -> None:
        from torch.nn.modules.batchnorm import _BatchNorm

        from edgeport.models.inference import forward
        from edgeport.validate.metrics import max_abs_rel

        counts = op_counts(after.onnx_path)
        bn_modules = sum(isinstance(m, _BatchNorm) for m in after.module.modules())
        if bn_modules == 0 and counts.get("BatchNormalization"):
            raise PassCheckError(f"{counts['BatchNormalization']} BatchNormalization nodes in a folded model")
        x = after.calib[:1]
        for i, (ref, got) in enumerate(zip(forward(after.module, x), run_onnxruntime(after.onnx_path, x), strict=True)):
            if ref.shape != got.shape:
                raise PassCheckError(f"ONNX output {i} has shape {got.shape}, PyTorch {ref.shape}")
            err = max_abs_rel(ref, got)
            if err > ORT_REL_TOL:
                raise PassCheckError(f"ONNX Runtime output {i} differs from PyTorch by {err:.3g} x max|output|")
