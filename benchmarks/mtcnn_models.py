"""MTCNN's P-Net, trained by someone else, for ``benchmarks/quant_bench.py``: real weights with PReLU.

facenet-pytorch (MIT licence, Tim Esler; its weights ported from Zhang et al.'s MTCNN) ships the
trained P-Net, R-Net and O-Net inside its wheel. Its pins are old (torch < 2.3), so it is installed
without its dependencies: ``make setup-bench`` (``pip install --no-deps facenet-pytorch==2.6.0``).
Only its model classes and weights are used; nothing is downloaded at run time.

The wrapper takes edgeport's images (RGB in [0, 1]) and normalises them as MTCNN does,
(x * 255 - 127.5) / 128, inside the model, so that the converted file takes what edgeport feeds.
"""

from __future__ import annotations

import torch


class PNet(torch.nn.Module):
    """The proposal network: fully convolutional, box offsets (4 channels) and face probability (2, softmax)."""

    def __init__(self):
        super().__init__()
        from facenet_pytorch.models.mtcnn import PNet as Trained

        self.net = Trained(pretrained=True)

    def forward(self, x):
        return self.net((x * 255.0 - 127.5) * 0.0078125)


class ONet(torch.nn.Module):
    """The output network on 48 x 48 crops, as facenet-pytorch writes it, ceil-mode pools and all
    (edgeport's ``rewrite_pools`` makes them exact): box offsets (4), five landmarks (10) and face
    probability (2, softmax)."""

    def __init__(self):
        super().__init__()
        from facenet_pytorch.models.mtcnn import ONet as Trained

        self.net = Trained(pretrained=True)

    def forward(self, x):
        return self.net((x * 255.0 - 127.5) * 0.0078125)


class RNet(torch.nn.Module):
    """The refinement network on 24 x 24 crops, as facenet-pytorch writes it (ceil-mode pools): box offsets (4)
    and face probability (2, softmax)."""

    def __init__(self):
        super().__init__()
        from facenet_pytorch.models.mtcnn import RNet as Trained

        self.net = Trained(pretrained=True)

    def forward(self, x):
        return self.net((x * 255.0 - 127.5) * 0.0078125)
