"""Fold each BatchNorm into the convolution that feeds it (eval mode, on a copy).

``y = gamma * (conv(x) - mean) / sqrt(var + eps) + beta`` is itself a convolution with
scaled weights and a new bias, so after folding the graph has no BatchNormalization for
the converter to handle. Pairs are found on the traced graph (torch.fx), so models that
call ``self.bn(self.conv(x))`` fold as well as ``nn.Sequential(conv, bn)``; a model fx
cannot trace as a whole (Ultralytics' layer loop) is folded block by block. The fold is
made in place, so the model keeps its classes. A norm+act layer (timm's ``BatchNormAct2d``)
folds too, its dropout and activation kept. A BatchNorm whose input is not a convolution
used only by it is left in place, stays correct, and the summary counts it.
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from dataclasses import replace

from torch import fx, nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.utils.fusion import fuse_conv_bn_eval

from edgeport.convert.base import ConvertConfig, Pass, PassResult, Prepared
from edgeport.convert.modelcheck import assert_same_outputs
from edgeport.convert.tracing import trace
from edgeport.errors import PassCheckError

CONV_TYPES = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


def _set_submodule(root: nn.Module, target: str, new: nn.Module) -> None:
    """``root.set_submodule``, which torch 2.4 (the oldest supported) does not have."""
    parent_name, _, attr = target.rpartition(".")
    setattr(root.get_submodule(parent_name) if parent_name else root, attr, new)


def bn_tail(bn: _BatchNorm) -> nn.Module | None:
    """What stays of ``bn`` once its normalisation is folded away: nothing for torch's own
    BatchNorm; the dropout and activation of a norm+act layer (timm's ``BatchNormAct2d``,
    edgeport's ``BatchNormAct``); None -- not foldable -- for a subclass doing anything else."""
    if type(bn).forward in _PLAIN_FORWARDS:
        return nn.Identity()
    act, drop = getattr(bn, "act", None), getattr(bn, "drop", None)
    if isinstance(act, nn.Module) and isinstance(drop, nn.Module) and set(dict(bn.named_children())) <= {"act", "drop"}:
        return nn.Sequential(drop, act)
    return None


_PLAIN_FORWARDS = {nn.BatchNorm1d.forward, nn.BatchNorm2d.forward, nn.BatchNorm3d.forward, _BatchNorm.forward}


def conv_bn_pairs(module: nn.Module) -> list[tuple[str, str]]:
    """(conv, bn) submodule names where the BatchNorm's only input is that convolution's
    output and each is called once, found on ``module``'s fx graph (raises if untraceable)."""
    gm = trace(module)
    mods = dict(gm.named_modules())
    calls = Counter(n.target for n in gm.graph.nodes if n.op == "call_module")
    pairs = []
    for node in gm.graph.nodes:
        if node.op != "call_module" or not isinstance(mods.get(node.target), _BatchNorm):
            continue
        src = node.args[0] if node.args else None
        if not isinstance(src, fx.Node) or src.op != "call_module" or len(src.users) != 1:
            continue
        if isinstance(mods.get(src.target), CONV_TYPES) and calls[src.target] == 1 and calls[node.target] == 1:
            pairs.append((src.target, node.target))
    return pairs


def _fold_pairs(module: nn.Module, pairs: list[tuple[str, str]]) -> int:
    """Fold in place: the module keeps its own classes and forward (no GraphModule in its
    place: frameworks such as Ultralytics read attributes of their layers at run time)."""
    folded = 0
    for conv_name, bn_name in pairs:
        conv, bn = module.get_submodule(conv_name), module.get_submodule(bn_name)
        tail = bn_tail(bn)
        if tail is None or not bn.track_running_stats or bn.running_mean is None:
            continue
        plain = nn.BatchNorm2d(bn.num_features, eps=bn.eps, affine=bn.affine).eval()
        plain.load_state_dict({k: v for k, v in bn.state_dict().items() if k in plain.state_dict()}, strict=True)
        _set_submodule(module, conv_name, fuse_conv_bn_eval(conv, plain))
        _set_submodule(module, bn_name, tail)
        folded += 1
    return folded


def _fold(module: nn.Module) -> tuple[int, str]:
    """Fold on the whole graph, else on each largest submodule fx traces (control flow usually leaves blocks traceable)."""
    try:
        pairs = conv_bn_pairs(module)
    except Exception:  # noqa: BLE001 - fx cannot trace every model: go one level down
        return sum(_fold(child)[0] for child in module.children()), "fx per block"
    return _fold_pairs(module, pairs), "fx"  # (a failure here is edgeport's: never a silent fold of nothing)


def fold_batchnorm(module: nn.Module) -> tuple[nn.Module, int, str]:
    """(folded copy, number folded, method)."""
    module = copy.deepcopy(module).eval()
    return (module, *_fold(module))


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


class FoldBNPass(Pass[Prepared, Prepared]):
    name = "fold_bn"

    def run(self, value: Prepared, config: ConvertConfig) -> PassResult[Prepared]:
        module, n, method = fold_batchnorm(value.module)
        left = sum(isinstance(m, _BatchNorm) for m in module.modules())
        summary = f"{n} BatchNorm folded into Conv ({method})" + (f", {left} left as BatchNorm" if left else "")
        return PassResult(replace(value, module=module.eval()), changed=n > 0, summary=summary)

    def check(self, before: Prepared, after: Prepared, config: ConvertConfig) -> None:
        left = conv_bn_pairs_left(after.module)
        if left:
            raise PassCheckError(f"{left} Conv->BatchNorm pairs were not folded")
        # shapes and NaNs only: how far the numbers moved is parity's folded row to judge (within FOLDED's 1e-5
        # of the model's largest value, or float32's own error), a failed gate with its numbers rather than a stop
        assert_same_outputs(self.name, before.module, after.module, after.calib[:2], rel_tol=math.inf)
