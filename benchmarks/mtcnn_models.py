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
    """The output network on 48 x 48 crops: box offsets (4), five landmarks (10) and face probability
    (2, softmax), as facenet-pytorch computes them. Its first pool is ceil-mode, which a converter may
    take as floor-mode: written exactly here (at 48 px, the size O-Net runs at), as a user would, by padding the last row and column with
    copies of themselves (a copy changes no window's maximum) and pooling floor-mode."""

    def __init__(self):
        super().__init__()
        from facenet_pytorch.models.mtcnn import ONet as Trained

        self.net = Trained(pretrained=True)

    def forward(self, x):
        n = self.net
        x = n.prelu1(n.conv1((x * 255.0 - 127.5) * 0.0078125))
        if x.shape[-1] % 2 == 0:  # ceil-mode 3x2 pool: one more window than floor-mode on an even size
            x = torch.nn.functional.pad(x, (0, 1, 0, 1), mode="replicate")
        x = torch.nn.functional.max_pool2d(x, 3, 2)
        x = torch.nn.functional.max_pool2d(n.prelu2(n.conv2(x)), 3, 2)  # 21 -> 10 and 8 -> 4 at 48 px: ceil-mode's
        x = torch.nn.functional.max_pool2d(n.prelu3(n.conv3(x)), 2, 2)
        x = n.prelu4(n.conv4(x)).permute(0, 3, 2, 1).contiguous()
        x = n.prelu5(n.dense5(x.view(x.shape[0], -1)))
        return n.dense6_2(x), n.dense6_3(x), n.softmax6_1(n.dense6_1(x))
