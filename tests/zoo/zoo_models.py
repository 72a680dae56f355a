"""The model zoo's builders: real third-party detectors and backbones, random init, plain
BatchNorm (what a user's ``--arch module:build`` returns for inference). Imported by
``edgeport convert --arch zoo_models:NAME`` from the test's working folder, and by the tests.

Ultralytics (AGPL-3.0) and timm are test dependencies only (the ``zoo`` extra); edgeport
itself never imports them.
"""

from __future__ import annotations

import os

os.environ.setdefault("YOLO_OFFLINE", "1")  # Ultralytics: never reach for the network


def _ultralytics(cfg: str, task: str = "detect", *, end2end: bool = False):
    from ultralytics.nn.modules import Detect
    from ultralytics.nn.tasks import DetectionModel, PoseModel, SegmentationModel

    cls = {"detect": DetectionModel, "pose": PoseModel, "segment": SegmentationModel}[task]
    model = cls(cfg, nc=1, verbose=False)
    for m in model.modules():
        if isinstance(m, Detect):
            m.export = True  # the published export format: one (1, 4+nc, A) tensor, boxes in pixels
            if end2end:
                m.end2end = True  # YOLOv10's one-to-one head: (1, 300, 6) top-k rows, no NMS
    return model.eval()


def yolov8n():
    return _ultralytics("yolov8n.yaml")


def yolo11n():
    return _ultralytics("yolo11n.yaml")


def yolov5nu():
    return _ultralytics("yolov5nu.yaml")


def yolov8s():
    return _ultralytics("yolov8s.yaml")


def yolov8n_pose():
    return _ultralytics("yolov8n-pose.yaml", "pose")


def yolov8n_seg():
    return _ultralytics("yolov8n-seg.yaml", "segment")


def yolov10n():
    return _ultralytics("yolov10n.yaml")


def yolov10n_end2end():
    return _ultralytics("yolov10n.yaml", end2end=True)


def ssdlite320():
    import torchvision

    return torchvision.models.detection.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=2).eval()


def fcos_resnet50():
    import torchvision

    return torchvision.models.detection.fcos_resnet50_fpn(weights=None, weights_backbone=None, num_classes=2).eval()


def retinanet_resnet50():
    import torchvision

    return torchvision.models.detection.retinanet_resnet50_fpn(weights=None, weights_backbone=None, num_classes=2).eval()


def _timm(name: str):
    import timm

    return timm.create_model(name, pretrained=False, num_classes=10).eval()


def convnext_atto():
    return _timm("convnext_atto")


def regnety_002():
    return _timm("regnety_002")


def ghostnet_100():
    return _timm("ghostnet_100")


def mobilevit_xxs():
    return _timm("mobilevit_xxs")


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
    "yolov8s": ("ultralytics", 96, []),
    "yolov8n_pose": ("ultralytics", 96, []),
    "yolov8n_seg": ("ultralytics", 96, []),
    "yolov10n": ("ultralytics", 96, []),
    "yolov10n_end2end": ("ultralytics", 96, []),
    "ssdlite320": ("torchvision", 128, ["--outputs", "flatten"]),
    "fcos_resnet50": ("torchvision", 128, ["--outputs", "0.boxes,0.scores"]),
    "retinanet_resnet50": ("torchvision", 128, []),
    "convnext_atto": ("timm", 64, []),
    "regnety_002": ("timm", 64, []),
    "ghostnet_100": ("timm", 64, []),
    "mobilevit_xxs": ("timm", 64, []),
    "resnet18": ("torchvision", 96, []),
    "mobilenet_v3_large": ("torchvision", 96, []),
    "lraspp_mobilenet_v3_large": ("torchvision", 96, ["--outputs", "out"]),
    "mobilenetv3_small_100": ("timm", 96, []),
    "efficientnet_b0": ("timm", 96, []),
}
