"""Load the checkpoint safely and find the weights in it (``checkpoints.py`` does the I/O).

A checkpoint that needs arbitrary unpickling is refused unless the user passes
``--trust-checkpoint``; weights holding NaN or Inf are refused by tensor name.
"""

from __future__ import annotations

from edgeport.checkpoints import check_finite, find_weights, torch_load
from edgeport.convert.base import Pass, PassResult, State
from edgeport.errors import PassCheckError


class LoadCheckpointPass(Pass):
    name = "load_checkpoint"

    def run(self, state: State) -> PassResult:
        cfg = state.config
        obj = torch_load(cfg.checkpoint, trust=cfg.trust_checkpoint)
        layout, sd, module, arch, arch_config = find_weights(obj)
        check_finite(sd.items() if sd is not None else module.state_dict().items(), cfg.checkpoint)
        new = state.evolve(
            layout=layout, state_dict=sd, module=module, arch=arch, arch_config=arch_config
        )
        n = len(sd) if sd is not None else sum(1 for _ in module.state_dict())
        return PassResult(new, changed=True, summary=f"{layout}, {n} tensors")

    def check(self, before: State, after: State) -> None:
        if (after.state_dict is None) == (after.module is None):
            raise PassCheckError("expected exactly one of a state_dict or a module after loading")
