"""The converters by name (``convert/converters/base.py`` says what one is)."""

from __future__ import annotations

from edgeport.convert.converters.base import NAMES, Converter
from edgeport.convert.converters.litert import LiteRTTorch
from edgeport.convert.converters.onnx2tf import Onnx2tf

CONVERTERS: dict[str, Converter] = {c.name: c for c in (Onnx2tf(), LiteRTTorch())}
assert tuple(CONVERTERS) == NAMES, "convert/converters/base.py NAMES lists the converters, in this order"


def converter(name: str) -> Converter:
    return CONVERTERS[name]


def other(name: str) -> Converter:
    """The converter a ``--cross-check`` compares ``name``'s float32 file with."""
    return CONVERTERS["litert-torch" if name == "onnx2tf" else "onnx2tf"]
