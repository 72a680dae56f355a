"""Models whose forward returns more than a tensor: say what it returns, and pick tensors out.

Ultralytics outside export mode returns ``(decoded, {"boxes", "scores", "feats"})``; torchvision's
segmenters return ``{"out": ..., "aux": ...}``. ``--outputs`` says which tensors are the
model's outputs: ``flatten`` (every tensor, depth first, dict keys in order) or a comma list
of paths, each a key or index per level (``out``, ``0``, ``1.2``). Without it, a forward
returning anything but a tensor or a flat tuple of tensors stops with a line describing
what it returned.
"""

from __future__ import annotations

import torch
from torch import nn

from edgeport.errors import BadInputError


def output_shapes(outputs) -> tuple[tuple[int, ...], ...]:
    """Each output's shape for one image (batch 1), from the model's outputs on any batch: the
    shapes a file converted from the model has (NCHW; a converter may write them NHWC)."""
    return tuple((1, *(int(d) for d in o.shape[1:])) for o in outputs)


def describe(out, depth: int = 0) -> str:
    """``dict{out: Tensor(1, 21, 64, 64), aux: Tensor(...)}``, ``tuple(Tensor(1, 5, 2100), list[3])``."""
    if isinstance(out, torch.Tensor):
        return f"Tensor{tuple(out.shape)}"
    if depth >= 2:
        return f"{type(out).__name__}[{len(out)}]" if isinstance(out, (list, tuple, dict)) else type(out).__name__
    if isinstance(out, dict):
        return "dict{" + ", ".join(f"{k}: {describe(v, depth + 1)}" for k, v in out.items()) + "}"
    if isinstance(out, (list, tuple)):
        return f"{type(out).__name__}(" + ", ".join(describe(v, depth + 1) for v in out) + ")"
    return type(out).__name__


def is_flat(out) -> bool:
    return isinstance(out, torch.Tensor) or (isinstance(out, (list, tuple)) and bool(out)
                                             and all(isinstance(o, torch.Tensor) for o in out))


def _flatten(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        return [t for v in out.values() for t in _flatten(v)]
    if isinstance(out, (list, tuple)):
        return [t for v in out for t in _flatten(v)]
    return []


def _at(out, path: str):
    node = out
    for part in path.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, (list, tuple)) and part.lstrip("-").isdigit() and -len(node) <= int(part) < len(node):
            node = node[int(part)]
        else:
            raise BadInputError(f"--outputs {path!r}: no {part!r} in {describe(node)}; pick keys or indices of "
                                f"what the model returns, or --outputs flatten")
    if not isinstance(node, torch.Tensor):
        raise BadInputError(f"--outputs {path!r} is a {describe(node)}, not a tensor; go one level deeper (e.g. {path}.0)")
    return node


def select(out, spec: str) -> tuple[torch.Tensor, ...]:
    tensors = _flatten(out) if spec == "flatten" else [_at(out, p.strip()) for p in spec.split(",") if p.strip()]
    if not tensors:
        raise BadInputError(f"--outputs {spec!r} selects no tensor from {describe(out)}")
    return tuple(tensors)


class OutputSelector(nn.Module):
    """The user's model, returning the tensors ``spec`` picks: what export and parity see."""

    def __init__(self, model: nn.Module, spec: str):
        super().__init__()
        self.model, self.spec = model, spec
        for name in ("stride", "cfg"):  # what edgeport reads off a model stays readable
            if hasattr(model, name):
                setattr(self, name, getattr(model, name))

    def forward(self, x):
        return select(self.model(x), self.spec)


def tensor_paths(out, prefix: str = "") -> list[str]:
    """The ``--outputs`` path of every tensor in a forward's result, depth first (``0.boxes``)."""
    if isinstance(out, torch.Tensor):
        return [prefix or "0"]
    items = out.items() if isinstance(out, dict) else enumerate(out) if isinstance(out, (list, tuple)) else ()
    return [p for k, v in items for p in tensor_paths(v, f"{prefix}.{k}" if prefix else str(k))]


def require_tensors(out, spec: str | None) -> None:
    """A forward's result is usable as it is, or ``--outputs`` is needed: say so in one line."""
    if spec is None and not is_flat(out):
        paths = tensor_paths(out)
        example = ",".join(paths[:2]) if paths else "0"
        raise BadInputError(f"the model returns {describe(out)}, not a tensor or a tuple of tensors; pass --outputs "
                            f"with the keys or indices of the tensors to compare (e.g. --outputs {example}), or --outputs flatten")


def require_fixed_outputs(first, second, spec: str | None) -> None:
    """Outputs a TFLite file can have: float tensors whose shapes do not depend on the image. A
    post-processed detector (NMS, top-k over a threshold) returns as many boxes as it finds, and
    integer labels: those stop here, with the way out."""
    way_out = ("export the raw head instead: --outputs naming its tensors, or --arch module:callable returning a model "
               "whose forward stops before the post-processing (torchvision: the head's outputs before postprocess_detections)")
    for k, a in enumerate(first):
        if not a.is_floating_point():
            raise BadInputError(f"output {k} ({describe(a)}) is {str(a.dtype).replace('torch.', '')}, not floating point "
                                f"(labels or indices of a post-processed result); {way_out}")
    for k, (a, b) in enumerate(zip(first, second)):
        if 0 in a.shape or 0 in b.shape:
            raise BadInputError(f"output {k} is empty for an image ({tuple(a.shape)}, {tuple(b.shape)}): the model returns "
                                f"only what survives its post-processing (a score threshold, NMS); {way_out}")
        if tuple(a.shape) != tuple(b.shape):
            raise BadInputError(f"output {k}'s shape depends on the image ({tuple(a.shape)} for one, {tuple(b.shape)} for "
                                f"another): the model post-processes its detections; {way_out}")
    if len(first) != len(second):
        raise BadInputError(f"the model returns {len(first)} outputs for one image and {len(second)} for another; {way_out}")
