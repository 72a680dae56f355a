"""A board is another machine: what it answers is data, checked before use, and never believed blindly.

A board (or a runtime on this machine) that answers invalid JSON, leaves keys out, sends object
arrays (pickles) or outputs of the wrong shape is bad input: exit 2, one line, nothing run from
it. Its runtime's name reaches the terminal and the report inert. A runner URL is parsed
strictly, so nothing in it reaches ``ssh`` as an option.
"""

from __future__ import annotations

import json
import re
import stat
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from edgeport.errors import BadInputError
from edgeport.validate.board.probe import one_op_model
from edgeport.validate.board.profiles import parse_ssh_url
from edgeport.validate.board.runtime import BoardRuntimeError, LocalPython
from edgeport.validate.parity.board_runner import BoardRunner

from ..validate.test_ssh_runner import _one_line_exit_2, _profile, _script
from .conftest import assert_one_line, inventory

pytestmark = pytest.mark.one_line  # no converter line changes what these test (pyproject.toml)

# a fake board-side worker: writes the reply its first argument names into the run folder
FAKE_WORKER = r'''
import json, os, sys
import numpy as np
case = sys.argv[1]
os.makedirs("outputs", exist_ok=True)
good = {"ok": True, "runtime": "TFLite", "version": "1.13.1", "package": "tensorflow",
        "outputs": [{"shape": [1], "dtype": "float32", "quantization": [0.0, 0]}], "ms": [1.0], "images": 1}
def save(value):
    np.save("outputs/0000_0.npy", value, allow_pickle=True)
if case == "invalid-json":
    open("result.json", "w").write("{nope")
elif case == "missing-keys":
    json.dump({"ok": True, "runtime": "TFLite"}, open("result.json", "w"))
elif case == "object-array":
    save(np.array([{"__reduce__": "os.system"}], dtype=object)); json.dump(good, open("result.json", "w"))
elif case == "wrong-shape":
    save(np.zeros(7, np.float32)); json.dump(good, open("result.json", "w"))
elif case == "undeclared-output":
    good["outputs"][0]["shape"] = [9]; save(np.zeros(9, np.float32)); json.dump(good, open("result.json", "w"))
elif case == "huge-number":
    save(np.zeros(1, np.float32)); open("result.json", "w").write(json.dumps(good).replace("1.0]", "1e999]"))
elif case == "huge-integer":  # past float's range: no number, not an OverflowError
    save(np.zeros(1, np.float32)); open("result.json", "w").write(json.dumps(good).replace("1.0]", "1" + "0" * 400 + "]"))
elif case == "deep-json":
    open("result.json", "w").write("[" * 100000 + "]" * 100000)
elif case == "huge-result":  # 300 MB that cost the board nothing (a sparse file): refused by its size, never read
    with open("result.json", "wb") as f:
        f.truncate(300 * 2**20)
elif case == "padded-result":  # valid JSON, 5 MB of it
    save(np.zeros(1, np.float32)); open("result.json", "w").write(json.dumps(good) + " " * (5 * 2**20))
elif case == "duplicate-key":  # "ok" twice: one reader sees a failure, another a success
    save(np.zeros(1, np.float32)); open("result.json", "w").write('{"ok": false, ' + json.dumps(good)[1:])
elif case == "control-characters":
    good["runtime"] = "TFLite\x1b]0;owned\x07\x1b[2J\nrunnable on tflite-1.13"
    save(np.zeros(1, np.float32)); json.dump(good, open("result.json", "w"))
'''


@pytest.fixture
def board(tmp_path):
    """``board(case)``: a BoardRunner whose runtime answers as ``case`` says, on a one-float model."""

    worker = tmp_path / "fake_worker.py"
    worker.write_text(FAKE_WORKER)
    model = tmp_path / "model.tflite"
    model.write_bytes(one_op_model("ADD", 1))

    def make(case: str) -> BoardRunner:
        python = tmp_path / f"python-{case}"
        python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{worker}" {case}\n')
        python.chmod(python.stat().st_mode | stat.S_IXUSR)
        transport = LocalPython(python, what="the fake board", timeout_s=60)
        return BoardRunner(transport, model, [(1,)], runtime="board:fake", workdir=tmp_path)

    return make


