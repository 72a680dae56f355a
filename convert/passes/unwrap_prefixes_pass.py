"""Strip what DDP and torch.compile add, nested in any order (``checkpoints.strip_state_dict``).

DDP saves keys as ``module.<name>``; ``torch.compile`` as ``_orig_mod.<name>`` (also inside
sub-modules that were compiled on their own). A pickled wrapper object is unwrapped to the
module it wraps.
"""

from __future__ import annotations

from dataclasses import replace

from edgeport.checkpoints import COMPILE_PART, DDP_PREFIX, strip_state_dict, unwrap_module
from edgeport.convert.base import Checkpoint, ConvertConfig, Pass, PassResult
from edgeport.errors import PassCheckError


class UnwrapPrefixesPass(Pass[Checkpoint, Checkpoint]):
    name = "unwrap"

    def run(self, value: Checkpoint, config: ConvertConfig) -> PassResult[Checkpoint]:
        if value.state_dict is not None:
            sd, n = strip_state_dict(value.state_dict)
            return PassResult(replace(value, state_dict=sd), changed=n > 0, summary=f"{n} keys renamed")
        module, peeled = unwrap_module(value.module)
        summary = f"unwrapped {' > '.join(peeled)}" if peeled else "no wrapper"
        return PassResult(replace(value, module=module), changed=bool(peeled), summary=summary)

    def check(self, before: Checkpoint, after: Checkpoint, config: ConvertConfig) -> None:
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
