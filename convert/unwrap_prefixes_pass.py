"""Pass 2: strip what DDP and torch.compile add, nested in any order.

DDP saves keys as ``module.<name>``; ``torch.compile`` as ``_orig_mod.<name>`` (also inside
sub-modules that were compiled on their own). A pickled wrapper object is unwrapped to the
module it wraps.
"""

from __future__ import annotations

from typing import Any

from edgeport.convert.base import Pass, PassResult, State
from edgeport.errors import PassCheckError

DDP_PREFIX = "module."
COMPILE_PART = "_orig_mod"


def strip_state_dict(sd: dict) -> tuple[dict, int]:
    """``module._orig_mod.module.backbone._orig_mod.conv`` -> ``backbone.conv``.

    A leading wrapper part is removed only while every key carries it (DDP prefixes all
    keys), so a model whose own child is called ``module`` keeps its names.
    """
    keys = list(sd)
    parts = [k.split(".") for k in keys]
    while parts and all(len(p) > 1 and p[0] == parts[0][0] for p in parts) and parts[0][0] in (
        "module",
        COMPILE_PART,
    ):
        parts = [p[1:] for p in parts]
    # torch.compile reserves `_orig_mod`: it also appears deeper for compiled sub-modules
    new_keys = [".".join(x for x in p if x != COMPILE_PART) for p in parts]
    if len(set(new_keys)) != len(new_keys):
        raise PassCheckError("two checkpoint keys map to the same name after removing DDP/compile prefixes")
    out = dict(zip(new_keys, sd.values()))
    return out, sum(a != b for a, b in zip(keys, new_keys))


def unwrap_module(module: Any) -> tuple[Any, list[str]]:
    """Peel DistributedDataParallel / DataParallel / compiled wrappers off a module object."""
    from torch import nn

    peeled: list[str] = []
    while True:
        if isinstance(module, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            peeled.append(type(module).__name__)
            module = module.module
        elif hasattr(module, "_orig_mod") and isinstance(module._orig_mod, nn.Module):
            peeled.append(type(module).__name__)
            module = module._orig_mod
        else:
            return module, peeled


class UnwrapPrefixesPass(Pass):
    name = "unwrap"

    def run(self, state: State) -> PassResult:
        if state.state_dict is not None:
            sd, n = strip_state_dict(state.state_dict)
            return PassResult(state.evolve(state_dict=sd), changed=n > 0, summary=f"{n} keys renamed")
        module, peeled = unwrap_module(state.module)
        summary = f"unwrapped {' > '.join(peeled)}" if peeled else "no wrapper"
        return PassResult(state.evolve(module=module), changed=bool(peeled), summary=summary)

    def check(self, before: State, after: State) -> None:
        if after.state_dict is not None:
            keys = list(after.state_dict)
            left = [k for k in keys if COMPILE_PART in k.split(".")]
            if keys and all(k.startswith(DDP_PREFIX) for k in keys):
                left = keys
            if left:
                raise PassCheckError(f"wrapper prefixes remain after unwrap: {left[:3]}")
        else:
            _, peeled = unwrap_module(after.module)
            if peeled:
                raise PassCheckError(f"a {peeled[0]} wrapper remains after unwrap")