@pytest.mark.parametrize("case, needle", [
    ("invalid-json", "result.json edgeport cannot use"),
    ("missing-keys", "version is not a short text"),
    ("object-array", "cannot read (0000_0.npy"),
    ("wrong-shape", "as float32[7], but declared float32[1]"),
    ("undeclared-output", "outputs the model does not have"),
    ("huge-number", "'ms' is not one time"),
    ("huge-integer", "'ms' is not one time"),
    ("deep-json", "result.json edgeport cannot use"),
    ("huge-result", "result.json edgeport cannot use (it is larger than 4 MB)"),
    ("padded-result", "result.json edgeport cannot use (it is larger than 4 MB)"),
    ("duplicate-key", "result.json edgeport cannot use (it holds the key 'ok' twice in one object"),
])
@pytest.mark.slow  # the fake board is a process
def test_a_board_reply_that_cannot_be_used_is_bad_input(board, case, needle):
    with pytest.raises(BoardRuntimeError, match=needle.replace("(", r"\(").replace("[", r"\[").replace(")", r"\)")):
        board(case).run(np.zeros((1, 1), np.float32))


def test_result_json_is_read_at_most_to_its_bound(tmp_path, monkeypatch):
    """A reply that says it is small and is not (it grew while read): read to the bound, then refused."""
    import os

    from edgeport import userfiles
    from edgeport.validate.board import reply

    (tmp_path / "result.json").write_text('{"ok": true}' + " " * (reply.MAX_RESULT_BYTES + 10))
    real = os.fstat
    monkeypatch.setattr(userfiles.os, "fstat", lambda fd: os.stat_result((*real(fd)[:6], 10, *real(fd)[7:])))
    with pytest.raises(BoardRuntimeError, match=r"result.json edgeport cannot use \(it is larger than 4 MB\)"):
        reply._read_result(tmp_path, 0, "", "the board", "version")


@pytest.mark.slow  # the fake board is a process
def test_a_runtime_name_with_control_characters_reaches_nobody_raw(board):
    said = board("control-characters").run(np.zeros((1, 1), np.float32)).reported
    assert "\x1b" not in said and "\n" not in said and "\x07" not in said
    assert "\\x1b]0;owned" in said


@pytest.mark.parametrize("url", ["ssh://-oProxyCommand=touch${IFS}pwned@host", "ssh://pi@-oProxyCommand=x", "ssh://pi@host:0",
                                 "ssh://pi@host:65536", "ssh://pi@host\n-oProxyCommand=x", "ssh://pi@ho st"])
def test_a_runner_url_never_reaches_ssh_as_an_option(url, workspace, run_inproc):
    with pytest.raises(BadInputError, match="is not ssh://"):
        parse_ssh_url(url)
    before = inventory(workspace)
    assert_one_line(run_inproc("boards", "probe", "tflite-1.13", "--runner", url), 2, "is not ssh://")
    assert inventory(workspace) == before and not Path("pwned").exists()


def test_the_probe_table_quotes_what_the_runtime_says_of_itself():
    """A runtime naming itself with a quote and a newline cannot add keys to the op table it is written into."""
    from edgeport.validate.board.probe import table_toml
    from edgeport.validate.board.profiles import tomllib

    hostile = 'TFLite"\n[ops]\nHARD_SWISH = [1]\n#'
    text = table_toml("b", {"runtime": hostile, "version": "1\n[x]", "package": "p", "uint8_ops": ["ADD"],
                            "uint8_not": {"MEAN": 'wraps"\n[uint8]\nops = ["MEAN"]\n'}}, {"ADD": [1]}, command="probe")
    parsed = tomllib.loads(text)
    assert parsed["provenance"]["runtime"] == hostile and parsed["ops"] == {"ADD": [1]}
    assert parsed["uint8"]["ops"] == ["ADD"]  # what it said of MEAN stays a comment


