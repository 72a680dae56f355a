"""edgeport's own small files -- locks, markers, staging folders -- never reach a user's file.

A lock or marker is created with O_EXCL | O_NOFOLLOW and an existing one is opened without
following a link, and only as a plain file with one name: a ``run/.edgeport-lock`` symlinked
(or hard-linked) to the user's ``notes.txt`` is refused, not overwritten with JSON. A folder is
removed as stale staging only when edgeport provably made it: its name is mkdtemp's, it holds
only what staging holds, and its marker's JSON names an owner process on this host that is gone.
gpu_check writes into OUT only when OUT is its own (a marker of its own JSON, and the summary
there the one it wrote). Each case: the exit code, the one error line, every user file kept.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from edgeport.folders import LOCK, MARKER, STAGING_MARKER, STAGING_SCHEMA, NotOurs, lock_folder, read_marker, reclaim_staging, write_marker

from .conftest import assert_kept, assert_one_line, inventory

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def resumable(workspace) -> Path:
    """``run/last.pt`` as a killed training run leaves it, with a tiny dataset beside it."""
    import numpy as np

    from edgeport.models.registry import build_model
    from edgeport.models.synth import make_scene
    from edgeport.validate.datasets import write_dataset

    rng = np.random.default_rng(0)
    write_dataset(workspace / "data", {"train": [make_scene(rng, 64) for _ in range(4)], "val": [make_scene(rng, 64)]}, size=64)
    model, config = build_model("pdet-n")
    args = {"data": "data", "arch": "pdet-n", "num_classes": 1, "batch_size": 4, "lr": 0.01, "imgsz": 64}
    (workspace / "run").mkdir()
    torch.save({"format": "edgeport.ckpt/1", "arch": "pdet-n", "config": config, "model": model.state_dict(), "optimizer": {},
                "epoch": 1, "step": 2, "best_map50": -1.0, "args": args, "history": []}, workspace / "run" / "last.pt")
    write_marker(workspace / "run", "train")
    return workspace / "run"


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_resume_never_writes_its_lock_through_a_link(workspace, resumable, run_inproc, link):
    if link == "symlink":
        (resumable / LOCK).symlink_to("../notes.txt")
    else:
        os.link(workspace / "notes.txt", resumable / LOCK)
    before = inventory(workspace)
    r = run_inproc("train", "--data", "data", "--resume", "run/last.pt", "--epochs", "2")
    assert_one_line(r, 2, ".edgeport-lock", "is a link", "never follows or writes through its lock and marker files")
    assert (workspace / "notes.txt").read_text() == "the user's own file\n"
    assert_kept(before, inventory(workspace))


def test_a_marker_that_is_a_link_is_never_read_through_or_written(workspace):
    folder = workspace / "out"
    folder.mkdir()
    (workspace / "elsewhere.json").write_text(json.dumps({"schema": "edgeport.run/2", "command": "convert", "files": {},
                                                          "dirs": []}))
    (folder / MARKER).symlink_to("../elsewhere.json")
    before = inventory(workspace)
    with pytest.raises(NotOurs, match="is a link"):
        read_marker(folder)
    write_marker(folder, "convert")  # replaces the link itself: the file it pointed at is untouched
    assert not (folder / MARKER).is_symlink() and read_marker(folder).command == "convert"
    assert_kept({k: v for k, v in before.items() if k != f"out/{MARKER}"}, inventory(workspace))


def test_a_lock_made_fresh_is_made_exclusively(tmp_path):
    lock = lock_folder(tmp_path, "convert")
    try:
        assert json.loads((tmp_path / LOCK).read_text())["pid"] == os.getpid()
        assert not (tmp_path / LOCK).is_symlink()
    finally:
        lock.release()
    lock_folder(tmp_path, "convert").release()  # a lock a finished run left is taken again


def test_a_folder_a_live_run_holds_is_refused_as_in_use_before_its_files_are_judged(tmp_path):
    """A live run rewrites its outputs as it goes, so the folder holds files "changed since edgeport
    wrote them": that it runs is the reason given, not that the files are someone else's. (CI saw a
    second `train --force` beside a live one get the files' reason once the live run had written.)"""
    from edgeport.errors import BadInputError
    from edgeport.folders import FolderInUse, check_out, record_outputs

    out = tmp_path / "run"
    out.mkdir()
    write_marker(out, "train")
    (out / "last.pt").write_bytes(b"epoch 1")
    record_outputs(out, "last.pt")
    lock = lock_folder(out, "train")
    try:
        (out / "last.pt").write_bytes(b"epoch 2, as the live run writes it")
        for force in (True, False):
            with pytest.raises(FolderInUse, match=rf"is in use by a running edgeport train \(process {os.getpid()}\)"):
                check_out(out, command="train", force=force)
        with pytest.raises(FolderInUse, match="running edgeport train"):  # the holder's command, whoever asks
            check_out(out, command="convert", force=True)
    finally:
        lock.release()
    with pytest.raises(BadInputError, match="holds files edgeport train did not write"):
        check_out(out, command="train", force=True)  # once it ended, the changed file is judged
    assert (out / "last.pt").read_bytes() == b"epoch 2, as the live run writes it" and json.loads((out / LOCK).read_text())


