"""Nothing of the user's is ever deleted or overwritten by an output folder, whatever --out is."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from edgeport.errors import BadInputError
from edgeport.folders import MARKER, OutputConflict, claim_run_dir, record_outputs, staged_output, write_marker

from .conftest import assert_kept, assert_one_line, inventory, run_cli

CONVERT = ("convert", "model.pt", "--arch", "pdet-n", "--imgsz", "64", "--no-int8")


def _marked(folder: Path, command: str, *files: str) -> Path:
    """An earlier result of ``command``: the files it wrote, listed in its marker's manifest."""
    folder.mkdir(parents=True)
    write_marker(folder, command)
    for name in files:
        (folder / name).write_text(f"earlier {name}\n")
    record_outputs(folder, *files)
    return folder


# --- --force refuses what is not provably edgeport's ------------------------------------


def test_force_refuses_the_working_directory(workspace, run_inproc):
    before = inventory(workspace)
    r = run_inproc(*CONVERT, "--out", ".", "--force")
    assert_one_line(r, 2, "working directory")
    assert inventory(workspace) == before


def test_force_refuses_a_parent_of_the_working_directory(workspace, run_inproc):
    before = inventory(workspace.parent)
    r = run_inproc(*CONVERT, "--out", "..", "--force")
    assert_one_line(r, 2, "parent of the working directory")
    assert inventory(workspace.parent) == before


def test_force_refuses_an_out_that_holds_the_checkpoint(workspace, run_inproc):
    (workspace / "runs").mkdir()
    os.replace(workspace / "model.pt", workspace / "runs" / "model.pt")
    before = inventory(workspace)
    r = run_inproc("convert", "runs/model.pt", "--arch", "pdet-n", "--out", "runs", "--force")
    assert_one_line(r, 2, "holds the input", "runs/model.pt")
    assert inventory(workspace) == before


def test_force_refuses_an_out_that_holds_the_calibration_folder(workspace, run_inproc):
    before = inventory(workspace)
    (workspace / "data").mkdir()
    os.replace(workspace / "calib", workspace / "data" / "calib")
    before = inventory(workspace)
    r = run_inproc(*CONVERT, "--calib", "data/calib", "--out", "data", "--force")
    assert_one_line(r, 2, "holds the input", "calib")
    assert inventory(workspace) == before


def test_force_refuses_a_folder_edgeport_did_not_make(workspace, run_inproc):
    (workspace / "results").mkdir()
    (workspace / "results" / "thesis.tex").write_text("months of work\n")
    before = inventory(workspace)
    r = run_inproc(*CONVERT, "--out", "results", "--force")
    assert_one_line(r, 2, "was not made by edgeport convert")
    assert inventory(workspace) == before


def test_force_refuses_an_edgeport_folder_holding_a_user_file(workspace, run_inproc):
    out = _marked(workspace / "out", "convert", "report.json")
    (out / "my-analysis.ipynb").write_text("{}\n")
    before = inventory(workspace)
    r = run_inproc(*CONVERT, "--out", "out", "--force")
    assert_one_line(r, 2, "did not write", "my-analysis.ipynb")
    assert inventory(workspace) == before


def test_force_refuses_another_commands_folder(workspace, run_inproc):
    _marked(workspace / "out", "train", "last.pt")
    before = inventory(workspace)
    r = run_inproc(*CONVERT, "--out", "out", "--force")
    assert_one_line(r, 2, "was not made by edgeport convert")
    assert inventory(workspace) == before


def test_non_empty_out_without_force_is_refused(workspace, run_inproc):
    _marked(workspace / "out", "convert", "report.json")
    before = inventory(workspace)
    r = run_inproc(*CONVERT, "--out", "out")
    assert_one_line(r, 2, "not empty", "--force")
    assert inventory(workspace) == before


def test_out_that_is_a_file_is_refused(workspace, run_inproc):
    before = inventory(workspace)
    r = run_inproc(*CONVERT, "--out", "notes.txt")
    assert_one_line(r, 2, "is a file")
    assert inventory(workspace) == before


