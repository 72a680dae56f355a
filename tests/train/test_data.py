from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from edgeport.models.synth import make_scene
from edgeport.validate.datasets import DataError, load_split, write_dataset


def _yolo(tmp_path, label_text, name="a"):
    (tmp_path / "images" / "train").mkdir(parents=True)
    (tmp_path / "labels" / "train").mkdir(parents=True)
    Image.fromarray(np.zeros((50, 100, 3), np.uint8)).save(tmp_path / "images" / "train" / f"{name}.png")
    (tmp_path / "labels" / "train" / f"{name}.txt").write_text(label_text)
    return tmp_path


def test_yolo_labels_become_pixel_boxes(tmp_path):
    root = _yolo(tmp_path, "0 0.5 0.5 0.2 0.4\n\n")
    (s,) = load_split(root, "train", 1)
    np.testing.assert_allclose(s.boxes, [[40, 15, 60, 35]])
    assert (s.width, s.height) == (100, 50)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("0 0.5 0.5 0.2\n", "a.txt:1: expected 'class cx cy w h' (5 fields), got 4"),
        ("0 0.5 0.5 0.2 0.2\n1 0.5 0.5 0.2 0.2\n", "a.txt:2: class 1 out of range 0..0"),
        ("0 0.5 x 0.2 0.2\n", "a.txt:1: not numbers"),
        ("0 0.5 1.5 0.2 0.2\n", "a.txt:1: box 0.5 1.5 0.2 0.2 is not normalised"),
        ("0 0.5 0.5 0 0.2\n", "is not normalised"),
    ],
)
def test_bad_labels_name_file_and_line(tmp_path, text, needle):
    root = _yolo(tmp_path, text)
    with pytest.raises(DataError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        load_split(root, "train", 1)


def test_label_without_image_is_reported(tmp_path):
    root = _yolo(tmp_path, "0 0.5 0.5 0.2 0.2\n")
    (root / "labels" / "train" / "ghost.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    with pytest.raises(DataError, match="labels without an image: ghost.txt"):
        load_split(root, "train", 1)


def test_missing_folder_says_how_to_make_one(tmp_path):
    with pytest.raises(DataError, match="edgeport data synth"):
        load_split(tmp_path / "nope", "train", 1)


def test_written_dataset_reads_back_the_same_in_both_formats(tmp_path):
    rng = np.random.default_rng(0)
    scenes = [make_scene(rng, 64) for _ in range(5)]
    write_dataset(tmp_path, {"train": scenes}, size=64)
    coco = load_split(tmp_path, "train", 1)  # annotations/train.json exists: COCO path
    (tmp_path / "annotations" / "train.json").rename(tmp_path / "coco.json")
    yolo = load_split(tmp_path, "train", 1)
    for a, b, scene in zip(coco, yolo, scenes):
        np.testing.assert_allclose(a.boxes, scene.boxes, atol=1e-3)
        np.testing.assert_allclose(b.boxes, scene.boxes, atol=1e-3)


def test_coco_missing_image_and_bad_annotation(tmp_path):
    rng = np.random.default_rng(1)
    write_dataset(tmp_path, {"val": [make_scene(rng, 64) for _ in range(2)]}, size=64)
    ann = tmp_path / "annotations" / "val.json"
    data = json.loads(ann.read_text())
    data["annotations"].append({"id": 99, "image_id": 1, "category_id": 7, "bbox": [0, 0, 5, 5]})
    ann.write_text(json.dumps(data))
    with pytest.raises(DataError, match=r"annotations\[4\] \(id 99\)"):
        load_split(tmp_path, "val", 1)
    data["annotations"].pop()
    ann.write_text(json.dumps(data))
    (tmp_path / "images" / "val" / "val_00001.png").unlink()
    with pytest.raises(DataError, match="val_00001.png.*is missing"):
        load_split(tmp_path, "val", 1)


def test_links_inside_the_dataset_and_images_linked_out_of_it_are_read(tmp_path):
    """A label may be a link within the dataset; an image may be a link anywhere (DVC and git-annex
    datasets are links into a cache): only labels and annotations must stay inside it."""
    root = _yolo(tmp_path / "data", "0 0.5 0.5 0.2 0.4\n")
    cache = tmp_path / "cache"
    cache.mkdir()
    (root / "images" / "train" / "a.png").rename(cache / "a.png")
    (root / "images" / "train" / "a.png").symlink_to(cache / "a.png")
    (root / "shared").mkdir()
    (root / "labels" / "train" / "a.txt").rename(root / "shared" / "a.txt")
    (root / "labels" / "train" / "a.txt").symlink_to(root / "shared" / "a.txt")
    (s,) = load_split(root, "train", 1)
    np.testing.assert_allclose(s.boxes, [[40, 15, 60, 35]])


def test_a_broken_label_link_is_an_error_not_an_image_without_objects(tmp_path):
    root = _yolo(tmp_path, "0 0.5 0.5 0.2 0.4\n")
    label = root / "labels" / "train" / "a.txt"
    label.unlink()
    label.symlink_to(root / "labels" / "gone.txt")
    with pytest.raises(DataError, match="a.txt: cannot read the label file"):
        load_split(root, "train", 1)


def test_a_label_larger_than_its_bound_is_refused_before_it_is_read(tmp_path, monkeypatch):
    from edgeport.validate import datasets as data

    root = _yolo(tmp_path, "0 0.5 0.5 0.2 0.4\n" * 10)
    monkeypatch.setattr(data, "MAX_LABEL_BYTES", 100)
    with pytest.raises(DataError, match="a.txt: the label file is larger than 100 bytes"):
        load_split(root, "train", 1)


def test_a_coco_image_may_be_a_link_out_of_the_dataset_and_its_annotations_may_not(tmp_path):
    rng = np.random.default_rng(2)
    root = tmp_path / "data"
    write_dataset(root, {"val": [make_scene(rng, 64) for _ in range(2)]}, size=64)
    image = root / "images" / "val" / "val_00000.png"
    image.rename(tmp_path / "cached.png")
    image.symlink_to(tmp_path / "cached.png")
    assert len(load_split(root, "val", 1)) == 2
    ann = root / "annotations" / "val.json"
    ann.rename(tmp_path / "val.json")
    ann.symlink_to(tmp_path / "val.json")
    with pytest.raises(DataError, match="val.json: the COCO JSON file is a link that leads out of the dataset"):
        load_split(root, "val", 1)