# -- staging folders ------------------------------------------------------------------------------


def test_a_users_folder_that_looks_like_staging_is_never_removed(workspace, run_inproc):
    mine = workspace / ".edgeport-staging-backup"
    mine.mkdir()
    (mine / STAGING_MARKER).write_text("")
    (mine / "b.txt").write_text("the user's backup\n")
    before = inventory(workspace)
    r = run_inproc("data", "synth", "--out", "synth", "--n", "2", "--n-val", "1", "--imgsz", "32")
    assert r.code == 0, r.err
    assert "staging folder" not in r.err
    assert_kept(before, inventory(workspace))


def _staging(parent: Path, name: str, marker: dict | str | None, extra: str | None = None) -> Path:
    folder = parent / name
    (folder / "work").mkdir(parents=True)
    if marker is not None:
        (folder / STAGING_MARKER).write_text(marker if isinstance(marker, str) else json.dumps(marker))
    if extra:
        (folder / extra).write_text("a user's file\n")
    return folder


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("case", ["name", "empty-marker", "other-schema", "live-owner", "other-host", "user-file", "link"])
def test_only_a_provably_stale_staging_folder_is_removed(tmp_path, case):
    dead = {"schema": STAGING_SCHEMA, "command": "convert", "pid": _dead_pid(), "host": socket.gethostname()}
    name = ".edgeport-staging-abcd1234"
    kept = {
        "name": lambda: _staging(tmp_path, ".edgeport-staging-backup", dead),
        "empty-marker": lambda: _staging(tmp_path, name, ""),
        "other-schema": lambda: _staging(tmp_path, name, {**dead, "schema": "mine"}),
        "live-owner": lambda: _staging(tmp_path, name, {**dead, "pid": os.getpid()}),
        "other-host": lambda: _staging(tmp_path, name, {**dead, "host": "another-machine"}),
        "user-file": lambda: _staging(tmp_path, name, dead, extra="b.txt"),
        "link": lambda: _staging(tmp_path, name, None),
    }
    folder = kept[case]()
    if case == "link":
        (tmp_path / "theirs.json").write_text(json.dumps(dead))
        (folder / STAGING_MARKER).symlink_to(tmp_path / "theirs.json")
    before = inventory(tmp_path)
    assert reclaim_staging(tmp_path) == []
    assert inventory(tmp_path) == before
    # and the one that is provably edgeport's, whose owner is gone, is removed
    stale = _staging(tmp_path, ".edgeport-staging-zz99aa00", dead)
    assert reclaim_staging(tmp_path) == [stale.name] and not stale.exists()
    assert inventory(tmp_path) == before


# -- gpu_check ------------------------------------------------------------------------------------


