"""Load the checkpoint safely and find the weights in it (``checkpoints.py`` does the I/O).

A checkpoint that needs arbitrary unpickling is refused unless the user passes
``--trust-checkpoint``; weights holding NaN or Inf are refused by tensor name.
"""

from __future__ import annotations

from edgeport.checkpoints import check_finite, find_weights, recorded_imgsz, torch_load
from edgeport.convert.base import Checkpoint, ConvertConfig, Pass, PassResult
from edgeport.errors import PassCheckError


class LoadCheckpointPass(Pass[ConvertConfig, Checkpoint]):
    name = "load_checkpoint"

    def run(self, value: ConvertConfig, config: ConvertConfig) -> PassResult[Checkpoint]:
        obj = torch_load(config.checkpoint, trust=config.trust_checkpoint)
        layout, sd, module, arch, arch_config = find_weights(obj)
        check_finite(sd.items() if sd is not None else module.state_dict().items(), config.checkpoint)
        n = len(sd) if sd is not None else sum(1 for _ in module.state_dict())
        imgsz = recorded_imgsz(obj)
        return PassResult(Checkpoint(config.checkpoint, layout, sd, module, arch, arch_config, imgsz), changed=True,
                          summary=f"{layout}, {n} tensors" + (f", trained at {imgsz} px" if imgsz else ""))

    def check(self, before: ConvertConfig, after: Checkpoint, config: ConvertConfig) -> None:
        if (after.state_dict is None) == (after.module is None):
            raise PassCheckError("expected exactly one of a state_dict or a module after loading")
