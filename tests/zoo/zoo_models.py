"""The model zoo's builders: real third-party detectors and backbones, random init, plain
BatchNorm (what a user's ``--arch module:build`` returns for inference). Imported by
``edgeport convert --arch zoo_models:NAME`` from the test's working folder, and by the tests.

Ultralytics (AGPL-3.0) and timm are test dependencies only (the ``zoo`` extra); edgeport
itself never imports them.
"""

from __future__ import annotations

import os

os.environ.setdefault("YOLO_OFFLINE", "1")  # Ultralytics: never reach for the network


def _ultralytics(cfg: str):
    from ultralytics.nn.modules import Detect
    from ultralytics.nn.tasks import DetectionModel

    model = DetectionModel(cfg, nc=1, verbose=False)
    for m in model.modules():
        if isinstance(m, Detect):
            m.export = True  # the published export format: one (1, 4+nc, A) tensor, boxes in pixels
    return model.eval()


def yolov8n():
    return _ultralytics("yolov8n.yaml")


def yolo11n():
    return _ultralytics("yolo11n.yaml")


def yolov5nu():
    return _ultralytics("yolov5nu.yaml")


def resnet18():
    import torchvision

    return torchvision.models.resnet18(weights=None, num_classes=10).eval()


def mobilenet_v3_large():
    import torchvision

    return torchvision.models.mobilenet_v3_large(weights=None, num_classes=10).eval()


def lraspp_mobilenet_v3_large():
    import torchvision

    return torchvision.models.segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=2).eval()


def mobilenetv3_small_100():
    import timm

    return timm.create_model("mobilenetv3_small_100", pretrained=False, num_classes=10).eval()


def efficientnet_b0():
    import timm

    return timm.create_model("efficientnet_b0", pretrained=False, num_classes=10).eval()


# name -> (framework, input size, extra convert options)
ZOO = {
    "yolov8n": ("ultralytics", 128, []),
    "yolo11n": ("ultralytics", 128, []),
    "yolov5nu": ("ultralytics", 128, []),
    "resnet18": ("torchvision", 96, []),
    "mobilenet_v3_large": ("torchvision", 96, []),
    "lraspp_mobilenet_v3_large": ("torchvision", 96, ["--outputs", "out"]),
    "mobilenetv3_small_100": ("timm", 96, []),
    "efficientnet_b0": ("timm", 96, []),
}
