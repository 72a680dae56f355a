"""``validate --data``'s mAP on every labelled image (validate/dataset_score.py): streamed a chunk at a
time, the same score as the whole set at once, and parity judged on the first images alone."""

from __future__ import annotations

import time

import numpy as np
import pytest

from edgeport.convert.passes import given_file_pass
from edgeport.models.heads import Head
from edgeport.models.synth import make_scene
from edgeport.validate import dataset_score
from edgeport.validate.datasets import load_split, write_dataset
from edgeport.validate.parity.runners import Runner, RuntimeRefused

SIZE = 64


class Truth(Runner):
    """A YOLOv8-style output (4 box rows in input pixels, 1 score row) that finds each labelled box,
    read back from the letterboxed image's own labels: no model, so the score depends on the pipe alone."""

    runtime = "truth"

    def __init__(self, boxes_by_image: list[np.ndarray]):
        self.boxes, self.seen, self.largest = boxes_by_image, 0, 0

    def run(self, inputs, stop=None, indices=None):
        self.largest = max(self.largest, len(inputs))
        return super().run(inputs, stop, indices)

    def _run_one(self, x):
        out = np.zeros((1, 5, 8), np.float32)
        for j, (x1, y1, x2, y2) in enumerate(self.boxes[self.seen][:8]):
            out[0, :, j] = ((x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1, 0.9)
        self.seen += 1
        return [out]


def _labelled(folder, n: int, *, seed: int):
    """A labelled dataset of ``n`` scenes: its samples, and each one's boxes in the letterboxed input's pixels."""
    rng = np.random.default_rng(seed)
    write_dataset(folder, {"val": [make_scene(rng, SIZE) for _ in range(n)]}, size=SIZE)
    samples = load_split(folder, "val", 1)
    _, letterboxes = dataset_score.load_chunk(samples, SIZE)
    return samples, [b.boxes * lb.scale + np.array([lb.pad_x, lb.pad_y] * 2, np.float32) for b, lb in zip(samples, letterboxes)]


def test_the_dataset_is_scored_a_chunk_at_a_time_as_the_whole_set_at_once(tmp_path, monkeypatch):
    samples, in_input = _labelled(tmp_path, 11, seed=5)
    head = Head("yolov8", nc=1)
    whole = dataset_score.score_dataset(samples, SIZE, head, {"t": Truth(in_input)})
    monkeypatch.setattr(dataset_score, "CHUNK", 3)
    runner = Truth(in_input)
    streamed = dataset_score.score_dataset(samples, SIZE, head, {"t": runner})
    assert runner.largest == 3 and runner.seen == 11, "no more than a chunk of images is held at a time"
    assert streamed.images == whole.images == 11 and streamed.maps == whole.maps
    assert streamed.maps["t"]["map50"] > 0.95 and streamed.maps["t"]["classes"][0]["instances"] == sum(len(s.boxes) for s in samples)


def test_parity_judges_the_first_images_and_map_takes_every_one_or_the_first_n(tmp_path, monkeypatch):
    rng = np.random.default_rng(6)
    write_dataset(tmp_path, {"val": [make_scene(rng, SIZE) for _ in range(7)]}, size=SIZE)
    monkeypatch.setattr(given_file_pass, "PARITY_IMAGES", 4)
    inputs, source, truth, letterboxes, scored = given_file_pass._dataset(tmp_path, SIZE, 1, None, given_file_pass.PARITY_IMAGES)
    assert inputs.shape == (4, 3, SIZE, SIZE) and len(truth) == len(letterboxes) == 4 and len(scored) == 7
    assert source.startswith("4 of 7 labelled images from ")
    inputs, source, truth, _, scored = given_file_pass._dataset(tmp_path, SIZE, 1, 3, given_file_pass.PARITY_IMAGES)
    assert inputs.shape[0] == len(truth) == len(scored) == 3 and source.startswith("3 labelled images from ")
    plain = tmp_path / "images" / "val"  # a folder of images: parity's inputs, and nothing to score
    inputs, _, truth, _, scored = given_file_pass._dataset(plain, SIZE, 1, None, given_file_pass.PARITY_IMAGES)
    assert inputs.shape[0] == 4 and truth is None and scored == ()


class RefusesFrom(Truth):
    """Refuses every chunk from image ``first`` on, as a board's runtime refusing an image would."""

    def __init__(self, boxes_by_image, first: int):
        super().__init__(boxes_by_image)
        self.first = first

    def run(self, inputs, stop=None, indices=None):
        if self.seen + len(inputs) > self.first:
            raise RuntimeRefused("TFLite 1.13.1 refused the model: tensor too large")
        return super().run(inputs, stop, indices)


def test_a_row_that_refuses_an_image_has_no_map_and_says_why_and_the_others_go_on(tmp_path, monkeypatch):
    samples, in_input = _labelled(tmp_path, 10, seed=7)
    monkeypatch.setattr(dataset_score, "CHUNK", 4)
    told = []
    score = dataset_score.score_dataset(samples, SIZE, Head("yolov8", nc=1),
                                        {"t": Truth(in_input), "board": RefusesFrom(in_input, 6)},
                                        on_progress=lambda done, total: told.append((done, total)))
    assert set(score.maps) == {"t"} and score.refused["board"] == "images 5-8: TFLite 1.13.1 refused the model: tensor too large"
    assert score.maps["t"]["map50"] > 0.95, "the rows that run go on to the last image"
    assert told == [(4, 10), (8, 10), (10, 10)], "progress after each chunk, ending at every image"


def test_the_first_n_images_are_read_and_no_other_file(tmp_path, monkeypatch):
    from edgeport.validate import datasets

    rng = np.random.default_rng(8)
    write_dataset(tmp_path, {"val": [make_scene(rng, SIZE) for _ in range(6)]}, size=SIZE)
    read = []
    real = datasets.image_size
    monkeypatch.setattr(datasets, "image_size", lambda p: read.append(p.name) or real(p))
    for layout in ("coco", "yolo"):
        read.clear()
        first = datasets.load_split(tmp_path, "val", 1, 2)
        assert [s.image.name for s in first] == read == ["val_00000.png", "val_00001.png"], layout
        assert [len(s.boxes) for s in first] == [len(s.boxes) for s in datasets.load_split(tmp_path, "val", 1)[:2]]
        (tmp_path / "annotations" / "val.json").unlink(missing_ok=True)  # the YOLO layout next


class Slow(Truth):
    def _run_one(self, x):
        time.sleep(0.05)
        return super()._run_one(x)


def test_ctrl_c_stops_the_runs_at_their_next_image(tmp_path, monkeypatch):
    rng = np.random.default_rng(9)
    write_dataset(tmp_path, {"val": [make_scene(rng, SIZE) for _ in range(12)]}, size=SIZE)
    samples = load_split(tmp_path, "val", 1)
    monkeypatch.setattr(dataset_score, "CHUNK", 6)

    def interrupt(done, total):
        raise KeyboardInterrupt

    runner = Slow([np.zeros((0, 4))] * 12)
    with pytest.raises(KeyboardInterrupt):
        dataset_score.score_dataset(samples, SIZE, Head("yolov8", nc=1), {"t": runner}, on_progress=interrupt)
    assert runner.seen < 12, "the second chunk's run went on to its end"  # (the pool's exit waits for it)


def test_the_sets_fingerprint_follows_its_images_and_labels_not_its_folder(tmp_path):
    rng = np.random.default_rng(10)
    scenes = [make_scene(rng, SIZE) for _ in range(3)]
    for where in ("a", "b"):
        write_dataset(tmp_path / where, {"val": scenes}, size=SIZE)
    here, there = (load_split(tmp_path / w, "val", 1) for w in ("a", "b"))
    assert dataset_score.fingerprint(here) == dataset_score.fingerprint(there)
    moved = [here[0], here[1], type(here[2])(here[2].image, here[2].boxes + 1, here[2].classes, here[2].width, here[2].height)]
    assert dataset_score.fingerprint(moved) != dataset_score.fingerprint(here), "a label moved is another set"
    assert dataset_score.fingerprint(here[:2]) != dataset_score.fingerprint(here)
