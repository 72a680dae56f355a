from __future__ import annotations

import textwrap

import pytest
import torch

from edgeport.convert.build_model_pass import BuildModelPass
from edgeport.errors import ArchitectureError, KeyMismatchError
from edgeport.models.registry import build_model

from .conftest import checkpoint_record, config


def _run(tmp_path, cli_arch=None, **kw):
    """BuildModelPass on a checkpoint record holding ``kw``, with ``--arch cli_arch``."""
    ckpt = checkpoint_record(tmp_path, **kw)
    cfg = config(tmp_path, arch=cli_arch)
    return ckpt, cfg, BuildModelPass().run(ckpt, cfg)


def test_builds_and_loads_weights_exactly(tmp_path, pdet_n):
    sd = pdet_n.state_dict()
    ckpt, cfg, result = _run(tmp_path, state_dict=sd, cli_arch="pdet-n")
    BuildModelPass().check(ckpt, result.value, cfg)
    got = result.value.module.state_dict()
    assert all(torch.equal(got[k], sd[k]) for k in sd)
    assert not result.value.module.training and result.value.stride == 32


def test_unknown_arch_lists_valid_names(tmp_path, pdet_n):
    with pytest.raises(ArchitectureError, match=r"unknown architecture 'yolo'.*pdet-n.*pdet-s"):
        _run(tmp_path, state_dict=pdet_n.state_dict(), cli_arch="yolo")


def test_missing_arch_says_to_pass_it(tmp_path, pdet_n):
    with pytest.raises(ArchitectureError, match="pass --arch"):
        _run(tmp_path, state_dict=pdet_n.state_dict())


def test_key_mismatch_is_a_readable_diff(tmp_path, pdet_n):
    sd = dict(pdet_n.state_dict())
    sd.pop("head.preds.0.weight")
    sd["extra.weight"] = torch.zeros(3)
    sd["head.preds.1.bias"] = torch.zeros(9)
    with pytest.raises(KeyMismatchError) as info:
        _run(tmp_path, state_dict=sd, cli_arch="pdet-n")
    msg = str(info.value)
    assert "\n" not in msg
    assert "1 missing: head.preds.0.weight" in msg
    assert "1 unexpected: extra.weight" in msg
    assert "head.preds.1.bias [9] vs [6]" in msg


def test_wrong_size_arch_is_a_mismatch(tmp_path, pdet_n):
    with pytest.raises(KeyMismatchError, match="shape mismatch"):
        _run(tmp_path, state_dict=pdet_n.state_dict(), cli_arch="pdet-s")


def test_stored_arch_and_config_are_used(tmp_path):
    model, stored = build_model("pdet-n", {"num_classes": 3})
    _, _, result = _run(tmp_path, state_dict=model.state_dict(), arch="pdet-n", arch_config=stored)
    assert result.value.module.cfg.num_classes == 3


def test_module_callable_from_current_directory(tmp_path, monkeypatch):
    (tmp_path / "mynet.py").write_text(textwrap.dedent("""
        import torch
        def make():
            return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4))
        def not_a_module():
            return 42
    """))
    monkeypatch.chdir(tmp_path)
    model, _ = build_model("mynet:make")
    _, _, result = _run(tmp_path, state_dict=model.state_dict(), cli_arch="mynet:make")
    assert isinstance(result.value.module, torch.nn.Sequential)
    with pytest.raises(ArchitectureError, match="returned int, expected an nn.Module"):
        build_model("mynet:not_a_module")
    with pytest.raises(ArchitectureError, match="cannot import 'nosuchmod'"):
        build_model("nosuchmod:make")
    with pytest.raises(ArchitectureError, match="no callable 'missing'"):
        build_model("mynet:missing")
