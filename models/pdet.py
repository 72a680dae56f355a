"""PDet: a small anchor-free person detector sized for CPUs and TFLite boards.

Conv-BN-activation backbone (stride 32), a PAN neck that upsamples with ``nn.Upsample``
(nearest or bilinear, chosen in the config), and an anchor-free head with one raw output per
level. ``decode.py`` documents and decodes it, so every runtime's outputs go through the same code.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from edgeport.cliargs import whole_number

ACTIVATIONS = ("relu", "relu6", "leaky_relu")
LEAKY_SLOPE = 0.1  # YOLOv3's, and the write-up's detector's
SPP_POOLS = (5, 9, 13)  # YOLOv3-SPP's max pools, stride 1
# "board_bilinear": TFLite 1.13's bilinear resize (ops.board_upsample), to train with the board's op
UPSAMPLE_MODES = ("nearest", "bilinear", "board_bilinear")


@dataclass(frozen=True)
class DetectorConfig:
    """Everything that shapes the network. Stored in checkpoints as a plain dict."""

    num_classes: int = 1
    # stem, then the stride-4, 8, 16 and 32 stages
    widths: tuple[int, ...] = (16, 24, 32, 48, 80)
    # residual blocks per stage after the stride-4 stage
    depth: int = 1
    neck_width: int = 32
    upsample: str = "nearest"
    align_corners: bool = False
    act: str = "relu"
    strides: tuple[int, ...] = field(default=(8, 16, 32))
    spp: bool = False  # an SPP block (``SPP``) on the stride-32 features

    def __post_init__(self) -> None:
        if self.upsample not in UPSAMPLE_MODES:
            raise ValueError(f"upsample={self.upsample!r}; valid: {', '.join(UPSAMPLE_MODES)}")
        if self.act not in ACTIVATIONS:
            raise ValueError(f"act={self.act!r}; valid: {', '.join(ACTIVATIONS)}")
        if len(self.widths) != 5:
            raise ValueError(f"widths needs 5 entries (stem + 4 stages), got {len(self.widths)}")
        # a config may come from a checkpoint (a file): every number is bounded, so no file can
        # ask for a network that fills the machine's memory
        whole = whole_number
        if not whole(self.num_classes, 1, 10_000):
            raise ValueError(f"num_classes must be a whole number in 1..10000, got {self.num_classes!r}")
        if not all(whole(w, 1, 4096) for w in self.widths) or not whole(self.neck_width, 1, 4096):
            raise ValueError(f"widths and neck_width must be whole numbers in 1..4096, got {self.widths!r}, {self.neck_width!r}")
        if not whole(self.depth, 0, 16):
            raise ValueError(f"depth must be a whole number in 0..16, got {self.depth!r}")
        for flag in ("align_corners", "spp"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"{flag} must be true or false, got {getattr(self, flag)!r}")
        if tuple(self.strides) != (8, 16, 32):
            raise ValueError(f"strides must be (8, 16, 32), the levels PDet's neck has; got {self.strides!r}")

    @property
    def stride(self) -> int:
        return max(self.strides)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(f"p{int(math.log2(s))}" for s in self.strides)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["widths"] = list(self.widths)
        d["strides"] = list(self.strides)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "DetectorConfig":
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        for key in ("widths", "strides"):
            if key in known:
                known[key] = tuple(int(v) for v in known[key])
        return cls(**known)


def _act(name: str) -> nn.Module:
    if name == "leaky_relu":
        return nn.LeakyReLU(LEAKY_SLOPE, inplace=True)
    return nn.ReLU6(inplace=True) if name == "relu6" else nn.ReLU(inplace=True)


class ConvBNAct(nn.Sequential):
    """Conv (no bias) -> BatchNorm -> activation: the unit the BN-fold pass folds."""

    def __init__(self, c_in: int, c_out: int, k: int = 3, s: int = 1, act: str | None = "relu"):
        layers: list[nn.Module] = [
            nn.Conv2d(c_in, c_out, k, s, k // 2, bias=False),
            nn.BatchNorm2d(c_out),
        ]
        if act is not None:
            layers.append(_act(act))
        super().__init__(*layers)


class BasicBlock(nn.Module):
    def __init__(self, c: int, act: str):
        super().__init__()
        self.conv1 = ConvBNAct(c, c, 3, 1, act)
        self.conv2 = ConvBNAct(c, c, 3, 1, None)
        self.act = _act(act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(x + self.conv2(self.conv1(x)))


class SPP(nn.Module):
    """YOLOv3-SPP's block: a 1x1 conv halves the channels, max pools of 5, 9 and 13 (stride 1,
    same size) are concatenated with it, and a 1x1 conv brings the channels back."""

    def __init__(self, c: int, act: str):
        super().__init__()
        self.reduce = ConvBNAct(c, c // 2, 1, 1, act)
        self.pools = nn.ModuleList(nn.MaxPool2d(k, 1, k // 2) for k in SPP_POOLS)
        self.fuse = ConvBNAct(c // 2 * (1 + len(SPP_POOLS)), c, 1, 1, act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.reduce(x)
        return self.fuse(torch.cat([x, *(pool(x) for pool in self.pools)], 1))


class Backbone(nn.Module):
    def __init__(self, cfg: DetectorConfig):
        super().__init__()
        w = cfg.widths
        self.stem = ConvBNAct(3, w[0], 3, 2, cfg.act)  # /2
        stages = []
        for i in range(1, 5):  # /4, /8, /16, /32
            blocks: list[nn.Module] = [ConvBNAct(w[i - 1], w[i], 3, 2, cfg.act)]
            blocks += [BasicBlock(w[i], cfg.act) for _ in range(cfg.depth if i > 1 else 0)]
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.ModuleList(stages)
        self.spp = SPP(w[4], cfg.act) if cfg.spp else None

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        x = self.stem(x)
        feats = []
        for stage in self.stages:
            x = stage(x)
            feats.append(x)
        if self.spp is not None:
            feats[-1] = self.spp(feats[-1])
        return feats[1:]  # strides 8, 16, 32


def make_upsample(cfg: DetectorConfig) -> nn.Module:
    if cfg.upsample == "nearest":
        return nn.Upsample(scale_factor=2, mode="nearest")
    if cfg.upsample == "board_bilinear":
        from edgeport.ops.board_upsample import BoardUpsample

        return BoardUpsample(2, align_corners=cfg.align_corners)
    return nn.Upsample(scale_factor=2, mode="bilinear", align_corners=cfg.align_corners)


class PANNeck(nn.Module):
    """Top-down (upsampling) then bottom-up path, fused by addition."""

    def __init__(self, cfg: DetectorConfig):
        super().__init__()
        n = cfg.neck_width
        c3, c4, c5 = cfg.widths[2:]
        self.lat3 = ConvBNAct(c3, n, 1, 1, cfg.act)
        self.lat4 = ConvBNAct(c4, n, 1, 1, cfg.act)
        self.lat5 = ConvBNAct(c5, n, 1, 1, cfg.act)
        self.up = make_upsample(cfg)
        self.td4 = ConvBNAct(n, n, 3, 1, cfg.act)
        self.td3 = ConvBNAct(n, n, 3, 1, cfg.act)
        self.down3 = ConvBNAct(n, n, 3, 2, cfg.act)
        self.down4 = ConvBNAct(n, n, 3, 2, cfg.act)
        self.bu4 = ConvBNAct(n, n, 3, 1, cfg.act)
        self.bu5 = ConvBNAct(n, n, 3, 1, cfg.act)

    def forward(self, feats: list[torch.Tensor]) -> list[torch.Tensor]:
        c3, c4, c5 = feats
        p5 = self.lat5(c5)
        p4 = self.td4(self.lat4(c4) + self.up(p5))
        p3 = self.td3(self.lat3(c3) + self.up(p4))
        n4 = self.bu4(p4 + self.down3(p3))
        n5 = self.bu5(p5 + self.down4(n4))
        return [p3, n4, n5]


class Head(nn.Module):
    """Per level: a ConvBNAct then a 1x1 conv to 4 box + 1 objectness + C class channels."""

    PRIOR = 0.01

    def __init__(self, cfg: DetectorConfig):
        super().__init__()
        n = cfg.neck_width
        self.stems = nn.ModuleList(ConvBNAct(n, n, 3, 1, cfg.act) for _ in cfg.strides)
        self.preds = nn.ModuleList(nn.Conv2d(n, 5 + cfg.num_classes, 1) for _ in cfg.strides)
        bias = -math.log((1 - self.PRIOR) / self.PRIOR)
        for pred in self.preds:
            nn.init.zeros_(pred.bias)
            with torch.no_grad():
                pred.bias[4:] = bias

    def forward(self, feats: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        return tuple(pred(stem(f)) for f, stem, pred in zip(feats, self.stems, self.preds))


class PDet(nn.Module):
    """Input: ``(N, 3, S, S)`` RGB in [0, 1] (see ``preprocess.py``). Output: one raw map per stride."""

    def __init__(self, cfg: DetectorConfig | None = None):
        super().__init__()
        self.cfg = cfg or DetectorConfig()
        self.backbone = Backbone(self.cfg)
        self.neck = PANNeck(self.cfg)
        self.head = Head(self.cfg)

    @property
    def stride(self) -> int:
        return self.cfg.stride

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.head(self.neck(self.backbone(x)))