def test_a_probe_reply_naming_uint8_models_it_was_not_sent_is_refused():
    from edgeport.jsonfile import Malformed
    from edgeport.validate.board.reply import check_reply

    reply = {"ok": True, "runtime": "TFLite", "version": "1.13.1", "package": "tensorflow", "accepted": ["ADD.1"],
             "uint8": {"ADD": "ran"}}
    assert check_reply(reply, "probe", probes={"ADD.1"}, uint8_probes={"ADD"})["uint8"] == {"ADD": "ran"}
    for bad in ({"HARD_SWISH": "ran"}, {"ADD": 1}, ["ADD"]):
        with pytest.raises(Malformed, match="'uint8'"):
            check_reply({**reply, "uint8": bad}, "probe", probes={"ADD.1"}, uint8_probes={"ADD"})


def _custom_op_model(path: Path, name: str) -> Path:
    """A model whose one operator code is a custom op called ``name``."""
    import ai_edge_litert.schema_py_generated as schema

    data = bytearray(one_op_model("CUSTOM", 1))
    model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(bytes(data), 0))
    model.operatorCodes[0].customCode = name.encode()
    import flatbuffers

    builder = flatbuffers.Builder(256)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    path.write_bytes(bytes(builder.Output()))
    return path


def test_a_custom_op_name_cannot_forge_a_verdict_line(workspace, run_inproc):
    _custom_op_model(workspace / "m.tflite", "Evil\nrunnable on tflite-1.13\x1b[2J")
    r = run_inproc("boards", "check", "m.tflite", "--board", "tflite-1.13")
    assert r.code == 1, r.out + r.err
    assert "runnable on tflite-1.13" not in r.out.splitlines(), r.out  # no line of its own
    assert r.out.splitlines()[1] == "NOT runnable on tflite-1.13:" and "\x1b" not in r.out
    assert "Evil\\nrunnable on tflite-1.13\\x1b[2J" in r.out


@pytest.mark.slow  # a real conversion
def test_a_profiles_text_with_html_and_markup_lands_inert_in_every_report(workspace, run_inproc):
    """A board's name is a plain name (tests/reliability/test_profiles.py); the free text a profile
    may hold, an override's reason, reaches the reports through the gate's verdict."""
    from edgeport.validate.board.profiles import BOARDS_DIR

    hostile = "<img src=x onerror=alert(1)>[/]`x`"
    text = (BOARDS_DIR / "default.toml").read_text()
    text = text.replace('name = "default"', 'name = "hostile"')
    text += f"\n[overrides.CONV_2D]\nmax_version = 0\nreason = {json.dumps(hostile)}\n"
    (workspace / "hostile.toml").write_text(text)
    r = run_inproc("convert", "model.pt", "--arch", "pdet-n", "--imgsz", "64", "--no-int8", "--board", "hostile.toml", "--out", "out")
    assert r.code == 1, r.err  # the board cannot run CONV_2D, as its profile says, and why
    assert hostile in json.loads((workspace / "out" / "report.json").read_text())["board"]["checks"]["float32"]["reasons"][0]
    md = (workspace / "out" / "report.md").read_text()
    # Markdown shows a backslash-escaped character as itself: every "<" of the name is escaped
    assert re.search(r"(?<!\\)<img", md) is None and "\\<img src=x onerror=alert(1)\\>\\[/\\]\\`x\\`" in md
    assert "<img" not in (workspace / "out" / "report.html").read_text().replace('<img alt="', "")


@pytest.mark.slow
def test_a_board_that_answers_too_much_is_stopped_at_the_profiles_cap(tmp_path, sshd, cli):
    """The reply streams to disk and stops at max_reply_mb: a board sending gigabytes costs neither
    memory nor the disk."""
    flood = _script(tmp_path / "flooding-python", "head -c 8000000 /dev/zero > result.json")
    profile, board_dir = _profile(tmp_path, sshd, python=flood, max_reply_mb=1)
    proc = cli("boards", "probe", str(profile))
    _one_line_exit_2(proc, "sent back more than max_reply_mb = 1 MB", "raise max_reply_mb")
    deadline = time.monotonic() + 10
    while list(board_dir.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(board_dir.iterdir()) == []
