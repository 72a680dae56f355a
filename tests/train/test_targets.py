from __future__ import annotations

import numpy as np
import torch

from edgeport.train.dataset import DetectionDataset
from edgeport.train.targets import assign_level, build_targets, collate_targets, detection_loss
from edgeport.train.trainer import micro_batch_sizes, window_sizes
from edgeport.validate.datasets import Sample


def test_level_assignment_by_size():
    assert [assign_level(m, (8, 16, 32)) for m in (10, 63, 64, 127, 128, 400)] == [0, 0, 1, 1, 2, 2]


def test_targets_are_inside_the_box_and_decode_back_to_it():
    box = np.array([[40, 20, 80, 100]], np.float32)  # 40 x 80: level 1 (stride 16)
    levels = build_targets(box, np.array([0]), 160, (8, 16, 32))
    assert not levels[0]["pos"].any() and not levels[2]["pos"].any()
    pos = levels[1]["pos"]
    ys, xs = np.nonzero(pos)
    assert len(ys) > 0
    for y, x in zip(ys, xs):
        cx, cy = (x + 0.5) * 16, (y + 0.5) * 16
        left, top, right, bottom = levels[1]["ltrb"][:, y, x] * 16
        np.testing.assert_allclose([cx - left, cy - top, cx + right, cy + bottom], box[0], atol=1e-4)
    assert (levels[1]["cls"][pos] == 0).all() and (levels[1]["cls"][~pos] == -1).all()


def test_loss_is_a_sum_of_per_image_terms():
    torch.manual_seed(0)
    boxes = [np.array([[10, 10, 50, 60]], np.float32), np.array([[30, 5, 60, 40], [0, 0, 20, 20]], np.float32)]
    per_image = [build_targets(b, np.zeros(len(b), np.int64), 64, (8, 16, 32)) for b in boxes]
    outs = [torch.randn(2, 6, 64 // s, 64 // s) for s in (8, 16, 32)]
    joint, _ = detection_loss(outs, collate_targets(per_image))
    for i in range(2):
        single, _ = detection_loss([o[i : i + 1] for o in outs], collate_targets([per_image[i]]))
        torch.testing.assert_close(joint[i], single[0])


def test_accumulation_window_sizes_handle_a_partial_window():
    sizes = micro_batch_sizes(10, 3)
    assert sizes == [3, 3, 3, 1]
    assert window_sizes(sizes, 2) == [6, 6, 4, 4]
    assert window_sizes(sizes, 3) == [9, 9, 9, 1]


def test_dataset_is_deterministic_per_epoch_and_letterboxes_without_augment(tmp_path):
    from PIL import Image

    img = tmp_path / "a.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (40, 80, 3), dtype=np.uint8)).save(img)
    sample = Sample(img, np.array([[10, 10, 30, 30]], np.float32), np.array([0]), 80, 40)
    aug = DetectionDataset([sample], 64, (8, 16, 32), augment=True, seed=3)
    a1, _, _ = aug[0]
    a2, _, _ = aug[0]
    torch.testing.assert_close(a1, a2)
    aug.set_epoch(1)
    assert not torch.equal(aug[0][0], a1)
    plain = DetectionDataset([sample], 64, (8, 16, 32), augment=False)
    x, targets, _ = plain[0]
    from edgeport.models.preprocess import preprocess

    np.testing.assert_array_equal(x.numpy(), preprocess(np.asarray(Image.open(img)), 64))
    assert sum(t["pos"].sum() for t in targets) > 0
