"""Every file edgeport reads is a plain file, read with a bound (``userfiles``): a label linked out
of the dataset is never read, a FIFO never waits, a file of gigabytes is never read whole, a
report of millions of empty objects is never parsed. Each case ends within 10 seconds."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from edgeport.models.synth import make_scene
from edgeport.validate.datasets import write_dataset

from ..conftest import make_report
from .conftest import assert_kept, assert_one_line, inventory, run_cli, within

pytestmark = pytest.mark.one_line

SECRET = "CI_TOKEN=s3cr3t-4f9a1c\n"
TRAIN = ("train", "--data", "data", "--imgsz", "64", "--batch-size", "4", "--eval-every", "1000")


@pytest.fixture
def data(workspace) -> Path:
    """A small dataset in both layouts, and beside it (outside the dataset) a file of the user's
    that must never be read through one."""
    rng = np.random.default_rng(0)
    root = workspace / "data"
    write_dataset(root, {"train": [make_scene(rng, 64) for _ in range(4)], "val": [make_scene(rng, 64) for _ in range(2)]}, size=64)
    (workspace / "ci.env").write_text(SECRET)
    return root


def _yolo(data: Path) -> Path:
    """The YOLO layout only (no COCO JSON), and its first train label."""
    shutil.rmtree(data / "annotations")
    return sorted((data / "labels" / "train").iterdir())[0]


@pytest.fixture
def reports(tmp_path, monkeypatch) -> Path:
    """A report and its baseline, both valid, in the cwd."""
    monkeypatch.chdir(tmp_path)
    for name in ("now.json", "base.json"):
        (tmp_path / name).write_text(json.dumps(make_report()))
    return tmp_path


# -- a label or annotations file linked out of the dataset ------------------------------------------


@pytest.mark.parametrize("layout", ["yolo label", "coco annotations"])
def test_a_label_linked_out_of_the_dataset_is_never_read(workspace, data, run_inproc, layout):
    """A shared dataset whose label is a link to the user's own file: the issue's error quoted the
    file's first line whole. Now the file is never opened, and nothing of it is shown."""
    if layout == "yolo label":
        label = _yolo(data)
    else:
        label = data / "annotations" / "train.json"
    label.unlink()
    label.symlink_to(workspace / "ci.env")
    before = inventory(workspace)
    with within(10):
        r = run_inproc(*TRAIN)
    assert_one_line(r, 2, label.name, "leads out of the dataset", "must lie inside the --data folder")
    assert "s3cr3t" not in r.err + r.out and "CI_TOKEN" not in r.err + r.out, r.err
    assert_kept(before, inventory(workspace))


def test_a_bad_label_line_is_quoted_short_and_escaped(workspace, data, run_inproc):
    """A label line inside the dataset that is not a box is quoted, but as a short excerpt."""
    label = _yolo(data)
    label.write_text("0 0.5 0.5 0.2 0.2 " + "\x1b[31m" + "A" * 100_000 + "\n")
    before = inventory(workspace)
    with within(10):
        r = run_inproc(*TRAIN)
    error = assert_one_line(r, 2, f"{label.name}:1", "expected 'class cx cy w h'", "...")
    assert len(error) < 600 and "A" * 100 not in error and "\x1b" not in r.err, error
    assert_kept(before, inventory(workspace))


# -- FIFOs ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["now.json", "base.json"])
def test_a_fifo_as_checks_report_or_baseline_does_not_wait(reports, run_inproc, which):
    (reports / which).unlink()
    os.mkfifo(reports / which)
    before = inventory(reports)
    with within(10):
        r = run_inproc("check", "now.json", "--baseline", "base.json")
    assert_one_line(r, 2, which, "is a FIFO (a named pipe), not a plain file")
    assert_kept(before, inventory(reports))
    assert sorted(p.name for p in reports.iterdir()) == ["base.json", "now.json"]


@pytest.mark.parametrize("layout", ["yolo label", "coco annotations"])
def test_a_fifo_as_a_label_or_annotations_file_does_not_wait(workspace, data, run_inproc, layout):
    label = _yolo(data) if layout == "yolo label" else data / "annotations" / "train.json"
    label.unlink()
    os.mkfifo(label)
    before = inventory(workspace)
    with within(10):
        r = run_inproc(*TRAIN)
    assert_one_line(r, 2, label.name, "is a FIFO (a named pipe), not a plain file")
    assert_kept(before, inventory(workspace))


