"""No wait without end, every option checked where it is read, no error line over 300 characters.

The trainer's rendezvous once waited inside C++ for the whole process-group timeout, deaf to
SIGTERM, and ended after 302 s in exit 3; a seed, a port or an --out the system refuses ended in
exit 3; a 20 MB architecture name came back as a 20 MB error line.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from edgeport.errors import MAX_LINE, BadInputError, report
from edgeport.train.launch import free_port

from .conftest import Result, assert_one_line, inventory, run_cli

pytestmark = pytest.mark.one_line

TRAIN = ("train", "--data", "data", "--imgsz", "64", "--batch-size", "4", "--epochs", "1", "--eval-every", "1000")
HUGE = "x" * 20_000_000  # past any argv limit: given in this process, or through a file


def _rank_env(rank: int, port: int, **extra: str) -> dict:
    """A rank of two as torchrun (or a hand-written launch script) starts it."""
    return {"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            **extra}


def _line_within_bounds(line: str) -> None:
    assert len(line) <= MAX_LINE, f"an error line of {len(line)} characters: {line[:200]}..."


# -- the rendezvous: refused before it starts, bounded, and ended by a signal ----------------------


def _within_10_s(*argv: str, cwd: Path, env: dict | None = None) -> Result:
    """``edgeport ARGS`` in its own process (a wait inside C++ is not this test's to share), which
    must end within 10 s; killed after 30 (workers die with their launcher)."""
    t0 = time.monotonic()
    try:
        r = run_cli(*argv, cwd=cwd, timeout=30, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`edgeport {' '.join(argv)}` still running after 30 s")
    assert time.monotonic() - t0 < 10, f"took {time.monotonic() - t0:.1f} s"
    return r


def test_a_file_store_in_a_missing_folder_is_refused_before_any_rank_starts(workspace, data):
    before = inventory(workspace)
    r = _within_10_s(*TRAIN, "--world-size", "2", "--dist-url", f"file://{workspace}/missing/store", cwd=workspace)
    assert_one_line(r, 2, "--dist-url", "missing", "does not exist")
    assert inventory(workspace) == before and not (workspace / "runs").exists() and not (workspace / "missing").exists()


def test_a_file_store_over_an_existing_file_is_refused(workspace, data):
    """torch would write its store into the user's file (and wait, inside C++, on what it cannot parse)."""
    before = inventory(workspace)
    r = _within_10_s(*TRAIN, "--dist-url", f"file://{workspace}/notes.txt", cwd=workspace)
    assert_one_line(r, 2, "--dist-url", "the file exists")
    assert inventory(workspace) == before


@pytest.mark.parametrize("rank, url, needle", [
    (0, None, "1 of 2 ranks arrived within 2 s"),  # rank 0 hosts the store; rank 1 never comes
    (1, None, "rank 0's store never answered within 2 s"),  # rank 1 comes; rank 0 never does
    (0, "file", "1 of 2 ranks arrived within 2 s"),
], ids=["env-rank0", "env-rank1", "file-rank0"])
def test_a_rendezvous_that_never_completes_ends_naming_its_address(workspace, data, rank, url, needle):
    port = free_port()
    args = ("--out", "run") + (("--dist-url", f"file://{workspace}/store") if url == "file" else ())
    address = f"file://{workspace}/store" if url == "file" else f"tcp://127.0.0.1:{port}"
    before = inventory(workspace)
    r = _within_10_s(*TRAIN, *args, cwd=workspace, env=_rank_env(rank, port, EDGEPORT_RENDEZVOUS_TIMEOUT_S="2"))
    line = assert_one_line(r, 2, "rendezvous", address, needle, f"rank {rank} of 2")
    _line_within_bounds(line)
    assert not (workspace / "run").exists()
    assert {k: v for k, v in inventory(workspace).items() if k != "store"} == before


@pytest.mark.parametrize("url", ["env", "file"])
def test_sigterm_during_the_rendezvous_ends_it_within_5_s(workspace, data, url):
    port = free_port()
    store = workspace / "store"
    args = ("--dist-url", f"file://{store}") if url == "file" else ()
    env = dict(os.environ, PYTHONUNBUFFERED="1", **_rank_env(0, port))
    env.pop("EDGEPORT_DEBUG", None)
    env.pop("EDGEPORT_RENDEZVOUS_TIMEOUT_S", None)  # the default bound: minutes, so only the signal ends it
    proc = subprocess.Popen([sys.executable, "-m", "edgeport.cli", *TRAIN, "--out", "run", *args], cwd=workspace, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def waiting() -> bool:  # rank 0 has made the store and waits in it for rank 1
        if url == "file":
            return store.exists()
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    try:
        deadline = time.monotonic() + 8
        while not waiting():
            assert proc.poll() is None, f"rank 0 ended before the rendezvous: {proc.stderr.read()}"
            assert time.monotonic() < deadline, "rank 0 never reached the rendezvous"
            time.sleep(0.05)
        time.sleep(0.3)  # inside the wait, not before it
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pytest.fail("SIGTERM during the rendezvous: still waiting 5 s later")
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read()
    assert code == 143, f"exit {code}; stderr:\n{err}"
    assert "Traceback" not in err and took < 5, err
    assert not (workspace / "run").exists()


# -- options checked where they are read -----------------------------------------------------------


@pytest.mark.parametrize("command", ["train", "data synth"])
@pytest.mark.parametrize("seed", ["-1", "4294967296"])
def test_a_seed_out_of_range_is_bad_input(workspace, data, run_inproc, command, seed):
    argv = TRAIN if command == "train" else ("data", "synth", "--out", "synth", "--n", "2", "--n-val", "1", "--imgsz", "32")
    before = inventory(workspace)
    line = assert_one_line(run_inproc(*argv, "--seed", seed), 2, "--seed", seed, "4294967295")
    _line_within_bounds(line)
    assert inventory(workspace) == before and not (workspace / "synth").exists()


@pytest.mark.parametrize("url", ["tcp://127.0.0.1:99999", "tcp://127.0.0.1:0", "tcp://127.0.0.1"])
def test_a_port_out_of_range_is_bad_input(workspace, data, url):
    before = inventory(workspace)
    line = assert_one_line(_within_10_s(*TRAIN, "--world-size", "2", "--dist-url", url, cwd=workspace), 2, "--dist-url", url)
    _line_within_bounds(line)
    assert inventory(workspace) == before and not (workspace / "runs").exists()


def test_a_master_port_out_of_range_is_bad_input(workspace, data):
    """MASTER_PORT is read where the rank meets the others: before any wait."""
    r = _within_10_s(*TRAIN, "--out", "run", cwd=workspace, env=_rank_env(0, 99999))
    assert_one_line(r, 2, "MASTER_PORT='99999'", "1-65535")
    assert not (workspace / "run").exists()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
@pytest.mark.parametrize("command", ["data synth", "convert", "validate", "train"])
def test_an_out_that_cannot_be_created_is_bad_input(workspace, data, run_inproc, command):
    (workspace / "model.tflite").write_bytes(b"not read: --out is refused first")
    argv = {"data synth": ("data", "synth", "--n", "2", "--n-val", "1", "--imgsz", "32"),
            "convert": ("convert", "model.pt", "--arch", "pdet-n"),
            "validate": ("validate", "model.pt", "--tflite", "model.tflite", "--arch", "pdet-n"),
            "train": TRAIN}[command]
    before = inventory(workspace)
    line = assert_one_line(run_inproc(*argv, "--out", "/proc/x"), 2, "--out '/proc/x'", "cannot be created")
    _line_within_bounds(line)
    assert inventory(workspace) == before and not (workspace / "runs").exists()


# -- a 20 MB name is one short line ----------------------------------------------------------------


def _huge_arch_checkpoint(workspace: Path) -> Path:
    ckpt = torch.load(workspace / "model.pt", weights_only=True)
    torch.save({**ckpt, "arch": HUGE}, workspace / "huge.pt")
    return workspace / "huge.pt"


def _huge_arch_resume(workspace: Path) -> Path:
    from edgeport.models.registry import build_model

    model, config = build_model("pdet-n")
    (workspace / "run").mkdir()
    args = {"data": "data", "arch": HUGE, "num_classes": 1, "batch_size": 4, "lr": 0.01, "imgsz": 64}
    torch.save({"format": "edgeport.ckpt/1", "arch": "pdet-n", "config": config, "model": model.state_dict(), "optimizer": {},
                "epoch": 1, "step": 2, "best_map50": -1.0, "args": args, "history": []}, workspace / "run" / "last.pt")
    return workspace / "run" / "last.pt"


@pytest.mark.parametrize("case", ["convert --arch", "convert: the checkpoint's arch", "train --arch", "train --resume: its saved arch",
                                  "convert --head"])
def test_a_20_mb_name_is_one_line_of_at_most_300_characters(workspace, data, run_inproc, case):
    argv = {
        "convert --arch": lambda: ("convert", "model.pt", "--arch", HUGE, "--out", "out"),
        "convert: the checkpoint's arch": lambda: ("convert", _huge_arch_checkpoint(workspace), "--out", "out"),
        "train --arch": lambda: (*TRAIN, "--arch", HUGE),
        "train --resume: its saved arch": lambda: ("train", "--data", "data", "--resume", _huge_arch_resume(workspace),
                                                   "--epochs", "3"),
        "convert --head": lambda: ("convert", "model.pt", "--head", HUGE),  # argparse quotes the choice it refused
    }[case]()
    before = inventory(workspace)
    t0 = time.monotonic()
    r = run_inproc(*argv)
    # (said first and short: a comparison of 20 MB strings would cost pytest minutes to print)
    assert len(r.err) < 10_000, f"exit {r.code}, stderr of {len(r.err):,} characters: {r.err[:200]}..."
    line = assert_one_line(r, 2)
    _line_within_bounds(line)
    assert time.monotonic() - t0 < 10
    said = line
    if "(whole message: " in line:  # a longer message is in the log the line names
        log = Path(line.rsplit("(whole message: ", 1)[1].split(")")[0])
        said = log.read_text()
        log.unlink()
    assert "xxxxxxxx" in said, f"the name is not said: {line}"
    assert inventory(workspace) == before and not (workspace / "out").exists()


def test_every_error_line_is_bounded_and_names_the_log_with_the_whole_message(capsys):
    message = "the board replied " + "y" * 5000 + "; pass --runner to ask another board"
    assert report("edgeport", BadInputError(message)) == 2
    line = capsys.readouterr().err.strip()
    _line_within_bounds(line)
    # the long word is shortened in its middle; what failed and the next step are kept whole
    assert "\n" not in line and line.startswith("edgeport: error: the board replied yyy")
    assert "yyy...yyy" in line and "yyy; pass --runner to ask another board (whole message: " in line
    log = Path(line.rsplit("(whole message: ", 1)[1].rstrip(")"))
    try:
        assert message in log.read_text()
    finally:
        log.unlink()
    assert report("edgeport", RuntimeError("z" * 5000)) == 3  # a bug: its traceback's log is named, the line bounded
    line = capsys.readouterr().err.strip()
    _line_within_bounds(line)
    assert line.startswith("edgeport: internal error: RuntimeError: zzz") and "not a failed gate" in line
    Path(line.rsplit("traceback in ", 1)[1]).unlink()


def test_a_short_error_line_is_as_it_was(capsys):
    assert report("edgeport", BadInputError("--imgsz 33 is not a multiple of 32")) == 2
    assert capsys.readouterr().err == "edgeport: error: --imgsz 33 is not a multiple of 32\n"

