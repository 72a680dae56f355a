from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from edgeport.convert.calibration import load_calibration
from edgeport.convert.passes.prepare_inputs_pass import PrepareInputsPass
from edgeport.errors import BadInputError, CalibrationError

from .conftest import config, model_record


def _run(tmp_path, model, *, strides=(8, 16, 32), stride=32, trained_at=None, **cfg):
    """PrepareInputsPass on ``model`` with the options ``cfg``: (model record, config, result)."""
    cfg.setdefault("max_calib", 4)
    cfg.setdefault("max_validate", 2)
    built, cfg = model_record(tmp_path, model, stride=stride, strides=strides, trained_at=trained_at), config(tmp_path, **cfg)
    return built, cfg, PrepareInputsPass().run(built, cfg)


@pytest.mark.parametrize("imgsz, hint", [(100, "use 96 or 128"), (20, "use 32 or 64"), (-32, "positive multiple")])
def test_imgsz_must_be_a_multiple_of_the_stride(tmp_path, pdet_n, imgsz, hint):
    with pytest.raises(BadInputError, match=hint):
        _run(tmp_path, pdet_n, imgsz=imgsz)


class FixedSize(torch.nn.Module):
    """A net that takes one size only and states no stride (MTCNN's O-Net: 48 px crops into a dense layer)."""

    def __init__(self, size: int):
        super().__init__()
        self.dense = torch.nn.Linear(3 * size * size, 4)

    def forward(self, x):
        return self.dense(x.flatten(1))


def test_a_net_that_states_no_stride_runs_at_its_own_size_and_any_other_is_refused_naming_it(tmp_path):
    _, _, result = _run(tmp_path, FixedSize(48), imgsz=48, stride=0, strides=())
    assert result.value.imgsz == 48 and result.value.output_shapes == ((1, 4),)
    _, _, result = _run(tmp_path, FixedSize(24), stride=0, strides=())  # no --imgsz: the one size it runs at
    assert result.value.imgsz == 24 and "the one size the model runs at" in result.summary
    with pytest.raises(BadInputError, match=r"the model does not run on 64 x 64 inputs \(--imgsz: .*mat1 and mat2.*\); "
                                            r"it runs at 48 px: pass --imgsz with one"):
        _run(tmp_path, FixedSize(48), imgsz=64, stride=0, strides=())


def test_synthetic_calibration_and_held_out_validation(tmp_path, pdet_n):
    built, cfg, result = _run(tmp_path, pdet_n, imgsz=64)
    PrepareInputsPass().check(built, result.value, cfg)
    s = result.value
    assert s.calib.shape == (4, 3, 64, 64) and s.val.shape == (2, 3, 64, 64)
    assert s.output_names == ("p3", "p4", "p5") and s.head.name == "pdet"
    # validation images are not the calibration images
    assert not any(np.array_equal(v, c) for v in s.val for c in s.calib)


def test_calibration_folder_is_letterboxed(tmp_path):
    folder = tmp_path / "calib"
    folder.mkdir()
    Image.fromarray(np.full((40, 80, 3), 255, np.uint8)).save(folder / "wide.png")
    batch, source = load_calibration(folder, 64, limit=8, seed=0)
    assert batch.shape == (1, 3, 64, 64) and "1 images" in source
    # a 2:1 white image fills the middle half; the bands above and below are padding (114)
    assert np.allclose(batch[0, :, 32, :], 1.0)
    assert np.allclose(batch[0, :, 2, :], 114 / 255)


def test_calibration_folder_errors(tmp_path):
    with pytest.raises(CalibrationError, match="does not exist"):
        load_calibration(tmp_path / "nope", 64, limit=4, seed=0)
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(CalibrationError, match="is not a folder"):
        load_calibration(tmp_path / "file.txt", 64, limit=4, seed=0)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("no images here")
    with pytest.raises(CalibrationError, match="holds no images"):
        load_calibration(empty, 64, limit=4, seed=0)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "broken.jpg").write_bytes(b"not a jpeg at all")
    with pytest.raises(CalibrationError, match="broken.jpg.*unreadable"):
        load_calibration(bad, 64, limit=4, seed=0)


class Nested(torch.nn.Module):
    """Ultralytics outside export mode: (decoded, [per-level raw]); torchvision segmenters: a dict."""

    def __init__(self, as_dict=False):
        super().__init__()
        self.conv, self.as_dict = torch.nn.Conv2d(3, 5, 1), as_dict

    def forward(self, x):
        y = self.conv(x)
        if self.as_dict:
            return {"out": y, "aux": y * 2}
        return y.flatten(2), [y[:, :, ::8, ::8], y[:, :, ::16, ::16]]


def test_a_nested_result_is_described_in_one_line(tmp_path):
    with pytest.raises(BadInputError, match=r"the model returns tuple\(Tensor\(1, 5, 4096\), list\(Tensor\(1, 5, 8, 8\), "
                                            r"Tensor\(1, 5, 4, 4\)\)\), not a tensor .* pass --outputs"):
        _run(tmp_path, Nested(), imgsz=64, strides=())


