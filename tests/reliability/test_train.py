"""The trainer: run folders are never reused by accident, numbers are checked, data is scanned first."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from edgeport.models.synth import make_scene
from edgeport.runs import MARKER, write_marker
from edgeport.train.data import write_dataset

from .conftest import assert_one_line, inventory, run_cli


@pytest.fixture
def data(workspace) -> Path:
    rng = np.random.default_rng(0)
    root = workspace / "data"
    write_dataset(root, {"train": [make_scene(rng, 64) for _ in range(8)], "val": [make_scene(rng, 64) for _ in range(2)]}, size=64)
    return root


TRAIN = ("train", "--data", "data", "--imgsz", "64", "--batch-size", "4", "--eval-every", "1000")


def _coco(data: Path, images: list, annotations: list) -> None:
    (data / "annotations").mkdir(exist_ok=True)
    (data / "annotations" / "train.json").write_text(json.dumps(
        {"images": images, "annotations": annotations, "categories": [{"id": 1, "name": "person"}]}))


def test_an_existing_run_folder_is_not_reused(workspace, data, run_inproc):
    run = workspace / "runs" / "train" / "1"
    run.mkdir(parents=True)
    write_marker(run, "train")
    (run / "best.pt").write_bytes(b"an earlier run's weights")
    before = inventory(workspace)
    r = run_inproc(*TRAIN, "--out", "runs/train/1")
    assert_one_line(r, 2, "not empty", "--force")
    assert inventory(workspace) == before


def test_force_never_deletes_a_users_files(workspace, data, run_inproc):
    (workspace / "exp").mkdir()
    (workspace / "exp" / "plan.md").write_text("mine\n")
    before = inventory(workspace)
    r = run_inproc(*TRAIN, "--out", "exp", "--force")
    assert_one_line(r, 2, "was not made by edgeport train")
    assert inventory(workspace) == before


@pytest.mark.parametrize("flag, value, needle", [
    ("--lr", "nan", "finite"), ("--lr", "-1", "> 0"), ("--lr", "0", "> 0"), ("--lrf", "inf", "finite"),
    ("--weight-decay", "-0.1", ">= 0"), ("--batch-size", "0", ">= 1"), ("--epochs", "-3", ">= 1"),
])
def test_hyperparameters_are_checked_at_the_command_line(workspace, data, run_inproc, flag, value, needle):
    before = inventory(workspace)
    assert_one_line(run_inproc(*TRAIN, flag, value), 2, flag, needle)
    assert inventory(workspace) == before


def test_a_binary_label_file_is_named(workspace, data, run_inproc):
    shutil.rmtree(data / "annotations")  # the YOLO layout is read when there is no COCO JSON
    label = sorted((data / "labels" / "train").iterdir())[0]
    label.write_bytes(bytes(range(128, 256)))
    assert_one_line(run_inproc(*TRAIN), 2, label.name, "not a text label file")


def test_a_truncated_image_is_found_before_training(workspace, data, run_inproc):
    image = sorted((data / "images" / "train").iterdir())[3]
    image.write_bytes(image.read_bytes()[:200])
    before = inventory(workspace)
    r = run_inproc(*TRAIN)
    assert_one_line(r, 2, image.name, "unreadable")
    assert inventory(workspace) == before and not (workspace / "runs").exists()


def test_coco_bbox_of_three_numbers_is_named(workspace, data, run_inproc):
    _coco(data, [{"id": 1, "file_name": "train_00000.png", "width": 64, "height": 64}],
          [{"id": 7, "image_id": 1, "category_id": 1, "bbox": [1, 2, 3]}])
    assert_one_line(run_inproc(*TRAIN), 2, "annotations[0]", "4 numbers")


def test_coco_image_without_file_name_is_named(workspace, data, run_inproc):
    _coco(data, [{"id": 1, "width": 64, "height": 64}], [])
    assert_one_line(run_inproc(*TRAIN), 2, "images[0]", "file_name")


def test_coco_with_no_images_is_refused(workspace, data, run_inproc):
    _coco(data, [], [])
    before = inventory(workspace)
    assert_one_line(run_inproc(*TRAIN), 2, "lists no images")
    assert inventory(workspace) == before


@pytest.mark.slow
def test_divergence_writes_no_nan_weights(workspace, data):
    r = run_cli(*TRAIN, "--out", "nan", "--epochs", "2", "--lr", "1e30", "--optimizer", "sgd", cwd=workspace)
    line = assert_one_line(r, 1, "non-finite", "optimizer step")
    assert "no checkpoint was written yet" in line and "--lr" in line
    assert not (workspace / "nan" / "last.pt").exists() and not (workspace / "nan" / "best.pt").exists()


@pytest.mark.slow
def test_resume_honours_overrides_and_the_device_given_now(workspace, data):
    r = run_cli(*TRAIN, "--out", "run", "--epochs", "1", "--deterministic", cwd=workspace)
    assert r.code == 0, r.err
    last = workspace / "run" / "last.pt"
    ckpt = torch.load(last, weights_only=True)
    # as if it had been trained on GPUs: a resume on this CPU machine must still work
    ckpt["args"].update(device="cuda", backend="nccl", world_size=8)
    torch.save(ckpt, last)
    r = run_cli("train", "--data", "data", "--resume", "run/last.pt", "--epochs", "2", "--lr", "0.003", cwd=workspace)
    assert r.code == 0, r.err
    assert "resumed from" in r.err and "--lr" in r.err
    args = json.loads((workspace / "run" / "args.json").read_text())
    assert args["lr"] == 0.003 and args["device"] == "cpu" and args["world_size"] == 1 and args["deterministic"] is True
    assert sorted(args["overrides"]) == ["epochs", "lr"] and args["resumed_from"].endswith("last.pt")
    assert torch.load(last, weights_only=True)["epoch"] == 2
    assert (workspace / "run" / MARKER).is_file()


@pytest.mark.slow
def test_resume_refuses_another_architecture(workspace, data):
    r = run_cli(*TRAIN, "--out", "run", "--epochs", "1", cwd=workspace)
    assert r.code == 0, r.err
    before = inventory(workspace)
    r = run_cli("train", "--data", "data", "--resume", "run/last.pt", "--arch", "pdet-s", "--epochs", "2", cwd=workspace)
    assert_one_line(r, 2, "arch", "keeps it")
    assert inventory(workspace) == before


@pytest.mark.slow
def test_force_replaces_an_earlier_training_run(workspace, data):
    r = run_cli(*TRAIN, "--out", "run", "--epochs", "1", cwd=workspace)
    assert r.code == 0, r.err
    first = (workspace / "run" / "last.pt").read_bytes()
    r = run_cli(*TRAIN, "--out", "run", "--epochs", "1", "--seed", "3", "--force", cwd=workspace)
    assert r.code == 0, r.err
    assert (workspace / "run" / "last.pt").read_bytes() != first
    assert json.loads((workspace / "run" / "args.json").read_text())["seed"] == 3
