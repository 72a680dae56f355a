"""A board profile is data: a file people share never runs a command, here or on the board.

Each attack is run as an attacker would: a profile beside the user's files, passed to the command
that reads it. Every case asserts the exit code, the single error line, that nothing ran (the
file a command would have written does not exist, and a fake ``ssh`` on PATH was never started)
and that every file the user had is still there, byte for byte.
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from edgeport.errors import BadInputError
from edgeport.validate.board.profiles import RunnerSpec, load_board
from edgeport.validate.board.runtime import Ssh, installed_python, runtime_dir

from .conftest import assert_kept, assert_one_line, inventory

BASE = 'runtime = "tflite"\nversion = "1.13.1"\ndtypes = ["float32"]\nram_bytes = 1000000\nflash_bytes = 1000000\n'
OP_TABLE = 'op_table = "tflite-1.13.ops.toml"\n'  # a shipped table, by name


def _executable(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def fake_ssh(tmp_path, monkeypatch):
    """An ``ssh`` first on PATH that writes its arguments to a file and fails as an unreachable
    host does: what edgeport would have run, without a network."""
    bin_dir = tmp_path / "fake-bin"
    calls = tmp_path / "ssh-calls.json"
    _executable(bin_dir / "ssh", f'"{sys.executable}" -c "import json, sys; '
                                 f"open('{calls}', 'a').write(json.dumps(sys.argv[1:]) + chr(10))\" \"$@\"\n"
                                 'echo "ssh: connect to host board port 22: Connection refused" >&2\nexit 255')
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    return lambda: [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []


# -- ssh options ---------------------------------------------------------------------------------


def test_free_ssh_options_are_refused_and_ssh_never_starts(workspace, run_inproc, fake_ssh):
    (workspace / "evil.toml").write_text(BASE + OP_TABLE + '[runner]\nurl = "ssh://pi@board"\n'
                                         "options = [\"ProxyCommand=sh -c 'id > PWNED'\"]\n")
    before = inventory(workspace)
    r = run_inproc("boards", "probe", "evil.toml")
    assert_one_line(r, 2, "evil.toml", "[runner] has unknown keys ['options']", "ProxyCommand",
                    "valid: url, port, identity, known_hosts, connect_timeout_s")
    assert not (workspace / "PWNED").exists() and fake_ssh() == []
    assert_kept(before, inventory(workspace))


@pytest.mark.parametrize("key, value, needle", [
    ("identity", "/k -oProxyCommand=x", "identity"),
    ("identity", "relative/key", "identity"),
    ("known_hosts", "/dev/null /etc/x", "known_hosts"),
    ("known_hosts", "/h%d", "known_hosts"),
    ("port", "'22 -oProxyCommand=x'", "port"),
    ("port", "0", "port"),
    ("connect_timeout_s", "'5 -oProxyCommand=x'", "connect_timeout_s"),
    ("workdir", "'/tmp; id > PWNED'", "workdir"),
    ("workdir", "'-rf'", "workdir"),
])
def test_each_ssh_key_is_checked(workspace, run_inproc, fake_ssh, key, value, needle):
    value = value if value.startswith("'") or value.isdigit() else json.dumps(value)
    (workspace / "evil.toml").write_text(BASE + OP_TABLE + f'[runner]\nurl = "ssh://pi@board"\n{key} = {value}\n')
    before = inventory(workspace)
    assert_one_line(run_inproc("boards", "probe", "evil.toml"), 2, "evil.toml", needle)
    assert fake_ssh() == [] and not (workspace / "PWNED").exists()
    assert_kept(before, inventory(workspace))


def test_ssh_gets_only_fixed_options_each_one_word(workspace, run_inproc, fake_ssh):
    """The checked keys, as ssh receives them: nothing else, and the destination after ``--``."""
    key, hosts = workspace / "board_key", workspace / "known_hosts"
    (workspace / "ok.toml").write_text(BASE + OP_TABLE + "[runner]\n" + "\n".join([
        'url = "ssh://pi@board"', "port = 2222", f'identity = "{key}"', f'known_hosts = "{hosts}"', "connect_timeout_s = 7",
        'python = "/opt/venv/bin/python"']) + "\n")
    before = inventory(workspace)
    assert_one_line(run_inproc("boards", "probe", "ok.toml"), 2, "board ssh://pi@board is unreachable")
    (argv,) = fake_ssh()
    assert argv[:-1] == ["-p", "2222", "-o", "BatchMode=yes", "-o", "ConnectTimeout=7", "-o", "ServerAliveInterval=10",
                         "-o", f"IdentityFile={key}", "-o", "IdentitiesOnly=yes", "-o", f"UserKnownHostsFile={hosts}",
                         "-o", "StrictHostKeyChecking=yes", "--", "pi@board"]
    assert argv[-1].startswith("sh -c ") and "/opt/venv/bin/python board_worker.py probe ." in argv[-1]
    assert_kept(before, inventory(workspace))


def test_the_url_port_and_the_port_key_must_agree(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(BASE + '[runner]\nurl = "ssh://pi@board:2200"\nport = 2222\n')
    with pytest.raises(BadInputError, match="port 2222 and the port of url"):
        load_board(str(path))
    path.write_text(BASE + '[runner]\nurl = "ssh://pi@board"\nport = 2222\n')
    assert load_board(str(path)).runner.port == 2222


# -- the board's interpreter ---------------------------------------------------------------------


@pytest.mark.parametrize("python", ["true; id > F; python3", "python3 -c 'import os'", "$(id)", "/opt/py thon",
                                    "python3\nid", "-c", "/usr/bin/python`id`", "perl"])
def test_the_remote_python_is_a_fixed_name_or_a_plain_absolute_path(workspace, run_inproc, fake_ssh, python):
    (workspace / "evil.toml").write_text(BASE + OP_TABLE + f'[runner]\nurl = "ssh://pi@board"\npython = {json.dumps(python)}\n')
    before = inventory(workspace)
    assert_one_line(run_inproc("boards", "probe", "evil.toml"), 2, "evil.toml", "[runner] python", "absolute path")
    assert fake_ssh() == [] and not (workspace / "F").exists()
    assert_kept(before, inventory(workspace))


def test_a_runner_made_in_code_is_checked_again_before_ssh(tmp_path, fake_ssh):
    """The profile reader is not the only way to a RunnerSpec: the transport quotes and checks too."""
    (tmp_path / "run").mkdir()
    with pytest.raises(BadInputError, match=r"\[runner\] python"):
        Ssh(RunnerSpec(url="ssh://pi@board", python="true; id > F; python3"), board="b").execute(tmp_path / "run", "version")
    assert fake_ssh() == []


# -- the runtime's name, and its folder ----------------------------------------------------------


def _planted_runtime(folder: Path, ran: Path) -> Path:
    """What an attacker ships beside a profile: a ``bin/python`` that leaves a trace, and the marker
    that makes a folder look installed."""
    _executable(folder / "bin" / "python", f'echo ran > "{ran}"\nexit 1')
    (folder / ".edgeport-runtime.json").write_text('{"runtime": "TFLite", "version": "1.13.1"}')
    return folder


@pytest.mark.parametrize("name", ["ABS", "../../planted", "..", "a/b", "x\ny", ".hidden", ""])
@pytest.mark.parametrize("command", ["probe", "check", "install", "convert", "validate"])
def test_a_profile_name_is_never_a_path(workspace, run_inproc, name, command, monkeypatch):
    planted = _planted_runtime(workspace / "planted", workspace / "RAN")
    name = str(planted) if name == "ABS" else name
    monkeypatch.setenv("EDGEPORT_HOME", str(workspace / "home" / "edgeport"))
    (workspace / "evil.toml").write_text(f"name = {json.dumps(name)}\n" + BASE + OP_TABLE +
                                         '[install]\npython = "3.7"\npackages = ["tensorflow==1.13.1"]\n')
    (workspace / "m.tflite").write_bytes(b"not read")
    before = inventory(workspace)
    argv = {"probe": ("boards", "probe", "evil.toml"), "check": ("boards", "check", "m.tflite", "--board", "evil.toml"),
            "install": ("boards", "install", "evil.toml"),
            "convert": ("convert", "model.pt", "--arch", "pdet-n", "--imgsz", "64", "--board", "evil.toml"),
            "validate": ("validate", "model.pt", "--tflite", "m.tflite", "--board", "evil.toml")}[command]
    assert_one_line(run_inproc(*argv), 2, "evil.toml", "is not a plain name")
    assert not (workspace / "RAN").exists(), "a python shipped beside the profile ran"
    assert_kept(before, inventory(workspace))
    assert not (workspace / "runs").exists()


def test_a_runtime_folder_that_leads_outside_the_runtimes_folder_is_refused(workspace, run_inproc, monkeypatch):
    """A plain name whose folder is a link out of ``runtimes/`` (planted there, or left by
    someone) is refused too: the folder is resolved and checked, not only the name."""
    planted = _planted_runtime(workspace / "planted", workspace / "RAN")
    home = workspace / "home"
    (home / "runtimes").mkdir(parents=True)
    (home / "runtimes" / "vendor-board").symlink_to(planted, target_is_directory=True)
    monkeypatch.setenv("EDGEPORT_HOME", str(home))
    (workspace / "vendor.toml").write_text('name = "vendor-board"\n' + BASE + OP_TABLE +
                                           '[install]\npython = "3.7"\npackages = ["x"]\n')
    before = inventory(workspace)
    assert_one_line(run_inproc("boards", "probe", "vendor.toml"), 2, "leads outside", "runtimes")
    assert not (workspace / "RAN").exists()
    assert_kept(before, inventory(workspace))
    board = load_board(str(workspace / "vendor.toml"))
    with pytest.raises(BadInputError, match="leads outside"):
        installed_python(board)
    (home / "runtimes" / "vendor-board").unlink()
    assert runtime_dir(board) == home / "runtimes" / "vendor-board"  # a plain folder inside is its place


@pytest.mark.parametrize("board", ["../boards/default", "/etc/passwd", "default/../default"])
def test_a_board_given_by_name_is_one_of_the_shipped_ones(workspace, run_inproc, board):
    before = inventory(workspace)
    assert_one_line(run_inproc("boards", "check", "m.tflite", "--board", board), 2, "unknown board", "valid: default")
    assert_kept(before, inventory(workspace))


# -- the rest of a profile: known keys, checked values -------------------------------------------


@pytest.mark.parametrize("text, needle", [
    (BASE + 'run = "sh -c id"\n', "unknown keys ['run']"),
    (BASE + '[install]\npython = "3.7"\npackages = ["x"]\npip_args = ["--index-url", "http://evil"]\n', "[install] has unknown keys"),
    (BASE.replace('["float32"]', '["float32", "<script>"]'), "dtypes"),
    (BASE.replace('"1.13.1"', '"1.13.1; id"'), "version"),
    (BASE + 'ops = ["CONV_2D; id"]\n', "ops is not a list of builtin op names"),
    (BASE + '[overrides.CONV_2D]\nmax_version = "1; id"\nreason = "x"\n', "max_version"),
    (BASE + '[runner]\nurl = "ssh://pi@board"\ntimeout_s = -1\n', "timeout_s"),
    (BASE + '[runner]\nurl = "ssh://pi@board"\nmax_reply_mb = 1e12\n', "max_reply_mb"),
    ("runtime = [", "TOMLDecodeError"),
    (BASE + 'op_table = "/dev/zero"\n', "op_table '/dev/zero' is not a file name NAME.ops.toml"),
    (BASE + 'op_table = "../../etc/x.ops.toml"\n', "is not a file name"),
    (BASE + 'op_table = "nowhere.ops.toml"\n', "neither beside the profile nor one of the shipped tables"),
    (BASE + 'kernels = "xnnpack; id"\n', "kernels 'xnnpack; id' is not one of reference, optimized"),
    (BASE.replace('"tflite"', '"tflm"') + 'kernels = "optimized"\n', "optimized\" only for runtime = \"tflite\""),
])
def test_a_profile_holds_only_known_keys_with_checked_values(workspace, run_inproc, text, needle):
    (workspace / "p.toml").write_text(text)
    before = inventory(workspace)
    assert_one_line(run_inproc("boards", "check", "m.tflite", "--board", "p.toml"), 2, "p.toml", needle)
    assert_kept(before, inventory(workspace))


def test_the_shipped_profiles_pass_their_own_rules():
    from edgeport.validate.board.profiles import board_names

    assert {load_board(n).name for n in board_names()} == {"default", "tflite-1.13", "tflm-m4-256k"}
    # a current TFLite runs its optimised kernels; the old board's emulator, the reference ones with its differences
    assert {n: load_board(n).kernels for n in board_names()} == {"default": "optimized", "tflite-1.13": "reference",
                                                                "tflm-m4-256k": "reference"}
