"""Build the architecture and load the weights strictly.

The architecture comes from ``--arch`` (a registry name or ``module:callable``) or from the
checkpoint itself (the trainer stores its name and config). A mismatch is reported as a
readable diff of missing, unexpected and shape-mismatched keys, never as torch's wall of text.
"""

from __future__ import annotations

import copy

from edgeport.convert.base import Checkpoint, ConvertConfig, Model, Pass, PassResult
from edgeport.errors import ArchitectureError, KeyMismatchError, PassCheckError
from edgeport.models.registry import REGISTRY, arch_names, build_model, framework_hint, model_stride

SHOW = 3  # keys shown per category in the one-line diff


def key_diff(model_sd: dict, ckpt_sd: dict) -> tuple[list[str], list[str], list[str]]:
    missing = [k for k in model_sd if k not in ckpt_sd]
    unexpected = [k for k in ckpt_sd if k not in model_sd]
    mismatched = [
        f"{k} {list(ckpt_sd[k].shape)} vs {list(model_sd[k].shape)}"
        for k in model_sd
        if k in ckpt_sd and tuple(ckpt_sd[k].shape) != tuple(model_sd[k].shape)
    ]
    return missing, unexpected, mismatched


def format_diff(arch: str, missing: list[str], unexpected: list[str], mismatched: list[str], *, named_by_file: bool = False) -> str:
    parts = []
    for label, keys in (("missing", missing), ("unexpected", unexpected), ("shape mismatch (ckpt vs model)", mismatched)):
        if keys:
            more = f", +{len(keys) - SHOW} more" if len(keys) > SHOW else ""
            parts.append(f"{len(keys)} {label}: {', '.join(keys[:SHOW])}{more}")
    what = f"the architecture the checkpoint names ({arch})" if named_by_file else f"--arch {arch}"
    return (
        f"checkpoint weights do not fit {what}: {'; '.join(parts)}; pass the architecture it "
        f"was trained with (--arch: {', '.join(arch_names())} or module:callable)"
    )


def architecture_from_file(arch: str, *, trusted: bool) -> str:
    """The architecture a checkpoint names for itself. A file is data: it may name a registry
    architecture, never code to import (``module:callable``), unless the user trusts it."""
    if ":" in arch and not trusted:
        raise ArchitectureError(
            f"the checkpoint names its architecture {arch!r}, which is code to import and run; edgeport imports code only "
            f"when you ask: pass --arch {arch} yourself if you trust that module, or --trust-checkpoint")
    if ":" not in arch and arch not in REGISTRY:
        raise ArchitectureError(
            f"the checkpoint names architecture {arch!r}, which is not in edgeport's registry; pass --arch NAME "
            f"(valid: {', '.join(arch_names())}) or --arch package.module:callable")
    return arch


class BuildModelPass(Pass[Checkpoint, Model]):
    name = "build"

    def run(self, value: Checkpoint, config: ConvertConfig) -> PassResult[Model]:
        named_by_file = config.arch is None and value.arch is not None
        arch = config.arch or value.arch
        if value.module is not None:
            model = value.module
            summary = f"pickled {type(model).__name__}"
            arch_config = value.arch_config
            if config.arch:
                summary += " (--arch ignored: the checkpoint holds the module itself)"
            arch = arch or type(model).__name__
        else:
            if arch is None:
                hint = framework_hint(value.state_dict)
                raise ArchitectureError(
                    "the checkpoint does not name its architecture; "
                    + (hint if hint else f"pass --arch NAME (valid: {', '.join(arch_names())}) or --arch package.module:callable")
                )
            if named_by_file:
                architecture_from_file(arch, trusted=config.trust_checkpoint)
            # A stored config is only meaningful for the architecture it was stored with.
            stored = value.arch_config if (value.arch and arch == value.arch) else None
            model, arch_config = build_model(arch, stored, origin="the checkpoint's architecture" if named_by_file else "--arch")
            sd = value.state_dict
            missing, unexpected, mismatched = key_diff(model.state_dict(), sd)
            if missing or unexpected or mismatched:
                hint = framework_hint(sd) if ":" not in arch else None
                raise KeyMismatchError(format_diff(arch, missing, unexpected, mismatched, named_by_file=named_by_file)
                                       + (f"; {hint}" if hint else ""))
            model.load_state_dict(sd, strict=True)
            summary = f"{arch}, {sum(p.numel() for p in model.parameters()):,} params"
        model = model.float().eval()
        built = Model(value, model, copy.deepcopy(model), arch, arch_config, model_stride(model),
                      tuple(getattr(getattr(model, "cfg", None), "strides", ()) or ()))
        return PassResult(built, changed=True, summary=summary)

    def check(self, before: Checkpoint, after: Model, config: ConvertConfig) -> None:
        from torch import nn

        if not isinstance(after.module, nn.Module):
            raise PassCheckError(f"build produced a {type(after.module).__name__}, not an nn.Module")
        if after.module.training:
            raise PassCheckError("model is still in training mode after build")
        if before.state_dict is not None:
            got = after.module.state_dict()
            for key, value in before.state_dict.items():
                if not (got[key].float() == value.float()).all():
                    raise PassCheckError(f"weight {key} differs from the checkpoint after loading")
