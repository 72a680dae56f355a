"""Named ways a board computes differently from TFLite's reference kernels.

The board emulator is the reference kernels plus the differences its profile names
(``differences = [...]``): each rewrites a copy of the model so that the reference kernels
compute what that board computes.
"""

from __future__ import annotations

import abc
from typing import ClassVar

from edgeport.errors import BadInputError


class Difference(abc.ABC):
    name: ClassVar[str]

    @abc.abstractmethod
    def apply(self, model: bytes) -> tuple[bytes, int]:
        """Return the model as the board would run it, and how many ops were affected."""


class IgnoreHalfPixelCenters(Difference):
    """A runtime that loads RESIZE_BILINEAR v3 but ignores ``half_pixel_centers`` (a pre-2.2 kernel).

    What the write-up's board effectively did to PyTorch's bilinear upsample: it samples ``x * in / out``,
    not ``(x + 0.5) * in / out - 0.5``; with the flag cleared, the reference kernels do the same.
    """

    name = "ignore_half_pixel_centers"

    def apply(self, model: bytes) -> tuple[bytes, int]:
        from edgeport.ops.tflite_graph import Graph

        g = Graph(model)
        changed = 0
        for view in (g.at(i) for i in range(g.subgraphs)):
            for op in view.ops:
                if view.name(op) == "RESIZE_BILINEAR" and op.builtinOptions is not None and op.builtinOptions.halfPixelCenters:
                    op.builtinOptions.halfPixelCenters = False
                    changed += 1
        return (g.to_bytes(), changed) if changed else (model, 0)


DIFFERENCES: dict[str, Difference] = {d.name: d for d in (IgnoreHalfPixelCenters(),)}


def get_difference(name: str) -> Difference:
    if name not in DIFFERENCES:
        raise BadInputError(f"unknown board difference {name!r}; valid: {', '.join(DIFFERENCES)}")
    return DIFFERENCES[name]
