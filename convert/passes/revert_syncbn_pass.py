"""Turn every SyncBatchNorm back into BatchNorm2d.

In eval mode SyncBatchNorm computes exactly what BatchNorm does from its running
statistics; reverting it lets the BN-fold pass (whose fuser matches BatchNorm2d) see it,
and lets export run without a process group. Its BatchNorm state and settings (weight, bias,
running statistics, eps, momentum, affine, track_running_stats) are kept; its process group is not.

A subclass that adds a dropout and an activation (timm's ``SyncBatchNormAct``, from
``timm.layers.convert_sync_batchnorm``) becomes its non-sync counterpart,
``BatchNormAct2d``, keeping both; any other subclass that changes ``forward`` is refused
with its class name: swapping it for a plain BatchNorm would silently drop what it adds.
"""

from __future__ import annotations

import copy
from dataclasses import replace

from torch import nn

from edgeport.convert.base import ConvertConfig, Pass, PassResult, Prepared
from edgeport.convert.modelcheck import assert_same_outputs
from edgeport.errors import BadInputError, PassCheckError


class BatchNormAct2d(nn.BatchNorm2d):
    """BatchNorm2d followed by its own dropout and activation: what timm's ``SyncBatchNormAct``
    computes in eval mode, without timm (the BN fold keeps ``drop`` and ``act``)."""

    def __init__(self, num_features: int, *, drop: nn.Module, act: nn.Module, **kw):
        super().__init__(num_features, **kw)
        self.drop, self.act = drop, act

    def forward(self, x):
        return self.act(self.drop(super().forward(x)))


def sync_bn_types() -> tuple[type, ...]:
    """torch's SyncBatchNorm and the trainer's CPU-capable one (same state_dict keys)."""
    types: list[type] = [nn.SyncBatchNorm]
    try:
        from edgeport.models.syncbn import SyncBatchNorm as CpuSyncBatchNorm
    except ImportError:  # the trainer's SyncBN is optional at this layer
        pass
    else:
        types.append(CpuSyncBatchNorm)
    return tuple(types)


def to_batchnorm2d(sbn: nn.Module, name: str = "") -> nn.BatchNorm2d:
    kw = {"eps": sbn.eps, "momentum": sbn.momentum, "affine": sbn.affine, "track_running_stats": sbn.track_running_stats}
    cls = type(sbn)
    if cls.forward in {t.forward for t in sync_bn_types()}:
        bn = nn.BatchNorm2d(sbn.num_features, **kw)
    elif set(dict(sbn.named_children())) == {"drop", "act"}:
        bn = BatchNormAct2d(sbn.num_features, drop=sbn.drop, act=sbn.act, **kw)
    else:
        raise BadInputError(
            f"{name or 'the model'} is a {cls.__module__}.{cls.__name__}, a SyncBatchNorm subclass with its own forward "
            f"edgeport cannot revert without changing what it computes; build the model with its non-sync counterpart "
            f"(load the checkpoint into a model that uses it, --arch module:callable) and convert again")
    bn.load_state_dict({k: v for k, v in sbn.state_dict().items() if k in bn.state_dict()}, strict=True)
    bn.train(sbn.training)
    for p_new, p_old in zip(bn.parameters(), sbn.parameters()):
        p_new.requires_grad_(p_old.requires_grad)
    return bn


def revert_sync_batchnorm(module: nn.Module) -> tuple[nn.Module, int]:
    """Return a copy of ``module`` with SyncBN replaced, and how many were replaced."""
    module = copy.deepcopy(module)
    types = sync_bn_types()
    if isinstance(module, types):
        return to_batchnorm2d(module), 1
    count = 0
    for pname, parent in list(module.named_modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, types):
                setattr(parent, name, to_batchnorm2d(child, f"{pname}.{name}" if pname else name))
                count += 1
    return module, count


def count_sync_bn(module: nn.Module) -> int:
    types = sync_bn_types()
    return sum(isinstance(m, types) for m in module.modules())


class RevertSyncBNPass(Pass[Prepared, Prepared]):
    name = "revert_syncbn"

    def run(self, value: Prepared, config: ConvertConfig) -> PassResult[Prepared]:
        # none to revert (a checkpoint loaded into a BatchNorm model, the usual case): the module as
        # it is, neither copied nor run again by the check
        module, n = revert_sync_batchnorm(value.module) if count_sync_bn(value.module) else (value.module, 0)
        summary = (f"{n} SyncBatchNorm reverted to BatchNorm2d" if n else
                   "none to revert: SyncBatchNorm's weights are BatchNorm's, so the state_dict of a SyncBN-trained "
                   "checkpoint (edgeport's trainer's included) loads into BatchNorm as it is")
        return PassResult(replace(value, module=module.eval()), changed=n > 0, summary=summary)

    def check(self, before: Prepared, after: Prepared, config: ConvertConfig) -> None:
        left = count_sync_bn(after.module)
        if left:
            raise PassCheckError(f"{left} SyncBatchNorm layers remain after revert")
        if before.module is not after.module:
            # eval-mode SyncBN and BN run the same kernel: demand identical outputs
            assert_same_outputs(self.name, before.module, after.module, after.calib[:2], rel_tol=0.0)
