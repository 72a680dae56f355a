from __future__ import annotations

import pytest
import torch
from torch import nn

from edgeport.convert.base import ConvertConfig, State
from edgeport.convert.revert_syncbn_pass import RevertSyncBNPass, count_sync_bn, revert_sync_batchnorm
from edgeport.errors import PassCheckError

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
    state = State(ConvertConfig(checkpoint=tmp_path / "x", work_dir=tmp_path), module=sync, calib=images)
    p = RevertSyncBNPass()
    result = p.run(state)
    assert result.changed
    p.check(state, result.state)
    with pytest.raises(PassCheckError, match="23 SyncBatchNorm layers remain"):
        p.check(state, state)


def test_pass_check_catches_changed_outputs(pdet_n, tmp_path, images):
    sync = _sync(pdet_n).eval()
    state = State(ConvertConfig(checkpoint=tmp_path / "x", work_dir=tmp_path), module=sync, calib=images)
    result = RevertSyncBNPass().run(state)
    broken, _ = revert_sync_batchnorm(sync)
    with torch.no_grad():
        broken.backbone.stem[1].running_mean.add_(0.5)
    with pytest.raises(PassCheckError, match="changed by"):
        RevertSyncBNPass().check(state, result.state.evolve(module=broken.eval()))
