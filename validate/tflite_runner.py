"""The TFLite runner: optimised (XNNPACK) or reference (BUILTIN_REF) kernels."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeport._lazy import require
from edgeport.validate.runners import Runner
from edgeport.validate.tensors import dequantize, match_outputs, nchw_to_nhwc, nhwc_to_nchw, quantize

KERNELS = ("optimized", "reference")


def load_interpreter(path: Path, *, kernels: str = "optimized", preserve_all_tensors: bool = False):
    litert = require("ai_edge_litert.interpreter", package="ai-edge-litert", purpose="running TFLite models")
    if kernels not in KERNELS:
        raise ValueError(f"kernels={kernels!r}; valid: {', '.join(KERNELS)}")
    resolver = (
        litert.OpResolverType.BUILTIN_REF if kernels == "reference" else litert.OpResolverType.AUTO
    )
    interp = litert.Interpreter(
        model_path=str(path),
        num_threads=1,
        experimental_op_resolver_type=resolver,
        experimental_preserve_all_tensors=preserve_all_tensors,
    )
    interp.allocate_tensors()
    return interp


class TFLiteRunner(Runner):
    runtime = "tflite"

    def __init__(self, path: Path, expected_nchw: list[tuple[int, ...]], *, kernels: str = "optimized"):
        self.interp = load_interpreter(path, kernels=kernels)
        if kernels == "reference":
            self.runtime = "tflite-ref"
        (self.inp,) = self.interp.get_input_details()
        outs = self.interp.get_output_details()
        self.mapping = [(outs[i], nhwc) for i, nhwc in match_outputs(expected_nchw, [tuple(o["shape"]) for o in outs])]

    def _run_one(self, x):
        inp = self.inp
        # onnx2tf takes 4-D inputs as NHWC: transpose when that is the shape the model wants
        nhwc = x.ndim == 4 and tuple(inp["shape"]) == (x.shape[0], x.shape[2], x.shape[3], x.shape[1])
        data = nchw_to_nhwc(x) if nhwc else x
        dtype = np.dtype(inp["dtype"])
        if dtype != np.float32:
            scale, zp = inp["quantization"]
            data = quantize(data, scale, zp, dtype)
        self.interp.set_tensor(inp["index"], data)
        self.interp.invoke()
        results = []
        for detail, is_nhwc in self.mapping:
            y = self.interp.get_tensor(detail["index"])
            if np.dtype(detail["dtype"]) != np.float32:
                scale, zp = detail["quantization"]
                y = dequantize(y, scale, zp)
            results.append(nhwc_to_nchw(y) if is_nhwc else y)
        return results
