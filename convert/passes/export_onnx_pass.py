"""Export ONNX with a static ``images`` input, check it, simplify it.

The TorchScript exporter (``dynamo=False``) is used: torch 2.13's default dynamo exporter
needs ``onnxscript`` and produces graphs onnx2tf 1.28 handles less well. The graph is
checked with ``onnx.checker``, simplified with onnxslim (constant folding, dead nodes), and
must run in ONNX Runtime with the same outputs as the model it came from: within 1e-4 of its largest
value, or within what float32 itself errs by there (the model in float32 against float64, as a
float row is judged), or the same rows in another order (a top-k tail's ties).
"""

from __future__ import annotations

import functools
import warnings

import numpy as np

from edgeport._lazy import require
from edgeport.convert.base import ConvertConfig, Exported, Pass, PassResult, Prepared
from edgeport.errors import PassCheckError

INPUT_NAME = "images"
# ONNX Runtime vs PyTorch on the same float32 graph: only summation order differs
ORT_REL_TOL = 1e-4


def export_onnx(module, imgsz: int, path, *, output_names: list[str], opset: int) -> None:
    import torch

    dummy = torch.zeros(1, 3, imgsz, imgsz)
    try:
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
    except OSError as exc:
        if exc.filename is not None or exc.errno is None:
            raise
        # torch's writer names no file (a full disk reads "cannot access"): the user is told which
        raise OSError(exc.errno, exc.strerror, str(path)) from exc


def simplify(path) -> int:
    """Simplify with onnxslim, in place; return the node count."""
    onnx = require("onnx", purpose="ONNX export")
    onnxslim = require("onnxslim", purpose="ONNX simplification")
    model = onnx.load(str(path))
    slim = onnxslim.slim(model)
    onnx.checker.check_model(slim, full_check=True)
    onnx.save(slim, str(path))
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


class ExportOnnxPass(Pass[Prepared, Exported]):
    name = "export_onnx"

    def run(self, value: Prepared, config: ConvertConfig) -> PassResult[Exported]:
        import copy

        from edgeport.convert.converters.registry import converter

        path, chosen = config.work_dir / "model.onnx", converter(config.converter)
        # begun during the export (convert/context.py): litert-torch converts the module, onnx2tf writes its calibration files
        begun = chosen.begin(value, config.work_dir, quantised=config.quantised, timeout_s=config.converter_timeout_s,
                             context=config.context) if config.variants else None
        # the tracer leaves what it saw in a module's caches (Ultralytics' Detect keeps the traced
        # input shape), which torch.export cannot guard on: where litert-torch converts the module
        # after this export (the cross-check's), a copy is exported
        module = copy.deepcopy(value.module) if config.cross_check else value.module
        export_onnx(module, value.imgsz, path, output_names=list(value.output_names), opset=config.opset)
        onnx = require("onnx")
        onnx.checker.check_model(onnx.load(str(path)), full_check=True)
        nodes = simplify(path)
        return PassResult(Exported(value, path, INPUT_NAME, begun=begun), changed=True, summary=f"opset {config.opset}, {nodes} nodes")

    def check(self, before: Prepared, after: Exported, config: ConvertConfig) -> None:
        from torch.nn.modules.batchnorm import _BatchNorm

        from edgeport.convert.modelcheck import rows_match
        from edgeport.models.inference import float32_error, forward
        from edgeport.validate.metrics import max_abs_rel
        from edgeport.validate.parity.compare import FLOAT32_ERROR

        counts = op_counts(after.onnx)
        bn_modules = sum(isinstance(m, _BatchNorm) for m in before.module.modules())
        if bn_modules == 0 and counts.get("BatchNormalization"):
            raise PassCheckError(f"{counts['BatchNormalization']} BatchNormalization nodes in a folded model")
        x = before.calib[:1]
        refs = forward(before.module, x)

        @functools.cache
        def errors():  # the model in float32 against float64, measured once, where needed
            return float32_error(before.module, x, refs)

        def own_error(i: int) -> float | None:
            return float(errors()[i].max(initial=0.0)) if errors() else None

        for i, (ref, got) in enumerate(zip(refs, run_onnxruntime(after.onnx, x), strict=True)):
            if ref.shape != got.shape:
                raise PassCheckError(f"ONNX output {i} has shape {got.shape}, PyTorch {ref.shape}")
            err = max_abs_rel(ref, got)
            if err > ORT_REL_TOL and not rows_match(ref, got, ORT_REL_TOL):
                own = own_error(i)
                if own is None or float(np.abs(ref - got).max()) > FLOAT32_ERROR * own:
                    said = f", float32's own error {own:.3g}" if own is not None else ""
                    raise PassCheckError(f"ONNX Runtime output {i} differs from PyTorch by {err:.3g} x max|output|{said}")
