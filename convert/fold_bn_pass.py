"""Fold each BatchNorm into the convolution that feeds it (eval mode, on a copy).

``y = gamma * (conv(x) - mean) / sqrt(var + eps) + beta`` is itself a convolution with
scaled weights and a new bias, so after folding the graph has no BatchNormalization for
the converter to handle. Pairs are found on the traced graph (torch.fx), so models that
call ``self.bn(self.conv(x))`` fold as well as ``nn.Sequential(conv, bn)``; when tracing
fails the pass falls back to consecutive children of containers. A BatchNorm whose input
is not a convolution used only by it is left in place, and stays correct.
"""

from __future__ import annotations

import copy

from torch import fx, nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.utils.fusion import fuse_conv_bn_eval

from edgeport.convert.base import Pass, PassResult, State
from edgeport.convert.modelcheck import assert_same_outputs
from edgeport.convert.tracing import trace
from edgeport.errors import PassCheckError

CONV_TYPES = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
# float32 folding reorders a multiply: allow a few ulps relative to the output's range
FOLD_REL_TOL = 1e-5


def _set_submodule(root: nn.Module, target: str, new: nn.Module) -> None:
    parent_name, _, attr = target.rpartition(".")
    parent = root.get_submodule(parent_name) if parent_name else root
    setattr(parent, attr, new)


def _fold_traced(module: nn.Module) -> tuple[nn.Module, int]:
    gm = trace(module)
    mods = dict(gm.named_modules())
    folded = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_module" or not isinstance(mods.get(node.target), _BatchNorm):
            continue
        src = node.args[0] if node.args else None
        if not isinstance(src, fx.Node) or src.op != "call_module" or len(src.users) != 1:
            continue
        conv, bn = mods.get(src.target), mods[node.target]
        if not isinstance(conv, CONV_TYPES) or not bn.track_running_stats:
            continue
        _set_submodule(gm, src.target, fuse_conv_bn_eval(conv, bn))
        _set_submodule(gm, node.target, nn.Identity())
        node.replace_all_uses_with(src)
        gm.graph.erase_node(node)
        folded += 1
    gm.graph.lint()
    gm.delete_all_unused_submodules()
    gm.recompile()
    return gm, folded


def _fold_sequential(module: nn.Module) -> tuple[nn.Module, int]:
    folded = 0
    for parent in list(module.modules()):
        children = list(parent.named_children())
        for (cname, conv), (bname, bn) in zip(children, children[1:]):
            if isinstance(parent, nn.Sequential) and isinstance(conv, CONV_TYPES) and isinstance(bn, _BatchNorm):
                if bn.track_running_stats:
                    setattr(parent, cname, fuse_conv_bn_eval(conv, bn))
                    setattr(parent, bname, nn.Identity())
                    folded += 1
    return module, folded


def fold_batchnorm(module: nn.Module) -> tuple[nn.Module, int, str]:
    """Return (folded copy, number folded, method). The input module is not modified."""
    module = copy.deepcopy(module).eval()
    try:
        gm, n = _fold_traced(module)
        return gm, n, "fx"
    except Exception:  # noqa: BLE001 - fx cannot trace every model; fall back
        m, n = _fold_sequential(copy.deepcopy(module))
        return m, n, "sequential"


def conv_bn_pairs_left(module: nn.Module) -> int:
    """BatchNorms still sitting right after a convolution in a container."""
    count = 0
    for parent in module.modules():
        children = list(parent.children())
        count += sum(
            isinstance(a, CONV_TYPES) and isinstance(b, _BatchNorm) and isinstance(parent, nn.Sequential)
            for a, b in zip(children, children[1:])
        )
    return count


class FoldBNPass(Pass):
    name = "fold_bn"

    def run(self, state: State) -> PassResult:
        module, n, method = fold_batchnorm(state.module)
        left = sum(isinstance(m, _BatchNorm) for m in module.modules())
        summary = f"{n} BatchNorm folded into Conv ({method})" + (f", {left} left as BatchNorm" if left else "")
        return PassResult(state.evolve(module=module.eval()), changed=n > 0, summary=summary)

    def check(self, before: State, after: State) -> None:
        left = conv_bn_pairs_left(after.module)
        if left:
            raise PassCheckError(f"{left} Conv->BatchNorm pairs were not folded")
        assert_same_outputs(self.name, before.module, after.module, after.calib[:2], rel_tol=FOLD_REL_TOL)