@pytest.mark.parametrize("spec, shapes", [("0", [(1, 5, 4096)]), ("1.1", [(1, 5, 4, 4)]), ("flatten", [(1, 5, 4096), (1, 5, 8, 8), (1, 5, 4, 4)])])
def test_outputs_picks_the_tensors(tmp_path, spec, shapes):
    from edgeport.models.inference import forward

    _, _, result = _run(tmp_path, Nested(), imgsz=64, outputs=spec, strides=())
    prepared = result.value
    assert [o.shape for o in forward(prepared.module, prepared.calib[:1])] == shapes
    assert len(prepared.output_names) == len(shapes)


def test_outputs_names_what_is_missing(tmp_path):
    with pytest.raises(BadInputError, match=r"--outputs 'masks': no 'masks' in dict\{out: Tensor\(1, 5, 64, 64\), aux: Tensor"):
        _run(tmp_path, Nested(as_dict=True), imgsz=64, outputs="out,masks", strides=())


class PostProcessed(torch.nn.Module):
    """torchvision's detectors in eval mode: as many boxes as it finds, and integer labels."""

    def forward(self, x):
        n = int(x.mean() * 100) % 7 + 1  # a count that follows the image
        return [{"boxes": x.flatten()[: n * 4].reshape(n, 4), "labels": torch.zeros(n, dtype=torch.int64)}]


def test_a_result_whose_shape_follows_the_image_stops_with_the_way_out(tmp_path):
    with pytest.raises(BadInputError, match=r"e\.g\. --outputs 0\.boxes,0\.labels"):
        _run(tmp_path, PostProcessed(), imgsz=64, strides=())
    with pytest.raises(BadInputError, match="is int64, not floating point .* export the raw head instead"):
        _run(tmp_path, PostProcessed(), imgsz=64, outputs="flatten", strides=())
    with pytest.raises(BadInputError, match=r"output 0's shape depends on the image .* export the raw head instead"):
        _run(tmp_path, PostProcessed(), imgsz=64, outputs="0.boxes", strides=())


def test_the_size_the_checkpoint_was_trained_at_is_the_default(tmp_path, pdet_n):
    """A trainer checkpoint records ``imgsz``: without --imgsz the model is converted and judged at
    that size, and the progress line says where the size came from; --imgsz that differs wins, with
    a warning in the same line."""
    _, _, result = _run(tmp_path, pdet_n, trained_at=64)
    assert result.value.imgsz == 64 and result.value.calib.shape[-1] == 64
    assert result.summary.startswith("64px (the size the checkpoint was trained at)")
    _, _, result = _run(tmp_path, pdet_n, trained_at=64, imgsz=96)
    assert result.value.imgsz == 96
    assert result.summary.startswith("96px (--imgsz; warning: the checkpoint was trained at 64 px)")
    _, _, result = _run(tmp_path, pdet_n, trained_at=64, imgsz=64)
    assert result.summary.startswith("64px (--imgsz)")


@pytest.mark.parametrize("value, read", [(160, 160), (True, None), (16, None), (10**6, None), ("160", None), (160.0, None)])
def test_a_recorded_size_is_read_only_when_it_is_a_plain_bounded_number(value, read):
    from edgeport.checkpoints import recorded_imgsz

    assert recorded_imgsz({"imgsz": value, "model": {}}) == read
    assert recorded_imgsz({"model": {}}) is None and recorded_imgsz([160]) is None


def _images(folder, n: int):
    folder.mkdir()
    for i in range(n):
        Image.fromarray(np.full((32, 32, 3), i * 7 % 256, np.uint8)).save(folder / f"{i:03d}.png")
    return folder


def test_a_quantised_file_is_judged_on_images_it_was_not_calibrated_on(tmp_path):
    """20 --calib images: every fourth (5) is held out to judge on, the rest calibrate; none is both.
    A --val folder: judged on it, every --calib image calibrates. Fewer than 16 and no --val: judged
    on the calibration images themselves, and the source says so."""
    from edgeport.convert.calibration import calibration_and_judging

    twenty = _images(tmp_path / "twenty", 20)
    calib, source, val, val_source, held_out = calibration_and_judging(twenty, None, 32, calib=32, judge=8, seed=0)
    assert held_out and len(calib) == 15 and len(val) == 5 and "held out" in val_source and source.startswith("15 images")
    assert not any(np.array_equal(v, c) for v in val for c in calib)
    assert np.array_equal(val[0], load_calibration(twenty, 32, limit=4, seed=0)[0][3]), "every fourth image"
    calib, _, val, val_source, held_out = calibration_and_judging(twenty, _images(tmp_path / "val", 3), 32, calib=32, judge=8, seed=0)
    assert held_out and len(calib) == 20 and len(val) == 3 and val_source.startswith("3 images from")
    forty = _images(tmp_path / "forty", 40)  # a small net's --val: as many judged as 8 cost at 320 px, at most 32
    assert [len(calibration_and_judging(twenty, forty, size, calib=32, judge=8, seed=0)[2]) for size in (32, 160, 226, 320, 640)] \
        == [32, 32, 16, 8, 8]
    ten = _images(tmp_path / "ten", 10)
    calib, _, val, val_source, held_out = calibration_and_judging(ten, None, 32, calib=32, judge=8, seed=0)
    assert not held_out and np.array_equal(calib, val) and "none is held out" in val_source
    with pytest.raises(CalibrationError, match="--val .* does not exist"):
        calibration_and_judging(ten, tmp_path / "missing", 32, calib=32, judge=8, seed=0)
