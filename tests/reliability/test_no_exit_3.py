"""Bad input is exit 2 with one line (or exit 1 for a failed gate), never exit 3.

Each row of the issue's table, as a user meets it: a .tflite that is not the checkpoint's, one
whose operator list is empty, a disk that fills during convert, a probe's --out in a folder that
does not exist (said before the probe runs), an interpreter that says it is Python 3.7 and makes
no venv. Each asserts the exit code, the one error line and that every user file is kept.
"""

from __future__ import annotations

import shlex
import stat
import sys
import time

import numpy as np
import pytest

from edgeport.ops.tflite_graph import Graph

from .conftest import Result, assert_kept, assert_one_line, inventory
from .test_hostile_tflite import _damaged
from .test_outputs import _tmpfs_run


def _image_model(shape_out=(1, 64, 64, 3)) -> bytes:
    """float32 (1, 64, 64, 3) -> RELU: a real model, but not a detector's outputs."""
    g = Graph.empty()
    x = g.add_tensor("x", (1, 64, 64, 3), "float32")
    y = g.add_tensor("y", shape_out, "float32")
    g.add(g.new_op("RELU", [x], [y]))
    g.set_io([x], [y])
    return g.to_bytes()


@pytest.mark.slow  # the checkpoint is built and prepared
def test_validate_a_tflite_whose_outputs_are_not_the_checkpoints(workspace, run_inproc):
    (workspace / "other.tflite").write_bytes(_image_model())
    before = inventory(workspace)
    r = run_inproc("validate", "model.pt", "--tflite", "other.tflite", "--arch", "pdet-n")
    assert_one_line(r, 2, "other.tflite", "has outputs [[1, 64, 64, 3]]", "they are not the same model",
                    "pass the .tflite converted from this checkpoint")
    assert_kept(before, inventory(workspace))
    assert not (workspace / "runs").exists() or not any((workspace / "runs").rglob("*"))


@pytest.mark.parametrize("kind, needle", [
    ("no-operators", "output 'y' is never computed (the operator list is empty)"),
    ("buffer-99999", "tensor 'w' names buffer 99999"),
])
def test_validate_a_structurally_invalid_tflite(workspace, run_inproc, kind, needle):
    (workspace / "m.tflite").write_bytes(_damaged(kind))
    before = inventory(workspace)
    r = run_inproc("validate", "model.pt", "--tflite", "m.tflite", "--arch", "pdet-n")
    assert_one_line(r, 2, "m.tflite", "is structurally invalid", needle)
    assert_kept(before, inventory(workspace))
    assert not (workspace / "runs").exists() or not any((workspace / "runs").rglob("*"))


@pytest.mark.slow  # a real conversion, up to the converter
def test_convert_on_a_nearly_full_disk_names_the_file_and_says_the_disk_is_full(workspace):
    """The issue's 3 MB disk: it fills on the converter's calibration file (numpy's short write, an
    OSError with neither errno nor file name, was exit 3), or on the ONNX graph, exported while that
    file is written (``onnx2tf.Ahead``): whichever write the disk refused is named."""
    disk = workspace / "disk"
    cmd = (f"{shlex.quote(sys.executable)} -m edgeport.cli convert model.pt --arch pdet-n --imgsz 96 --out {disk}/out; "
           f"echo rc=$?; find {disk} -mindepth 1")
    before = inventory(workspace)
    proc = _tmpfs_run(workspace, "3m", disk, cmd)
    assert "rc=2" in proc.stdout, proc.stdout + proc.stderr
    line = assert_one_line(Result(2, proc.stdout, proc.stderr), 2, "No space left on device", "free some disk space")
    assert "calib_nhwc.npy'" in line or "model.onnx'" in line, line  # the file it was writing
    assert [ln for ln in proc.stdout.splitlines() if ln.startswith(str(disk))] == [], "nothing left on the full disk"
    assert_kept(before, inventory(workspace))


def test_probe_checks_its_out_path_before_probing(workspace, run_inproc, monkeypatch):
    from edgeport.validate.board import probe

    def never(*_a, **_k):
        raise AssertionError("the probe ran")

    monkeypatch.setattr(probe, "probe", never)
    before = inventory(workspace)
    t0 = time.monotonic()
    r = run_inproc("boards", "probe", "default", "--out", "no_such_dir/t.toml")
    assert_one_line(r, 2, "no_such_dir/t.toml", "its folder 'no_such_dir' does not exist")
    assert time.monotonic() - t0 < 5
    r = run_inproc("boards", "probe", "default", "--out", "notes.txt/t.toml")
    assert_one_line(r, 2, "notes.txt/t.toml", "does not exist")
    r = run_inproc("boards", "probe", "default", "--out", "notes.txt")
    assert_one_line(r, 2, "--out 'notes.txt' exists", "never overwrites")
    assert_kept(before, inventory(workspace))


@pytest.mark.slow  # Pythons asked their version, in processes
def test_install_with_a_python_that_makes_no_venv(workspace, run_inproc, monkeypatch, tmp_path):
    home = tmp_path / "home"
    monkeypatch.setenv("EDGEPORT_HOME", str(home))
    fake = workspace / "python3.7"
    fake.write_text('#!/bin/sh\nif [ "$1" = "-c" ]; then echo 3.7.16; fi\nexit 0\n')  # says 3.7; -m venv makes nothing
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    before = inventory(workspace)
    r = run_inproc("boards", "install", "tflite-1.13", "--python", str(fake))
    # the path is long: the line keeps the words that say what to do (errors.error_line), the whole in its log
    assert_one_line(r, 2, "made no venv", "no bin/python after `-m venv`", "the venv module", "whole message: ")
    assert_kept(before, inventory(workspace))
    assert not (home / "runtimes" / "tflite-1.13").exists(), "a half-made runtime folder was left"


@pytest.mark.slow  # Pythons asked their version, in processes
def test_install_with_a_python_that_cannot_start(workspace, run_inproc, monkeypatch, tmp_path):
    """The venv is made, and its python cannot be started (not executable): named, exit 2."""
    home = tmp_path / "home"
    monkeypatch.setenv("EDGEPORT_HOME", str(home))
    fake = workspace / "python3.7"
    fake.write_text('#!/bin/sh\nif [ "$1" = "-c" ]; then echo 3.7.16; exit 0; fi\n'
                    'mkdir -p "$3/bin" && touch "$3/bin/python"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    before = inventory(workspace)
    r = run_inproc("boards", "install", "tflite-1.13", "--python", str(fake))
    assert_one_line(r, 2, "installing tflite-1.13's runtime failed", "cannot start it")
    assert_kept(before, inventory(workspace))
    assert not (home / "runtimes" / "tflite-1.13").exists()


def test_np_save_short_write_is_a_full_disk_naming_the_file(tmp_path, monkeypatch):
    """numpy's own error on a short write has neither errno nor file name; edgeport's says both."""
    import errno

    from edgeport.convert.converters import onnx2tf
    from edgeport.errors import is_environment_error

    def short(path, array):
        raise OSError("884736 requested and 456672 written")

    monkeypatch.setattr(onnx2tf.np, "save", short)
    with pytest.raises(OSError) as info:
        onnx2tf.save_npy(tmp_path / "calib.npy", np.zeros(3))
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(tmp_path / "calib.npy")
    assert is_environment_error(info.value) and "884736 requested" in info.value.strerror
