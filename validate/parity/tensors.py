"""Layout and quantisation adapters: the one place NCHW<->NHWC and int8 (de)quantisation happen.

PyTorch and ONNX speak NCHW; onnx2tf's TFLite speaks NHWC for 4-D tensors, and an int8
model takes and returns int8 with a (scale, zero_point) pair per tensor.
"""

from __future__ import annotations

import numpy as np

from edgeport.errors import BadInputError


def nchw_to_nhwc(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if x.ndim == 4 else x


def nhwc_to_nchw(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if x.ndim == 4 else x


def quantize(x: np.ndarray, scale: float, zero_point: int, dtype: np.dtype) -> np.ndarray:
    """Affine quantisation with round-half-to-even, as TFLite's quantize op does."""
    info = np.iinfo(dtype)
    q = np.round(x / scale) + zero_point
    return np.clip(q, info.min, info.max).astype(dtype)


def dequantize(q: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    return ((q.astype(np.float32) - zero_point) * np.float32(scale)).astype(np.float32)


def to_model_input(x: np.ndarray, shape, dtype, quant: tuple[float, int]) -> np.ndarray:
    """NCHW float input -> what a converted model takes: NHWC when its input is laid out that
    way (onnx2tf's 4-D inputs), quantised when its input is integer."""
    shape = tuple(int(v) for v in shape)
    data = nchw_to_nhwc(x) if x.ndim == 4 and shape == (x.shape[0], x.shape[2], x.shape[3], x.shape[1]) else x
    dtype = np.dtype(dtype)
    if dtype != np.float32:
        data = quantize(data, quant[0], quant[1], dtype)
    return np.ascontiguousarray(data)


def from_model_output(y: np.ndarray, dtype, quant: tuple[float, int], nhwc: bool) -> np.ndarray:
    """A converted model's output -> float32 (dequantised), NCHW."""
    if np.dtype(dtype) != np.float32:
        y = dequantize(y, quant[0], quant[1])
    return nhwc_to_nchw(y) if nhwc else y


def denormalise(outputs: list[np.ndarray], plans) -> list[np.ndarray]:
    """An int8 file whose output groups were divided before conversion (``convert/converters/int8_groups.py``:
    per output, ``(axis, start, stop, factor)``) -> its outputs in the model's own units."""
    restored = []
    for out, plan in zip(outputs, plans):
        out = out.copy()
        for axis, start, stop, factor in plan:
            out[(slice(None),) * axis + (slice(start, stop),)] *= factor
        restored.append(out)
    return restored


class AmbiguousOutputs(BadInputError):
    """Two converted outputs have the shape of one PyTorch output: no way to pair them."""


def match_outputs(expected_nchw: list[tuple[int, ...]], got_shapes: list[tuple[int, ...]]) -> list[tuple[int, bool]]:
    """For each expected NCHW output, the index among ``got_shapes`` and whether it is NHWC.

    onnx2tf does not keep output order or names, so outputs are matched by shape: an NHWC
    match (what onnx2tf emits for 4-D) or an NCHW one. Raises ``ValueError`` when a shape
    matches nothing, and ``AmbiguousOutputs`` when it matches more than one output: pairing
    them by position would compare the wrong tensors without a word.
    """
    mapping = []
    for k, shape in enumerate(expected_nchw):
        nhwc = (shape[0], *shape[2:], shape[1]) if len(shape) == 4 else tuple(shape)
        hits = sorted({(i, len(shape) == 4 and tuple(g) == nhwc) for i, g in enumerate(got_shapes)
                       if tuple(g) in (nhwc, tuple(shape))})
        if not hits:
            raise ValueError(f"no output of shape {shape} (NCHW) among {got_shapes}")
        if len(hits) > 1:
            raise AmbiguousOutputs(
                f"PyTorch output {k} {tuple(shape)} matches converted outputs {[i for i, _ in hits]} of the same shape; "
                f"outputs are paired by shape (converters keep neither names nor order): give the model's outputs distinct shapes"
            )
        mapping.append(hits[0])
    return mapping
