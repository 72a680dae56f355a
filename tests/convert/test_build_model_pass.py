from __future__ import annotations

import textwrap

import pytest
import torch

from edgeport.convert.passes.build_model_pass import BuildModelPass
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


@pytest.mark.parametrize("keys, framework, factory", [
    (["model.0.conv.weight", "model.22.dfl.conv.weight", "model.22.cv2.0.0.conv.weight"], "Ultralytics YOLO",
     "--arch my_models:yolo"),
    (["module.model.0.conv.weight", "module.model.22.dfl.conv.weight"], "Ultralytics YOLO", "YOLO('yolov8n.yaml').model"),
    (["backbone.body.conv1.weight", "head.classification_head.conv.0.weight"], "a torchvision detector", "fcos_resnet50_fpn"),
    (["conv1.weight", "layer1.0.conv1.weight", "fc.weight"], "a torchvision ResNet", "torchvision.models.resnet18"),
    (["stem.0.weight", "stages.0.blocks.0.conv_dw.weight", "head.fc.weight"], "a timm model (ConvNeXt", "timm.create_model"),
    (["conv_stem.weight", "blocks.0.0.conv_dw.weight", "classifier.weight"], "a timm model (EfficientNet", "timm.create_model"),
])
def test_a_state_dict_from_another_framework_gets_the_factory_to_write(tmp_path, keys, framework, factory):
    """No architecture named, and keys that look like Ultralytics', torchvision's or timm's: the one
    line says which, and the one-line factory a user writes (as docs/zoo.md does), not pdet's names."""
    sd = {k: torch.zeros(1) for k in keys}
    with pytest.raises(ArchitectureError) as err:
        BuildModelPass().run(checkpoint_record(tmp_path, state_dict=sd), config(tmp_path))
    assert f"its keys look like {framework}" in str(err.value) and factory in str(err.value), str(err.value)
    assert "pdet-n" not in str(err.value)


def test_a_pdet_like_state_dict_without_arch_lists_the_registry(tmp_path, pdet_n):
    with pytest.raises(ArchitectureError, match="pass --arch NAME \\(valid: .*pdet-n"):
        BuildModelPass().run(checkpoint_record(tmp_path, state_dict=pdet_n.state_dict()), config(tmp_path))
