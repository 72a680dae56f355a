"""The trainer: run folders are never reused by accident, numbers are checked, data is scanned first."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from edgeport.folders import LOCK, MARKER, write_marker

from .conftest import assert_one_line, inventory, run_cli

pytestmark = pytest.mark.one_line

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


# -- a checkpoint never chooses code; a live run is never joined; workers die with their launcher ----


@pytest.mark.slow
def test_resume_of_a_crafted_last_pt_never_imports_its_arch(workspace, data):
    r = run_cli(*TRAIN, "--out", "run", "--epochs", "1", cwd=workspace)
    assert r.code == 0, r.err
    (workspace / "evil.py").write_text("from pathlib import Path\nPath('pwned.txt').write_text('ran')\ndef build():\n    return None\n")
    last = workspace / "run" / "last.pt"
    ckpt = torch.load(last, weights_only=True)
    ckpt["args"]["arch"] = "evil:build"
    torch.save(ckpt, last)
    before = inventory(workspace)
    r = run_cli("train", "--data", "data", "--resume", "run/last.pt", "--epochs", "2", cwd=workspace)
    assert_one_line(r, 2, "saved options hold arch='evil:build'", "may only name what the command line can")
    assert not (workspace / "pwned.txt").exists()
    assert inventory(workspace) == before


@pytest.mark.parametrize("field, value", [("lr", "abc"), ("batch_size", 10**12), ("num_classes", 0), ("imgsz", 65536)])
def test_resume_refuses_saved_options_out_of_range(workspace, data, run_inproc, field, value):
    from edgeport.models.registry import build_model

    model, config = build_model("pdet-n")
    args = {"data": "data", "arch": "pdet-n", "num_classes": 1, "batch_size": 4, "lr": 0.01, "imgsz": 64, field: value}
    (workspace / "run").mkdir()
    torch.save({"format": "edgeport.ckpt/1", "arch": "pdet-n", "config": config, "model": model.state_dict(), "optimizer": {},
                "epoch": 1, "step": 2, "best_map50": -1.0, "args": args, "history": []}, workspace / "run" / "last.pt")
    before = inventory(workspace)
    r = run_inproc("train", "--data", "data", "--resume", "run/last.pt", "--epochs", "3")
    assert_one_line(r, 2, f"saved options hold {field}=")
    assert inventory(workspace) == before


def _start_training(workspace: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "edgeport.cli", *TRAIN, "--epochs", "200", *extra], cwd=workspace,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))


def _wait_for(predicate, timeout: float = 120) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.slow
def test_force_on_a_run_that_is_still_training_is_refused(workspace, data):
    r = run_cli(*TRAIN, "--out", "run", "--epochs", "1", cwd=workspace)
    assert r.code == 0, r.err
    first_written = (workspace / "run" / "last.pt").stat().st_mtime_ns
    live = _start_training(workspace, "--out", "run", "--force")
    try:
        def holds_the_lock() -> bool:
            with contextlib.suppress(OSError, ValueError):
                return json.loads((workspace / "run" / LOCK).read_text()).get("pid") == live.pid
            return False

        def its_own_last_pt() -> bool:
            with contextlib.suppress(OSError):
                return (workspace / "run" / "last.pt").stat().st_mtime_ns > first_written
            return False

        # and its first epoch written (a last.pt of its own: the first run's stays until --force clears
        # the folder, after the lock is taken), since a --resume of a last.pt not there yet is refused on
        # that (one line, exit 2) before the lock is looked at (on a busy machine, a race)
        assert _wait_for(lambda: holds_the_lock() and (workspace / "run" / "args.json").is_file()
                         and its_own_last_pt() and live.poll() is None)
        second = run_cli(*TRAIN, "--out", "run", "--epochs", "1", "--force", "--seed", "5", cwd=workspace)
        assert_one_line(second, 2, "is in use by a running edgeport train", f"process {live.pid}")
        resumed = run_cli("train", "--data", "data", "--resume", "run/last.pt", "--epochs", "300", cwd=workspace)
        assert resumed.code == 2 and "in use by a running edgeport train" in resumed.err, resumed.err
        assert json.loads((workspace / "run" / "args.json").read_text())["seed"] == 0
    finally:
        live.kill()
        live.wait()


@pytest.mark.slow
def test_workers_die_with_their_launcher(workspace, data):
    import psutil

    launcher = _start_training(workspace, "--out", "run", "--world-size", "2", "--batch-size", "2")
    try:
        def workers():
            with contextlib.suppress(psutil.Error):
                return psutil.Process(launcher.pid).children()
            return []

        assert _wait_for(lambda: len(workers()) == 2 and (workspace / "run" / "args.json").is_file()), launcher.stderr
        ranks = workers()
    finally:
        launcher.kill()  # SIGKILL: the launcher cannot stop them itself
        launcher.wait()
    gone, alive = psutil.wait_procs(ranks, timeout=30)
    assert not alive, f"ranks still running after their launcher died: {[p.pid for p in alive]}"


@pytest.mark.slow
def test_a_full_disk_during_training_names_the_file_and_leaves_nothing(workspace, data):
    disk = workspace / "disk"
    disk.mkdir()
    cmd = (f"{shlex.quote(sys.executable)} -m edgeport.cli {' '.join(TRAIN)} --epochs 1 --out {disk}/run; echo rc=$?; "
           f"find {disk} -mindepth 1")
    script = f"mount -t tmpfs -o size=256k tmpfs {shlex.quote(str(disk))} && {cmd}"
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=workspace, capture_output=True, text=True, timeout=600)
    if "Operation not permitted" in proc.stderr and "mount" in proc.stderr:
        pytest.skip("cannot mount a tmpfs in a user namespace here")
    assert "rc=2" in proc.stdout, proc.stdout + proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "No space left on device" in errors[0] and str(disk) in errors[0], proc.stderr[-3000:]
    assert [line for line in proc.stdout.splitlines() if line.startswith(str(disk))] == []


# -- COCO labels are checked, not believed ---------------------------------------------------------


def _coco_case(data: Path, *, image: dict | None = None, annotation: dict | None = None, annotations=None) -> None:
    name = sorted(p.name for p in (data / "images" / "train").iterdir())[0]
    img = {"id": 1, "file_name": name, "width": 64, "height": 64, **(image or {})}
    ann = {"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 10, 20, 30], **(annotation or {})}
    _coco(data, [img], [ann] if annotations is None else annotations)


@pytest.mark.parametrize("case, needle", [
    ({"image": {"file_name": "../../notes.txt"}}, "leaves"),
    ({"image": {"file_name": "/etc/passwd"}}, "leaves"),
    ({"image": {"id": [1]}}, "needs an integer 'id'"),
    ({"annotation": {"image_id": [1]}}, "unknown image_id"),
    ({"annotations": None}, "'annotations' must be a list"),
    ({"annotation": {"bbox": [10, 10, 1e308, 20]}}, "outside its 64x64 image"),
    ({"annotation": {"bbox": [500, 500, 20, 20]}}, "outside its 64x64 image"),
    ({"annotation": {"bbox": [10**400, 10, 20, 20]}}, "needs 'bbox' as 4 numbers"),  # past float's range
    ({"image": {"width": 640, "height": 480}}, "declares 640x480 but the file is 64x64"),
])
def test_coco_labels_that_do_not_fit_their_images_are_named(workspace, data, run_inproc, case, needle):
    if "annotations" in case:
        _coco_case(data, annotations=case["annotations"]) if case["annotations"] is not None else _coco(data, [], [])
        if case["annotations"] is None:
            name = sorted(p.name for p in (data / "images" / "train").iterdir())[0]
            (data / "annotations" / "train.json").write_text(json.dumps(
                {"images": [{"id": 1, "file_name": name, "width": 64, "height": 64}], "annotations": None,
                 "categories": [{"id": 1}]}))
    else:
        _coco_case(data, **case)
    before = inventory(workspace)
    assert_one_line(run_inproc(*TRAIN, "--epochs", "1"), 2, "train.json", needle)
    assert inventory(workspace) == before
