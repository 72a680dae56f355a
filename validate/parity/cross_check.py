"""Two converters' float32 files of one model, against each other (``convert --cross-check``).

onnx2tf converts the ONNX graph, litert-torch the PyTorch program: independent routes. Where
their files agree, a parity failure is the model's (or the board's); where they part, one
converter computes something else, and the first tensor where they part says where. Both files
run on TFLite's reference kernels (deterministic, one thread) on the same images; outputs are
paired by shape and compared as NCHW, relative to the shipped file's largest output value.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

# float32 rounding of two correct conversions stays near 1e-6 of the output's range (measured
# on the zoo: docs/converters.md); a converter that computes something else is far past this
AGREE_REL = 1e-5


def compare_files(shipped: Path, other: Path, images: np.ndarray, expected_nchw, *, tolerance: float = AGREE_REL,
                  names: tuple[str, str] = ("the shipped", "the other converter's")) -> dict:
    """Whether ``shipped`` and ``other`` compute the same on ``images`` (NCHW float32): the worst
    output's max |difference| over the shipped output's max |value| (``max_abs_rel``) and each output's,
    and where they first part (or None); ``ran`` false, with the reason
    (``names`` say which file), where either does not run on the reference kernels. Also the board
    lowering's check (``convert/passes/lower_for_board_pass.py``)."""
    from edgeport.validate.parity.divergence import locate, tflite_intermediates
    from edgeport.validate.parity.runners import RuntimeRefused
    from edgeport.validate.parity.tflite_runner import TFLiteRunner

    outputs = []
    for which, path in zip(names, (shipped, other)):
        try:
            outputs.append(TFLiteRunner(path, expected_nchw, kernels="reference").run(images).outputs)
        except (RuntimeRefused, ValueError) as exc:  # a file no builtin kernel runs (a Flex op), outputs that do not pair up
            return {"ran": False, "reason": f"{which} float32 file cannot be compared: {exc}"}
    a, b = outputs
    per_output = [float(np.abs(x - y).max()) / max(float(np.abs(x).max()), 1e-12) for x, y in zip(a, b, strict=True)]
    worst = float(np.max(per_output))  # NaN anywhere stays NaN, and NaN never agrees
    result = {"ran": True, "images": int(images.shape[0]), "max_abs_rel": worst, "per_output": per_output, "tolerance": tolerance,
              "agree": bool(worst <= tolerance), "first_parting": None}
    if not result["agree"]:
        x = images[:1]
        # both files' tensors are read the same raw way (NHWC inside, whichever converter wrote them);
        # the other's both ways, so a tensor one converter keeps NCHW still pairs
        found = locate(tflite_intermediates(shipped, x, "nhwc"), tflite_intermediates(other, x, "both"),
                       max_abs_rel=tolerance, min_cosine=None)
        if found.first is not None:
            f = found.first
            result["first_parting"] = {"op": f.reference_type, "tensor": f.reference, "other_op": f.candidate_type,
                                       "other_tensor": f.candidate, "max_abs_rel": f.max_abs_rel, "index": f.index}
    return result
