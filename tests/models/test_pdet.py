from __future__ import annotations

import pytest
import torch

from edgeport.models.pdet import DetectorConfig, PDet
from edgeport.models.registry import REGISTRY, build_model, model_stride


@pytest.mark.parametrize("arch", sorted(REGISTRY))
@pytest.mark.parametrize("imgsz", [160, 320])
def test_output_shapes_per_level(arch, imgsz):
    model, config = build_model(arch)
    with torch.no_grad():
        outs = model.eval()(torch.zeros(1, 3, imgsz, imgsz))
    assert [tuple(o.shape) for o in outs] == [(1, 6, imgsz // s, imgsz // s) for s in (8, 16, 32)]
    assert model_stride(model) == 32 and config["strides"] == [8, 16, 32]


def test_sizes_differ_and_nano_is_small():
    n = sum(p.numel() for p in build_model("pdet-n")[0].parameters())
    s = sum(p.numel() for p in build_model("pdet-s")[0].parameters())
    assert n < 400_000 < s


def test_upsample_mode_is_selectable():
    model = PDet(DetectorConfig(upsample="bilinear", align_corners=True))
    assert model.neck.up.mode == "bilinear" and model.neck.up.align_corners is True
    assert PDet().neck.up.mode == "nearest"


def test_config_roundtrip_and_validation():
    cfg = DetectorConfig(num_classes=3, upsample="bilinear")
    assert DetectorConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="upsample=.bicubic.; valid: nearest, bilinear, board_bilinear"):
        DetectorConfig(upsample="bicubic")
    with pytest.raises(ValueError, match="num_classes"):
        DetectorConfig(num_classes=0)


def test_num_classes_changes_head_width():
    model, _ = build_model("pdet-n", {"num_classes": 4})
    with torch.no_grad():
        outs = model.eval()(torch.zeros(1, 3, 64, 64))
    assert outs[0].shape[1] == 4 + 1 + 4


@pytest.mark.parametrize("stride, expected", [(16, 16), (32.0, 32), ([8, 16, 32], 32), ((8, 16), 16),
                                              ("tensor", 32), (None, 0), ([], 0), ("junk", 0)])
def test_any_form_of_stride(stride, expected):
    import torch

    class M(torch.nn.Module):
        pass

    m = M()
    if stride is not None:
        m.stride = torch.tensor([8.0, 16.0, 32.0]) if stride == "tensor" else stride  # Ultralytics keeps a tensor
    assert model_stride(m) == expected


def test_the_write_ups_style_leaky_relu_and_spp():
    """pdet-n-leaky-spp: LeakyReLU(0.1) everywhere an activation is, and an SPP block (max pools
    of 5, 9, 13) on the stride-32 features; a config without ``spp`` (an older checkpoint's) has none."""
    model, config = build_model("pdet-n-leaky-spp")
    acts = {type(m) for m in model.modules() if isinstance(m, (torch.nn.ReLU, torch.nn.ReLU6, torch.nn.LeakyReLU))}
    assert acts == {torch.nn.LeakyReLU} and all(m.negative_slope == 0.1 for m in model.modules() if isinstance(m, torch.nn.LeakyReLU))
    assert [p.kernel_size for p in model.backbone.spp.pools] == [5, 9, 13] and config["spp"] is True
    assert PDet(DetectorConfig.from_dict({k: v for k, v in config.items() if k != "spp"})).backbone.spp is None
    with pytest.raises(ValueError, match="spp must be true or false"):
        DetectorConfig(spp=1)
