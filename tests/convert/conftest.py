from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def small_onnx(tmp_path):
    """A two-convolution ONNX model at 32 px (``tmp_path/model.onnx``, exported and simplified as
    the pipeline does) and eight calibration images for it."""
    import torch

    from edgeport.convert.passes.export_onnx_pass import export_onnx, simplify

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3, stride=2)).eval()
    onnx_path = tmp_path / "model.onnx"
    export_onnx(model, 32, onnx_path, output_names=["y"], opset=17)
    simplify(onnx_path)
    return onnx_path, np.random.default_rng(0).random((8, 3, 32, 32), dtype=np.float32)


# -- typed phase records for one pass at a time -------------------------------------------------


def config(tmp_path, **kw):
    """The user's request as the command resolves it (the default board unless given)."""
    from edgeport.convert.base import ConvertConfig
    from edgeport.validate.board.profiles import load_board

    kw.setdefault("board", load_board("default"))
    return ConvertConfig(checkpoint=kw.pop("checkpoint", tmp_path / "x.pt"), work_dir=tmp_path, **kw)


def checkpoint_record(tmp_path, *, state_dict=None, module=None, arch=None, arch_config=None, layout="state_dict", imgsz=None):
    from edgeport.convert.base import Checkpoint

    return Checkpoint(tmp_path / "x.pt", layout, state_dict, module, arch, arch_config, imgsz)


def model_record(tmp_path, module, *, arch="test", stride=32, strides=(8, 16, 32), trained_at=None):
    import copy

    from edgeport.convert.base import Model

    return Model(checkpoint_record(tmp_path, module=module, imgsz=trained_at), module, copy.deepcopy(module), arch, None, stride,
                 tuple(strides))


def prepared_record(tmp_path, module, calib, *, imgsz=None, output_names=("p3", "p4", "p5"), strides=(8, 16, 32), head=None,
                    upsample=()):
    from edgeport.convert.base import Prepared
    from edgeport.models.heads import Head

    imgsz = imgsz or calib.shape[-1]
    model = model_record(tmp_path, module, strides=strides)
    from edgeport.models.inference import forward
    from edgeport.models.outputs import output_shapes

    return Prepared(model, module, model.reference, imgsz, calib, "test", calib, "test", tuple(output_names), tuple(strides),
                    head or Head("raw"), output_shapes(forward(module, calib[:1])), tuple(upsample))
