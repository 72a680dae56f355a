"""Named ways a board computes differently from TFLite's reference kernels.

The board emulator is the reference kernels plus the differences its profile names
(``differences = [...]`` in the profile). Each difference is one small unit that rewrites
a copy of the model so that the reference kernels compute what that board computes.
"""

from __future__ import annotations

import abc
from typing import ClassVar

from edgeport.errors import BadInputError


class Difference(abc.ABC):
    name: ClassVar[str]
    description: ClassVar[str]

    @abc.abstractmethod
    def apply(self, model: bytes) -> tuple[bytes, int]:
        """Return the model as the board would run it, and how many ops were affected."""


class IgnoreHalfPixelCenters(Difference):
    """A runtime that loads RESIZE_BILINEAR v3 but ignores ``half_pixel_centers``.

    What the write-up's board effectively did to PyTorch's bilinear upsample: the kernel
    samples ``x * in / out`` instead of ``(x + 0.5) * in / out - 0.5``. The flag is a bool
    stored in place in the flatbuffer, so clearing it is a one-byte edit per op.
    """

    name = "ignore_half_pixel_centers"
    description = "RESIZE_BILINEAR runs without half-pixel centres whatever the model says (a pre-2.2 kernel)"
    _FIELD = 10  # vtable offset of ResizeBilinearOptions.half_pixel_centers in TFLite's schema

    def apply(self, model: bytes) -> tuple[bytes, int]:
        from edgeport.ops.tflite_model import operators

        buf = bytearray(model)
        changed = 0
        for schema, _, op in operators(model, ("RESIZE_BILINEAR",)):
            if op.BuiltinOptions() is None:
                continue
            opts = schema.ResizeBilinearOptions()
            table = op.BuiltinOptions()
            opts.Init(table.Bytes, table.Pos)
            if opts.HalfPixelCenters():
                buf[opts._tab.Pos + opts._tab.Offset(self._FIELD)] = 0
                changed += 1
        return bytes(buf), changed


DIFFERENCES: dict[str, Difference] = {d.name: d for d in (IgnoreHalfPixelCenters(),)}


def get_difference(name: str) -> Difference:
    if name not in DIFFERENCES:
        raise BadInputError(f"unknown board difference {name!r}; valid: {', '.join(DIFFERENCES)}")
    return DIFFERENCES[name]