# -- files of gigabytes -----------------------------------------------------------------------------


def test_a_sparse_label_of_8_gb_is_not_read(workspace, data, run_inproc):
    """``truncate -s 8G``: no disk used, and 8 GB read whole before; now refused by its size."""
    label = _yolo(data)
    os.truncate(label, 8 << 30)
    before = inventory(workspace, by_stat=(label,))
    with within(10):
        r = run_inproc(*TRAIN)
    assert_one_line(r, 2, label.name, "the label file is larger than 16 MB")
    assert_kept(before, inventory(workspace, by_stat=(label,)))


@pytest.mark.parametrize("make, said", [
    (lambda p: open(p, "wb").truncate(9 << 30), "holds 9.0 GB, more than the 8 GB edgeport reads"),
    (os.mkfifo, "is not a file"),
])
def test_a_checkpoint_of_9_gb_or_a_fifo_is_not_read(workspace, run_inproc, make, said):
    """A checkpoint is the one file read whole by torch: a sparse one of 9 GB is refused by its
    size, a FIFO by its kind, before a byte is read."""
    make(workspace / "big.pt")
    before = inventory(workspace, by_stat=(workspace / "big.pt",))
    with within(10):
        r = run_inproc("convert", "big.pt", "--out", "out")
    assert_one_line(r, 2, "big.pt", said)
    assert_kept(before, inventory(workspace, by_stat=(workspace / "big.pt",)))
    assert not (workspace / "out").exists()


def test_a_label_linked_to_dev_zero_is_not_read(workspace, data, run_inproc):
    """A link to a device with no end: outside the dataset, so never opened."""
    label = _yolo(data)
    label.unlink()
    label.symlink_to("/dev/zero")
    before = inventory(workspace)
    with within(10):
        r = run_inproc(*TRAIN)
    assert_one_line(r, 2, label.name, "leads out of the dataset")
    assert_kept(before, inventory(workspace))


def test_a_report_linked_to_dev_zero_is_not_read(reports, run_inproc):
    (reports / "now.json").unlink()
    (reports / "now.json").symlink_to("/dev/zero")
    before = inventory(reports)
    with within(10):
        r = run_inproc("check", "now.json", "--baseline", "base.json")
    assert_one_line(r, 2, "now.json", "is a device, not a plain file")
    assert_kept(before, inventory(reports))


# -- a report of millions of empty objects ------------------------------------------------------------

# the address space a check may use here: the report took 3.2 GB parsed
MEMORY_CAP = 2 << 30
CAPPED = (sys.executable, "-c", f"import os, resource, sys; resource.setrlimit(resource.RLIMIT_AS, ({MEMORY_CAP}, {MEMORY_CAP})); "
          f"os.execv(sys.argv[1], sys.argv[1:])")


@pytest.mark.parametrize("shape", ["objects", "nested lists"])
def test_a_report_of_22_million_empty_objects_is_refused_under_2_gb(reports, shape):
    """The issue's 62 MB report: under 64 MB, so the byte bound passes it; its '{' and '[' are
    counted before it is parsed, and it is refused in a fraction of a second."""
    n = 22_000_000
    if shape == "objects":
        body = b"{}," * (n - 1) + b"{}"
    else:  # lists of ten empty objects: 11 containers in 32 bytes
        body = b",".join([b"[" + b",".join([b"{}"] * 10) + b"]"] * (n // 11))
    (reports / "now.json").write_bytes(b'{"schema": "edgeport.parity/2", "results": [' + body + b"]}")
    assert 55 << 20 < (reports / "now.json").stat().st_size < 64 << 20
    before = inventory(reports)
    r = run_cli("check", "now.json", "--baseline", "base.json", cwd=reports, timeout=10, prefix=CAPPED)
    assert_one_line(r, 2, "now.json", "objects and lists", "more than 1,048,576")
    assert_kept(before, inventory(reports))
