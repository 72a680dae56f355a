"""The architecture registry: a name maps to a factory and its default config.

``--arch`` takes a registered name, or ``package.module:callable`` imported from the
current directory or PYTHONPATH that returns an ``nn.Module``.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from torch import nn

from edgeport.errors import ArchitectureError
from edgeport.models.pdet import DetectorConfig, PDet


@dataclass(frozen=True)
class ArchSpec:
    name: str
    factory: Callable[[DetectorConfig], nn.Module]
    config: DetectorConfig
    summary: str


PDET_N = DetectorConfig(widths=(16, 24, 32, 48, 80), neck_width=32, depth=1)

# The registry is a plain literal: adding an architecture is adding a line here.
REGISTRY: dict[str, ArchSpec] = {
    spec.name: spec
    for spec in (
        ArchSpec("pdet-n", PDet, PDET_N, "person detector, nano: 0.32M params, 160-320 px on a CPU (default)"),
        ArchSpec("pdet-s", PDet, DetectorConfig(widths=(16, 32, 64, 128, 192), neck_width=64, depth=1),
                 "person detector, small: 1.7M params, 224-320 px"),
        ArchSpec("pdet-n-bilinear", PDet, replace(PDET_N, upsample="bilinear"),
                 "pdet-n with bilinear (align_corners=False) upsampling in the neck"),
        ArchSpec("pdet-n-board", PDet, replace(PDET_N, upsample="board_bilinear"),
                 "pdet-n trained with TFLite 1.13's own bilinear resize (BoardUpsample)"),
        ArchSpec("pdet-n-leaky-spp", PDet, replace(PDET_N, act="leaky_relu", spp=True),
                 "pdet-n in the write-up's style: LeakyReLU(0.1) and an SPP block before the upsampling neck"),
    )
}

DEFAULT_ARCH = "pdet-n"


def arch_names() -> list[str]:
    return sorted(REGISTRY)


# Key patterns of other frameworks' state_dicts, with the one-line factory a user writes for each
# (in a module of their own, passed as --arch my_models:NAME; edgeport imports none of them). Checked in order; the first whose every pattern matches names it.
FRAMEWORK_HINTS = (
    (("model.0.conv.weight", ".dfl."), "Ultralytics YOLO",
     "def yolo(): from ultralytics import YOLO; m = YOLO('yolov8n.yaml').model; m.model[-1].export = True; return m"),
    (("model.0.conv.weight", "model.24.m."), "Ultralytics YOLOv5",
     "def yolo(): from ultralytics import YOLO; m = YOLO('yolov5nu.yaml').model; m.model[-1].export = True; return m"),
    (("backbone.body.", "head."), "a torchvision detector",
     "def det(): import torchvision; return torchvision.models.detection.fcos_resnet50_fpn(weights=None, num_classes=N)"),
    (("layer1.", "fc."), "a torchvision ResNet",
     "def net(): import torchvision; return torchvision.models.resnet18(num_classes=N)"),
    (("features.", "classifier."), "a torchvision MobileNet/EfficientNet",
     "def net(): import torchvision; return torchvision.models.mobilenet_v3_large(num_classes=N)"),
    (("stem.", "stages."), "a timm model (ConvNeXt, RegNet, ...)",
     "def net(): import timm; return timm.create_model('convnext_atto', pretrained=False, num_classes=N)"),
    (("conv_stem.", "blocks."), "a timm model (EfficientNet, MobileNetV3, GhostNet, ...)",
     "def net(): import timm; return timm.create_model('efficientnet_b0', pretrained=False, num_classes=N)"),
)


def framework_hint(keys) -> str | None:
    """Which framework a state_dict's keys look like, and the factory to write for it; None if none."""
    keys = [k.removeprefix("module.").removeprefix("_orig_mod.") for k in keys]
    for patterns, framework, factory in FRAMEWORK_HINTS:
        if all(any((k.startswith(p) if p.endswith(".") and not p.startswith(".") else p in k) for k in keys) for p in patterns):
            return (f"its keys look like {framework}: put `{factory}` in a module of yours (my_models.py) and pass "
                    f"--arch my_models:{factory.split('(')[0].split()[-1]} (docs/zoo.md)")
    return None


def build_model(arch: str, config: dict | None = None, *, origin: str = "--arch") -> tuple[nn.Module, dict | None]:
    """Build ``arch`` (registry name or ``module:callable``). Returns the model and its config dict.
    ``origin`` says in errors where the name came from."""
    if ":" in arch:
        return _build_from_callable(arch, origin), None
    spec = REGISTRY.get(arch)
    if spec is None:
        raise ArchitectureError(
            f"unknown architecture {arch!r}; valid: {', '.join(arch_names())} "
            f"(or package.module:callable returning an nn.Module)"
        )
    cfg = spec.config
    if config:
        try:
            cfg = DetectorConfig.from_dict({**cfg.to_dict(), **config})
        except (TypeError, ValueError) as exc:
            raise ArchitectureError(f"config stored for {arch!r} is invalid: {exc}") from exc
    return spec.factory(cfg), cfg.to_dict()


def _build_from_callable(target: str, origin: str) -> nn.Module:
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ArchitectureError(f"{origin} {target!r} must look like package.module:callable")
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        # Users keep their model code next to the checkpoint; import it from there.
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ArchitectureError(
            f"{origin} {target!r}: cannot import {module_name!r} ({exc}); run from the folder "
            f"that holds it or add it to PYTHONPATH"
        ) from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ArchitectureError(f"{origin} {target!r}: {module_name} has no callable {attr!r}")
    try:
        model = fn()
    except Exception as exc:  # user code: report any failure as bad input
        raise ArchitectureError(f"{origin} {target!r}: calling {attr}() failed: {exc}") from exc
    if not isinstance(model, nn.Module):
        raise ArchitectureError(
            f"{origin} {target!r}: {attr}() returned {type(model).__name__}, expected an nn.Module"
        )
    return model


def level_strides(model: nn.Module) -> tuple[int, ...]:
    """The strides the model says its levels have: ``stride``, an int, a list or a tensor of per-level
    strides (Ultralytics keeps ``tensor([8., 16., 32.])``); () where it says none."""
    stride = getattr(model, "stride", None)
    if stride is None and hasattr(model, "cfg"):
        stride = getattr(model.cfg, "stride", None)
    if stride is None:
        return ()
    try:
        import torch

        values = torch.as_tensor(stride, dtype=torch.float64).flatten().tolist()
    except (TypeError, ValueError, RuntimeError):
        return ()
    return tuple(int(v) for v in values if v > 0 and float(v).is_integer())


def model_stride(model: nn.Module) -> int:
    """The largest downsampling factor the model says it has (``level_strides``): the input size must
    be a multiple of it. 0 where it says none: any size it runs at (a fixed-size net, a classifier)."""
    return max(level_strides(model), default=0)


def model_output_names(model: nn.Module, n_outputs: int) -> list[str]:
    cfg = getattr(model, "cfg", None)
    names = list(getattr(cfg, "output_names", ()) or ())
    if len(names) == n_outputs:
        return names
    return [f"output{i}" for i in range(n_outputs)]
