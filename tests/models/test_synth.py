from __future__ import annotations

import numpy as np

from edgeport.models.synth import make_scene, sample_images


def test_scenes_are_seeded_and_boxes_lie_inside():
    a = make_scene(np.random.default_rng(3), 128)
    b = make_scene(np.random.default_rng(3), 128)
    np.testing.assert_array_equal(a.image, b.image)
    np.testing.assert_array_equal(a.boxes, b.boxes)
    assert a.image.shape == (128, 128, 3) and a.image.dtype == np.uint8
    rng = np.random.default_rng(0)
    for _ in range(20):
        s = make_scene(rng, 96)
        assert ((s.boxes >= 0) & (s.boxes <= 96)).all()
        assert (s.boxes[:, 2] > s.boxes[:, 0]).all() and (s.boxes[:, 3] > s.boxes[:, 1]).all()


def test_most_scenes_hold_people_and_images_differ():
    rng = np.random.default_rng(7)
    scenes = [make_scene(rng, 128) for _ in range(10)]
    assert sum(len(s.boxes) for s in scenes) >= 10
    assert len({im.tobytes() for im in sample_images(4, 64, seed=1)}) == 4