def test_validate_force_refuses_the_folder_holding_the_tflite(workspace, run_inproc):
    (workspace / "ship").mkdir()
    (workspace / "ship" / "model.tflite").write_bytes(b"\x1c\x00\x00\x00TFL3" + bytes(64))
    before = inventory(workspace)
    r = run_inproc("validate", "model.pt", "--arch", "pdet-n", "--tflite", "ship/model.tflite", "--out", "ship", "--force")
    assert_one_line(r, 2, "holds the input")
    assert inventory(workspace) == before


# --- the staging mechanism: claims, changes during a run, failures -----------------------


def test_default_run_folders_are_claimed_atomically(tmp_path):
    root = tmp_path / "runs"
    got: list[Path] = []
    barrier = threading.Barrier(8)

    def claim():
        barrier.wait()
        got.append(claim_run_dir(root, "convert"))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({p.name for p in got}) == 8, f"two runs shared a folder: {sorted(p.name for p in got)}"
    assert all((p / MARKER).is_file() for p in got)


def test_a_file_created_in_out_during_the_run_is_kept(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(OutputConflict, match="changed during the run") as info:
        with staged_output(out, command="convert", force=False, default_root=tmp_path / "runs") as stage:
            (stage.result / "report.json").write_text("new\n")
            out.mkdir()
            (out / "written-meanwhile.txt").write_text("the user's\n")
    assert (out / "written-meanwhile.txt").read_text() == "the user's\n"
    kept = tmp_path / "out.edgeport-1"
    assert str(kept) in str(info.value) and (kept / "report.json").read_text() == "new\n"
    assert not list(tmp_path.glob(".edgeport-staging-*"))


def test_a_failed_run_leaves_nothing_and_releases_its_claim(tmp_path):
    root = tmp_path / "runs" / "convert"
    with pytest.raises(BadInputError):
        with staged_output(None, command="convert", force=False, default_root=root):
            raise BadInputError("bad")
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
@pytest.mark.one_line  # edgeport's own folders: no converter line changes them (pyproject.toml)
def test_force_replaces_only_an_earlier_result_and_a_symlinked_out_works(workspace):
    """One real conversion: --force over an earlier convert result, reached through a symlink."""
    real = _marked(workspace / "results" / "v1", "convert", "report.json", "model.onnx")
    (workspace / "latest").symlink_to(real)
    before = inventory(workspace)
    r = run_cli(*CONVERT, "--out", "latest", "--force", cwd=workspace)
    assert r.code == 0, r.err
    after = inventory(workspace)
    assert_kept({k: v for k, v in before.items() if not k.startswith("results/")}, after)
    assert (workspace / "latest").is_symlink(), "the user's symlink was replaced"
    report = json.loads((real / "report.json").read_text())
    assert report["passed"] and report["model"]["arch"] == "pdet-n"
    assert {p.name for p in real.iterdir()} == {MARKER, "model.onnx", "model_float32.tflite", "report.json", "report.md", "report.html"}
    assert not list(workspace.rglob(".edgeport-staging-*"))


@pytest.mark.slow
@pytest.mark.one_line  # edgeport's own folders: no converter line changes them (pyproject.toml)
def test_two_converts_at_once_get_their_own_folders(workspace):
    procs = [subprocess.Popen([sys.executable, "-m", "edgeport.cli", *CONVERT], cwd=workspace, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    runs = sorted(p.name for p in (workspace / "runs" / "convert").iterdir())
    assert runs == ["1", "2"]
    for name in runs:
        assert (workspace / "runs" / "convert" / name / "report.json").is_file()


@pytest.mark.slow
@pytest.mark.one_line  # edgeport's own signals and folders (pyproject.toml)
@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_during_convert_leaves_nothing_behind(workspace, sig, code):
    before = inventory(workspace)
    # as from a terminal: a test run started in the background of a shell without job control
    # ignores SIGINT, and a child would inherit that
    proc = subprocess.Popen([sys.executable, "-m", "edgeport.cli", *CONVERT, "--out", "out"], cwd=workspace,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(workspace.glob(".edgeport-staging-*/work/model.onnx")):
        time.sleep(0.01)  # in the middle of the run: the ONNX file is written, onnx2tf starts
    assert proc.poll() is None, "the run ended before the signal could be sent"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert "nothing was left behind" in err and "Traceback" not in err
    assert inventory(workspace) == before
    assert not (workspace / "out").exists() and not list(workspace.glob(".edgeport-*"))


# --- data synth -----------------------------------------------------------------------------


def test_data_synth_out_file_is_refused(workspace, run_inproc):
    before = inventory(workspace)
    r = run_inproc("data", "synth", "--out", "notes.txt", "--n", "2")
    assert_one_line(r, 2, "is a file")
    assert inventory(workspace) == before


def test_data_synth_force_replaces_an_earlier_dataset_without_mixing(workspace, run_inproc):
    r = run_inproc("data", "synth", "--out", "ds", "--n", "4", "--n-val", "2", "--imgsz", "64")
    assert r.code == 0, r.err
    r = run_inproc("data", "synth", "--out", "ds", "--n", "2", "--n-val", "1", "--imgsz", "64", "--force", "--seed", "1")
    assert r.code == 0, r.err
    assert sorted(p.name for p in (workspace / "ds" / "images" / "train").iterdir()) == ["train_00000.png", "train_00001.png"]
    assert len(list((workspace / "ds" / "labels" / "val").iterdir())) == 1


def test_data_synth_force_refuses_a_user_folder(workspace, run_inproc):
    (workspace / "ds").mkdir()
    (workspace / "ds" / "my-labels.csv").write_text("a,b\n")
    before = inventory(workspace)
    r = run_inproc("data", "synth", "--out", "ds", "--n", "2", "--force")
    assert_one_line(r, 2, "was not made by edgeport data")
    assert inventory(workspace) == before


def test_a_parent_made_by_a_concurrent_run_is_neither_an_error_nor_ours(tmp_path, monkeypatch):
    """Two runs start at once: both see no ``runs/``, one makes it first. The other carries on, and
    does not count it among the folders it would remove on failure."""
    from edgeport import folders as runs_module

    target = tmp_path / "runs" / "convert" / "x"
    real_exists = Path.exists

    def racing_exists(self):
        if self == tmp_path / "runs" and not real_exists(self):
            self.mkdir()  # the other run, between our look and our mkdir
            return False
        return real_exists(self)

    monkeypatch.setattr(Path, "exists", racing_exists)
    created = runs_module.make_parents(target)
    assert created == [tmp_path / "runs" / "convert"] and (tmp_path / "runs" / "convert").is_dir()


def test_data_synth_force_keeps_images_a_user_added(workspace, run_inproc):
    r = run_inproc("data", "synth", "--out", "ds", "--n", "2", "--n-val", "1", "--imgsz", "64")
    assert r.code == 0, r.err
    # the user adds their own labelled images beside the synthetic ones, named like them
    (workspace / "ds" / "images" / "train" / "train_00099.png").write_bytes(b"\x89PNG the user's photo")
    (workspace / "ds" / "labels" / "train" / "train_00099.txt").write_text("0 0.5 0.5 0.2 0.4\n")
    before = inventory(workspace)
    r = run_inproc("data", "synth", "--out", "ds", "--n", "2", "--n-val", "1", "--imgsz", "64", "--force")
    assert_one_line(r, 2, "did not write", "train_00099")
    assert inventory(workspace) == before


def test_force_refuses_a_result_whose_file_the_user_changed(workspace, run_inproc):
    r = run_inproc("data", "synth", "--out", "ds", "--n", "2", "--n-val", "1", "--imgsz", "64")
    assert r.code == 0, r.err
    (workspace / "ds" / "labels" / "train" / "train_00000.txt").write_text("0 0.5 0.5 0.1 0.1\n")  # corrected by hand
    before = inventory(workspace)
    r = run_inproc("data", "synth", "--out", "ds", "--n", "2", "--n-val", "1", "--imgsz", "64", "--force")
    assert_one_line(r, 2, "changed since edgeport wrote it")
    assert inventory(workspace) == before


def test_a_folder_marked_by_an_older_edgeport_is_never_replaced(workspace, run_inproc):
    (workspace / "old").mkdir()
    (workspace / "old" / MARKER).write_text(json.dumps({"schema": "edgeport.run/1", "command": "data", "created": "x"}))
    (workspace / "old" / "images").mkdir()
    before = inventory(workspace)
    r = run_inproc("data", "synth", "--out", "old", "--n", "2", "--force")
    assert_one_line(r, 2, "older edgeport")
    assert inventory(workspace) == before


def test_an_out_name_longer_than_the_file_system_allows_is_bad_input(workspace, run_inproc):
    before = inventory(workspace)
    assert_one_line(run_inproc(*CONVERT, "--out", "x" * 300), 2, "300 bytes", "shorter name")
    assert inventory(workspace) == before and not (workspace / "runs").exists()


def test_an_out_under_a_file_is_bad_input(workspace, run_inproc):
    before = inventory(workspace)
    assert_one_line(run_inproc(*CONVERT, "--out", "notes.txt/out"), 2, "is a file, not a folder")
    assert_one_line(run_inproc("data", "synth", "--out", "notes.txt/ds", "--n", "2"), 2, "is a file, not a folder")
    assert inventory(workspace) == before


def _tmpfs_run(workspace: Path, size: str, mount: Path, command: str) -> subprocess.CompletedProcess:
    """``command`` (a shell line) in its own mount namespace where ``mount`` is a tmpfs of ``size``."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare (util-linux)")
    mount.mkdir(exist_ok=True)
    script = f"mount -t tmpfs -o size={size} tmpfs {shlex.quote(str(mount))} && {command}"
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=workspace, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))
    if "mount:" in proc.stderr and "Operation not permitted" in proc.stderr:
        pytest.skip(f"cannot mount a tmpfs in a user namespace here: {proc.stderr.strip()[-200:]}")
    return proc


@pytest.mark.slow
@pytest.mark.one_line  # edgeport's own folders: no converter line changes them (pyproject.toml)
def test_a_full_disk_during_convert_names_the_file_and_leaves_nothing(workspace):
    """The output's file system fills up while the model is written: exit 2 naming the file, and
    nothing left on it, not even the claimed folder's marker."""
    disk = workspace / "disk"
    cmd = (f"{shlex.quote(sys.executable)} -m edgeport.cli {' '.join(CONVERT)} --out {disk}/out; echo rc=$?; "
           f"find {disk} -mindepth 1")
    proc = _tmpfs_run(workspace, "400k", disk, cmd)
    assert "rc=2" in proc.stdout, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "No space left on device" in errors[0] and "free some disk space" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    leftovers = [line for line in proc.stdout.splitlines() if line.startswith(str(disk))]
    assert leftovers == [], leftovers


@pytest.mark.slow
@pytest.mark.one_line  # edgeport's own folders: no converter line changes them (pyproject.toml)
def test_a_run_killed_outright_leaves_a_staging_folder_the_next_run_removes(workspace):
    proc = subprocess.Popen([sys.executable, "-m", "edgeport.cli", *CONVERT, "--out", "out"], cwd=workspace,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(workspace.glob(".edgeport-staging-*/work/model.onnx")):
        time.sleep(0.01)
    proc.kill()  # SIGKILL: no handler runs, the staging folder stays
    proc.wait()
    left = list(workspace.glob(".edgeport-staging-*"))
    assert left, "SIGKILL arrived after the run ended"
    r = run_cli(*CONVERT, "--out", "out2", cwd=workspace)
    assert r.code == 0, r.err
    assert "removed 1 staging folder(s) that killed runs left" in r.err
    assert not list(workspace.glob(".edgeport-staging-*"))


def test_a_live_runs_staging_folder_is_left_alone(tmp_path):
    from edgeport.folders import reclaim_staging

    with staged_output(tmp_path / "a", command="convert", force=False, default_root=tmp_path / "runs") as stage:
        assert reclaim_staging(tmp_path) == []  # its owner holds the lock
        assert stage.work.is_dir()
    # a user's own folder that merely looks like one is never touched
    (tmp_path / ".edgeport-staging-mine").mkdir()
    (tmp_path / ".edgeport-staging-mine" / "notes.txt").write_text("mine\n")
    assert reclaim_staging(tmp_path) == [] and (tmp_path / ".edgeport-staging-mine" / "notes.txt").is_file()
