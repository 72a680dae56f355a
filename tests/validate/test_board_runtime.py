"""The runner protocol and its local transport, the op probe, and `edgeport boards install`'s
refusals -- without the real TFLite 1.13.1 (tests/validate/test_real_tflite113.py has that).

This Python's own LiteRT stands in for a board runtime: the protocol is the same.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import numpy as np
import pytest

from edgeport.errors import BadInputError
from edgeport.validate.board import runtime as board_runtime
from edgeport.validate.board.install import find_python, install
from edgeport.validate.board.probe import one_op_model, probe
from edgeport.validate.board.profiles import BoardProfile, InstallSpec, RunnerSpec, load_board, parse_ssh_url
from edgeport.validate.board.runtime import BoardRuntimeError, LocalPython, this_python
from edgeport.validate.parity.board_runner import BoardRunner
from edgeport.validate.parity.runners import RuntimeRefused


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _identity_model(path: Path, code_name: str = "ADD", version: int = 1) -> Path:
    """An empty graph (input = output, one float) that still names one operator code."""

    path.write_bytes(one_op_model(code_name, version))
    return path


def test_ssh_urls():
    assert parse_ssh_url("ssh://pi@192.168.1.20") == ("pi", "192.168.1.20", 22)
    assert parse_ssh_url("ssh://board:2222") == (None, "board", 2222)
    spec = RunnerSpec(url="ssh://root@127.0.0.1:2022")
    assert (spec.user, spec.host, spec.port) == ("root", "127.0.0.1", 2022)
    for bad in ("pi@board", "http://board", "ssh://", "ssh://a@b:notaport", "ssh://a:pw@b", "ssh://a@b/path"):
        with pytest.raises(BadInputError, match="is not ssh://"):
            parse_ssh_url(bad)


def test_profiles_carry_install_and_runner(tmp_path):
    assert load_board("tflite-1.13").install == InstallSpec("3.7", ("tensorflow==1.13.1", "numpy<1.17", "protobuf<3.21"))
    assert load_board("tflite-1.13").has_real_runtime and not load_board("default").has_real_runtime
    path = tmp_path / "pi.toml"
    path.write_text('runtime = "tflite"\nversion = "2.14.0"\ndtypes = ["float32"]\nram_bytes = 1\nflash_bytes = 1\n'
                    '[runner]\nurl = "ssh://pi@10.0.0.2"\npython = "/opt/venv/bin/python"\ntimeout_s = 60\n')
    board = load_board(str(path))
    assert board.runner == RunnerSpec(url="ssh://pi@10.0.0.2", python="/opt/venv/bin/python", timeout_s=60.0)
    path.write_text(path.read_text().replace("ssh://pi@10.0.0.2", "pi@10.0.0.2"))
    with pytest.raises(BadInputError, match="is not ssh://"):
        load_board(str(path))


@pytest.mark.slow  # the runtime runs in a process
def test_the_protocol_runs_a_model_and_names_the_runtime(tmp_path):
    model = _identity_model(tmp_path / "id.tflite")
    x = np.arange(3, dtype=np.float32)  # three "images" of one value each
    runner = BoardRunner(this_python(), model, [(1,)], runtime="board:here", workdir=tmp_path)
    out = runner.run(x)
    np.testing.assert_array_equal(out.outputs[0], x)  # what went in came back, image by image
    assert out.reported.startswith("LiteRT "), "the runtime says what it is, where its label does not"
    assert out.repeat_max_abs == 0.0, "each image invoked twice, the same answer"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["id.tflite"]  # its run folder is gone
    runner.once = True  # validate --data's images: the outputs alone, each image invoked once
    once = runner.run(x)
    np.testing.assert_array_equal(once.outputs[0], x)
    assert once.repeat_max_abs is None and len(once.image_ms) == 3


def test_files_are_timed_against_each_other_in_one_process_and_a_reply_is_read_strictly(tmp_path):
    from edgeport.validate.board.reply import Malformed, check_reply
    from edgeport.validate.parity.board_runner import time_interleaved

    a, b = _identity_model(tmp_path / "a.tflite"), _identity_model(tmp_path / "b.tflite", "MUL")
    ms = time_interleaved(this_python(), [a, b, a], np.arange(6, dtype=np.float32), tmp_path)
    assert len(ms) == 3 and all(t >= 0 for t in ms)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tflite", "b.tflite"]  # its folder is gone
    good = {"ok": True, "runtime": "r", "version": "1", "package": "p", "ms": [0.1, 0.2]}
    assert check_reply(good, "time", models=2)["ms"] == [0.1, 0.2]
    for bad in ([0.1], [0.1, -1.0], [0.1, "fast"]):
        with pytest.raises(Malformed, match="one time .* per model timed"):
            check_reply({**good, "ms": bad}, "time", models=2)


@pytest.mark.slow  # the runtime runs in a process
def test_a_model_the_runtime_lacks_an_op_for_is_refused_in_its_own_words(tmp_path):
    model = _identity_model(tmp_path / "v99.tflite", "CONV_2D", 99)
    with pytest.raises(RuntimeRefused, match="refused the model: Didn't find op for builtin opcode 'CONV_2D' version '99'"):
        BoardRunner(this_python(), model, [(1,)], runtime="board:here", workdir=tmp_path).run(np.zeros(1, np.float32))


@pytest.mark.slow  # the runtime runs in a process
def test_a_python_without_a_runtime_or_that_crashes_is_bad_input(tmp_path):
    model = _identity_model(tmp_path / "id.tflite")
    bare = LocalPython(_script(tmp_path / "bare", f'exec "{sys.executable}" -S "$@"'), what="the bare Python")
    with pytest.raises(BoardRuntimeError, match=r"the bare Python cannot run TFLite: Python 3\.\d+ here has no numpy"):
        BoardRunner(bare, model, [(1,)], runtime="board:x", workdir=tmp_path).run(np.zeros(1, np.float32))
    crash = LocalPython(_script(tmp_path / "crash", "echo 'Segmentation fault' >&2; exit 139"), what="the board")
    with pytest.raises(BoardRuntimeError, match=r"the board crashed \(exit 139\): Segmentation fault"):
        BoardRunner(crash, model, [(1,)], runtime="board:x", workdir=tmp_path).run(np.zeros(1, np.float32))
    slow = LocalPython(_script(tmp_path / "slow", "sleep 30"), what="the slow board", timeout_s=1)
    with pytest.raises(BoardRuntimeError, match="the slow board did not finish within 1 s"):
        BoardRunner(slow, model, [(1,)], runtime="board:x", workdir=tmp_path).run(np.zeros(1, np.float32))


@pytest.mark.slow  # the runtime runs in a process
def test_the_probe_asks_the_runtime_itself():
    runtime, table = probe(this_python(), max_version=3)
    assert runtime["runtime"] == "LiteRT" and runtime["accepted"]
    assert table["CONV_2D"] == [1, 2, 3] and table["RELU_0_TO_1"] == [1]
    assert "PLACEHOLDER_FOR_GREATER_OP_CODES" not in table  # not an op: no kernel answers to it
    # and which ops it computes on uint8: today's runtime has every probed op but BATCH_MATMUL there
    assert {"CONV_2D", "MEAN", "TRANSPOSE_CONV", "HARD_SWISH"} <= set(runtime["uint8_ops"])
    assert "BATCH_MATMUL" not in runtime["uint8_ops"] and runtime["uint8_not"]["BATCH_MATMUL"]


@pytest.mark.slow  # the runtime runs in a process
def test_the_shipped_default_table_is_what_this_runtime_has_when_it_is_the_probed_one():
    from edgeport._lazy import installed_versions

    board = load_board("default")
    probed = board.op_table.source
    if f"ai-edge-litert=={installed_versions(['ai-edge-litert'])['ai-edge-litert']}" not in probed:
        pytest.skip(f"the default table was {probed}; this environment has another ai-edge-litert")
    _, table = probe(this_python())
    assert {op: frozenset(vs) for op, vs in table.items()} == board.op_table.versions


@pytest.mark.slow  # Pythons asked their version, in processes
def test_install_refusals(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEPORT_HOME", str(tmp_path / "home"))
    with pytest.raises(BadInputError, match="board 'default' has no installable runtime .* boards with one: tflite-1.13"):
        install(load_board("default"))
    old = load_board("tflite-1.13")
    with pytest.raises(BadInputError, match=r"--python .* is Python 3\.\d+\.\d+; tflite-1.13's runtime needs Python 3.7"):
        install(old, python=sys.executable)
    custom = BoardProfile("mine", "", "tflite", "1.0.0", ("float32",), 1, 1, install=InstallSpec("3.7", ("evil-package",)))
    with pytest.raises(BadInputError, match="'mine' is not one edgeport ships; `boards install` installs only"):
        install(custom)  # its packages would be installed, and their code run, from a file
    fake = BoardProfile("fake", "", "tflite", "1.0.0", ("float32",), 1, 1, install=InstallSpec("2.9", ("x",)), shipped=True)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))
    monkeypatch.setattr(board_runtime.Path, "home", lambda: tmp_path)
    with pytest.raises(BadInputError, match="fake needs Python 2.9, and none is on PATH or in pyenv; install it"):
        install(fake)
    assert not (tmp_path / "home").exists()  # nothing made for a refusal


@pytest.mark.slow  # Pythons asked their version, in processes
def test_find_python_passes_over_a_shim_that_refuses(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _script(bindir / "python3.42", "echo 'pyenv: python3.42: command not found' >&2; exit 127")
    real = tmp_path / "pyenv" / "versions" / "3.42.1" / "bin"
    real.mkdir(parents=True)
    _script(real / "python3.42", f'exec "{sys.executable}" -c "print(\'3.42.1\')"')
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))
    assert find_python("3.42") == str(real / "python3.42")