def _gpu_check(out: Path, *extra: str):
    return subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--budget", "0", *extra, str(out)],
                          capture_output=True, text=True, env={**os.environ, "PY": sys.executable}, timeout=300)


def test_gpu_check_never_overwrites_a_users_summary_beside_an_empty_marker(workspace):
    out = workspace / "OUT"
    out.mkdir()
    (out / ".edgeport-gpu-check").write_text("")
    (out / "summary.json").write_text('{"my": "figures"}\n')
    before = inventory(workspace)
    r = _gpu_check(out)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert "is not a gpu_check folder" in line and "an empty one is not" in line and "give a new or empty OUT_DIR" in line
    assert_kept(before, inventory(workspace))
    assert sorted(p.name for p in out.iterdir()) == [".edgeport-gpu-check", "summary.json"]


@pytest.mark.slow  # gpu_check asks a Python what it can import, in processes
@pytest.mark.one_line  # gpu_check's own folder: no converter line is involved (pyproject.toml)
def test_gpu_check_writes_again_only_into_its_own_folder_and_summary(workspace):
    out = workspace / "OUT"
    first = _gpu_check(out, "--smoke", "--no-convert")
    assert first.returncode in (0, 1, 2) and "Traceback" not in first.stderr, first.stderr
    said = json.loads((out / ".edgeport-gpu-check").read_text())
    assert said["schema"] == "edgeport.gpu-check/1" and len(said["summary.json"]) == 64
    again = _gpu_check(out, "--smoke", "--no-convert")
    assert "is not a gpu_check folder" not in again.stderr, again.stderr  # its own earlier run: written again
    (out / "summary.json").write_text('{"edited": "by the user"}\n')
    before = inventory(workspace)
    third = _gpu_check(out, "--smoke", "--no-convert")
    assert third.returncode == 2 and "its summary.json is not the one gpu_check wrote" in third.stderr, third.stderr
    assert_kept(before, inventory(workspace))


def test_a_fifo_in_a_markers_place_is_refused_at_once(tmp_path):
    """A FIFO named like edgeport's marker once blocked `convert --force` for good on open(): it is
    opened without waiting, and refused as not edgeport's."""
    import os
    import time

    from edgeport.folders import MARKER, NotOurs, _read_own

    fifo = tmp_path / MARKER
    os.mkfifo(fifo)
    t0 = time.monotonic()
    with pytest.raises(NotOurs):
        _read_own(fifo)
    assert time.monotonic() - t0 < 5


def test_what_a_killed_write_leaves_is_edgeports_and_a_file_at_its_temporary_name_is_never_removed(tmp_path, monkeypatch):
    """``writing``'s temporaries (``.NAME.tmp-PID-HEX``), whichever file they were for, are a killed
    run's and go; a user's file that only looks like one stays foreign. A file already at the
    temporary's name makes the write fail, and is not removed."""
    from edgeport.folders import foreign_entries, remove_transient, write_output, writing

    run = tmp_path / "run"
    run.mkdir()
    write_marker(run, "train")
    write_output(run, "report.json", "{}")
    left = [run / ".last.pt.tmp-4242-0123abcd", run / f".{MARKER}.tmp-17-deadbeef"]
    users = [".notes.tmp-old", ".notes.tmp-2024-my-backup-cafebabe"]
    for p in left + [run / u for u in users]:
        p.write_text("half")
    assert foreign_entries(run, "train") == sorted(users)
    assert sorted(remove_transient(run)) == sorted(p.name for p in left) and all((run / u).exists() for u in users)
    monkeypatch.setattr("secrets.token_hex", lambda n: "00000000")
    theirs = run / f".x.json.tmp-{os.getpid()}-00000000"
    theirs.write_text("not edgeport's")
    with pytest.raises(FileExistsError):
        with writing(run / "x.json") as f:
            f.write(b"{}")
    assert theirs.read_text() == "not edgeport's" and not (run / "x.json").exists()
