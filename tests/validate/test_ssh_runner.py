"""The SSH runner against a real sshd on 127.0.0.1: the "board" is this machine, reached as a
board is, with throwaway keys. On it runs the real TFLite 1.13.1 (`make setup-boards`).

Every way a board can fail to be usable -- unreachable, authentication refused, no runtime
on it, a run that does not finish -- is exit 2 with one line, and leaves nothing on the board.
"""

from __future__ import annotations

import getpass
import json
import stat
import sys
import time
from pathlib import Path

import pytest

from edgeport.validate.board.profiles import BOARDS_DIR, load_board
from edgeport.validate.board.runtime import installed_python

from ..conftest import free_port as _free_port

pytestmark = [pytest.mark.slow, pytest.mark.one_line]  # no converter line changes the transport


def _profile(tmp_path: Path, sshd: dict, *, python: str, key: Path | None = None, port: int | None = None,
             timeout_s: float = 300, max_reply_mb: float = 256) -> tuple[Path, Path]:
    """A board profile like tflite-1.13's, reached over SSH; returns it and the board's run folder root."""
    board_dir = tmp_path / "board"
    board_dir.mkdir(exist_ok=True)
    text = (BOARDS_DIR / "tflite-1.13.toml").read_text().split("[install]")[0]
    text = text.replace('name = "tflite-1.13"', 'name = "ssh-board"')
    # the board's host key, as a user who connected once has it (a profile gives ssh no free options)
    known_hosts = tmp_path / "known_hosts"
    host_key = " ".join((sshd["root"] / "host.pub").read_text().split()[:2])
    known_hosts.write_text(f"[127.0.0.1]:{port or sshd['port']} {host_key}\n")
    text += "\n".join([
        "[runner]",
        f'url = "ssh://{getpass.getuser()}@127.0.0.1:{port or sshd["port"]}"',
        f'python = "{python}"',
        f'identity = "{key or sshd["key"]}"',
        f'known_hosts = "{known_hosts}"',
        f"timeout_s = {timeout_s}",
        f"max_reply_mb = {max_reply_mb}",
        f'workdir = "{board_dir}"',
    ]) + "\n"
    path = tmp_path / "ssh-board.toml"
    path.write_text(text)
    return path, board_dir


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _one_line_exit_2(proc, *needles: str) -> None:
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_a_board_over_ssh_runs_the_model_on_its_own_runtime(tmp_path, sshd, random_checkpoint, cli):
    python = installed_python(load_board("tflite-1.13"))
    if python is None:
        pytest.skip("the real TFLite 1.13.1 is not installed: `make setup-boards` (needs a python3.7)")
    profile, board_dir = _profile(tmp_path, sshd, python=str(python))
    out = tmp_path / "out"
    proc = cli("convert", str(random_checkpoint("pdet-n-bilinear", 2)), "--imgsz", "64", "--board", str(profile),
               "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    rows = {r["runtime"]: r for r in report["results"]}
    assert rows["board:ssh-board (TFLite 1.13.1 over SSH)"]["passed"], sorted(rows)
    assert rows["board:ssh-board (TFLite 1.13.1 over SSH)"]["reported_runtime"] is None, "it is what the profile says"
    assert rows["board:ssh-board (emulated)"]["passed"]
    assert report["board_runtime"]["via"].startswith("board ssh://")
    assert list(board_dir.iterdir()) == []  # nothing left on the board


def test_an_unreachable_board(tmp_path, sshd, cli):
    profile, board_dir = _profile(tmp_path, sshd, python="python3")
    closed = f"ssh://{getpass.getuser()}@127.0.0.1:{_free_port()}"  # --runner replaces the profile's url
    proc = cli("boards", "probe", str(profile), "--runner", closed)
    _one_line_exit_2(proc, f"board {closed} is unreachable", "Connection refused", "check the host, the port")
    assert list(board_dir.iterdir()) == []


def test_authentication_refused(tmp_path, sshd, cli):
    profile, board_dir = _profile(tmp_path, sshd, python="python3", key=sshd["stranger"])
    proc = cli("boards", "probe", str(profile))
    _one_line_exit_2(proc, "authentication to ssh://", "failed", "Permission denied")
    assert list(board_dir.iterdir()) == []


def test_a_board_without_a_runtime(tmp_path, sshd, cli):
    bare = _script(tmp_path / "bare-python", f'exec "{sys.executable}" -S "$@"')  # no site-packages: no numpy, no TFLite
    profile, board_dir = _profile(tmp_path, sshd, python=bare)
    _one_line_exit_2(cli("boards", "probe", str(profile)), "cannot run TFLite", "install tflite-runtime there")
    assert list(board_dir.iterdir()) == []
    profile, board_dir = _profile(tmp_path, sshd, python="/nonexistent/python3")
    _one_line_exit_2(cli("boards", "probe", str(profile)), "has no '/nonexistent/python3'", "set python")
    assert list(board_dir.iterdir()) == []


def test_a_run_that_does_not_finish(tmp_path, sshd, cli):
    hang = _script(tmp_path / "hanging-python", "sleep 60")
    profile, board_dir = _profile(tmp_path, sshd, python=hang, timeout_s=2)
    t0 = time.monotonic()
    proc = cli("boards", "probe", str(profile))
    _one_line_exit_2(proc, "did not finish within 2 s", "timeout_s")
    assert time.monotonic() - t0 < 30
    assert list(board_dir.iterdir()) == []

