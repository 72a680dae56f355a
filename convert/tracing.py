"""torch.fx tracing shared by the model passes.

edgeport's own board upsample is a leaf: its forward has data-dependent indexing and an
export-time branch that symbolic tracing must not look into. So is every BatchNorm,
subclasses included (timm's ``BatchNormAct2d``): the BN fold must see it as one call.
"""

from __future__ import annotations

from torch import fx, nn
from torch.nn.modules.batchnorm import _BatchNorm

from edgeport.ops.board_upsample import BoardUpsample

LEAF_MODULES = (BoardUpsample, _BatchNorm)


class _Tracer(fx.Tracer):
    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        return isinstance(m, LEAF_MODULES) or super().is_leaf_module(m, module_qualified_name)


def trace(module: nn.Module) -> fx.GraphModule:
    if isinstance(module, fx.GraphModule):
        return module
    graph = _Tracer().trace(module)
    return fx.GraphModule(module, graph, module.__class__.__name__)
