from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import nn

from edgeport.convert.passes.revert_syncbn_pass import RevertSyncBNPass, count_sync_bn, revert_sync_batchnorm
from edgeport.errors import PassCheckError

from .conftest import config, prepared_record

ATTRS = ("num_features", "eps", "momentum", "affine", "track_running_stats")


def _sync(model):
    return nn.SyncBatchNorm.convert_sync_batchnorm(model)


def test_revert_keeps_every_attribute_and_buffer(pdet_n):
    for m in pdet_n.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.eps, m.momentum = 1e-3, 0.03
    sync = _sync(pdet_n)
    assert count_sync_bn(sync) == 23
    reverted, n = revert_sync_batchnorm(sync)
    assert n == 23 and count_sync_bn(reverted) == 0
    before = dict(sync.named_modules())
    for name, m in reverted.named_modules():
        if isinstance(m, nn.BatchNorm2d):
            old = before[name]
            assert type(m) is nn.BatchNorm2d
            assert all(getattr(m, a) == getattr(old, a) for a in ATTRS), name
            for key, value in old.state_dict().items():
                assert torch.equal(m.state_dict()[key], value), (name, key)


def test_outputs_identical_after_revert(pdet_n, images):
    sync = _sync(pdet_n).eval()
    reverted, _ = revert_sync_batchnorm(sync)
    x = torch.from_numpy(images)
    with torch.no_grad():
        for a, b in zip(sync(x), reverted.eval()(x)):
            assert torch.equal(a, b)


@pytest.mark.parametrize("affine, track", [(True, True), (False, True), (True, False)])
def test_variants_of_affine_and_tracking(affine, track):
    sbn = nn.SyncBatchNorm(5, eps=1e-4, momentum=0.2, affine=affine, track_running_stats=track)
    bn, n = revert_sync_batchnorm(sbn)  # a SyncBN that is the whole model
    assert n == 1 and type(bn) is nn.BatchNorm2d
    assert (bn.affine, bn.track_running_stats, bn.eps, bn.momentum) == (affine, track, 1e-4, 0.2)


def test_original_is_not_modified(pdet_n):
    sync = _sync(pdet_n)
    revert_sync_batchnorm(sync)
    assert count_sync_bn(sync) == 23


def test_pass_check_catches_leftover_syncbn(pdet_n, tmp_path, images):
    sync = _sync(pdet_n).eval()
    prepared, cfg = prepared_record(tmp_path, sync, images), config(tmp_path)
    p = RevertSyncBNPass()
    result = p.run(prepared, cfg)
    assert result.changed and result.summary == "23 SyncBatchNorm reverted to BatchNorm2d"
    p.check(prepared, result.value, cfg)
    with pytest.raises(PassCheckError, match="23 SyncBatchNorm layers remain"):
        p.check(prepared, prepared, cfg)


def test_a_model_without_syncbn_says_its_weights_load_as_they_are(pdet_n, tmp_path, images):
    result = RevertSyncBNPass().run(prepared_record(tmp_path, pdet_n, images), config(tmp_path))
    assert not result.changed and result.summary.startswith("none to revert: SyncBatchNorm's weights are BatchNorm's")
    assert "(edgeport's trainer's included) loads into BatchNorm as it is" in result.summary
    assert result.value.module is pdet_n  # the module as it is: nothing copied, and nothing for the check to run


def test_pass_check_catches_changed_outputs(pdet_n, tmp_path, images):
    sync = _sync(pdet_n).eval()
    prepared, cfg = prepared_record(tmp_path, sync, images), config(tmp_path)
    result = RevertSyncBNPass().run(prepared, cfg)
    broken, _ = revert_sync_batchnorm(sync)
    with torch.no_grad():
        broken.backbone.stem[1].running_mean.add_(0.5)
    with pytest.raises(PassCheckError, match="changed by"):
        RevertSyncBNPass().check(prepared, replace(result.value, module=broken.eval()), cfg)


class SyncBatchNormAct(nn.SyncBatchNorm):
    """timm's SyncBatchNormAct (timm.layers.norm_act): SyncBN, then its dropout and activation."""

    def __init__(self, c):
        super().__init__(c)
        self.drop, self.act = nn.Identity(), nn.Hardswish()

    def forward(self, x):
        return self.act(self.drop(super().forward(x)))


class Scaled(nn.SyncBatchNorm):
    def forward(self, x):
        return super().forward(x) * 2.0


def test_a_norm_act_subclass_becomes_its_non_sync_counterpart_keeping_act_and_drop(images):
    from edgeport.convert.passes.fold_bn_pass import fold_batchnorm
    from edgeport.convert.passes.revert_syncbn_pass import BatchNormAct2d

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), SyncBatchNormAct(8)).eval()
    with torch.no_grad():
        model[1].running_mean.uniform_(-1, 1)
        model[1].running_var.uniform_(0.5, 2)
    reverted, n = revert_sync_batchnorm(model)
    assert n == 1 and type(reverted[1]) is BatchNormAct2d and isinstance(reverted[1].act, nn.Hardswish)
    x = torch.from_numpy(images)
    with torch.no_grad():
        assert torch.equal(model(x), reverted(x))  # the activation was not dropped
        folded, folds, _ = fold_batchnorm(reverted)
        assert folds == 1 and torch.allclose(folded(x), model(x), atol=1e-5)


def test_an_unknown_syncbn_subclass_is_refused_by_name():
    from edgeport.errors import BadInputError

    with pytest.raises(BadInputError, match=r"1 is a .*Scaled, a SyncBatchNorm subclass with its own forward"):
        revert_sync_batchnorm(nn.Sequential(nn.Conv2d(3, 8, 3), Scaled(8)))
