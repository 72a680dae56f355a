"""A board's own runtime, out of process: the final word on what the board runs and computes.

edgeport talks to it through the runner protocol (``worker.py``), over one of two transports:

- ``LocalPython``: a Python environment on this machine. ``edgeport boards install
  tflite-1.13`` builds one holding the real TensorFlow Lite 1.13.1 (Python 3.7) under
  ``$EDGEPORT_HOME/runtimes/`` (default ``~/.local/share/edgeport``);
- ``Ssh``: a real board, from the profile's ``[runner]`` or ``--runner ssh://user@host[:port]``.
  One ``ssh`` call per run: the folder goes over as a tar stream, the board's shell removes
  its run folder on every exit (timeouts included), and the outputs come back the same way.

What the board cannot be used for (unreachable, authentication, no runtime there, timed out)
is bad input: ``BoardRuntimeError``, exit 2, one line. What the runtime refuses to load or
run is a verdict on the model: ``runners.RuntimeRefused``, a failed row with its message.
Its reply is checked in ``reply.py``; ``install.py`` builds a shipped board's runtime.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path

from edgeport import venvs
from edgeport.text import for_terminal
from edgeport.validate.board.profiles import PLAIN_PATH, BoardProfile, RunnerSpec, is_plain_name, remote_python
from edgeport.validate.board.reply import MAX_TEXT, BoardRuntimeError, _last_line, _read_result

WORKER = Path(__file__).with_name("worker.py")
WORKER_NAME = "board_worker.py"  # what it is called on the board
RUNTIME_MARKER = ".edgeport-runtime.json"
SSH_GRACE_S = 30.0  # transfers and connection set-up, on top of the board-side timeout


def runtime_dir(board: BoardProfile) -> Path:
    """``$EDGEPORT_HOME/runtimes/NAME``: the board's name is a plain name (never a path), and the
    folder, links resolved, stays inside the runtimes folder; else bad input (exit 2). A profile
    is a file people share: a name that reached outside would run a ``bin/python`` beside it."""
    root = venvs.home() / "runtimes"
    if not is_plain_name(board.name):
        raise BoardRuntimeError(f"board name {board.name!r} is not a plain name (letters, digits, '.', '_', '-'): it names "
                                f"the folder of its runtime under {root}")
    folder = root / board.name
    try:
        inside = folder.resolve().is_relative_to(root.resolve()) and folder.resolve() != root.resolve()
    except (OSError, RuntimeError) as exc:  # a loop of links
        raise BoardRuntimeError(f"{folder} cannot be resolved ({exc}); move it away, or set EDGEPORT_HOME") from exc
    if not inside:
        raise BoardRuntimeError(f"{folder} leads outside {root} (a link?); edgeport runs runtimes only from inside it: "
                                f"move it away, or set EDGEPORT_HOME")
    return folder


def installed_python(board: BoardProfile) -> Path | None:
    folder = runtime_dir(board)
    python = folder / "bin" / "python"
    return python if (folder / RUNTIME_MARKER).is_file() and python.exists() else None


# -- transports ----------------------------------------------------------------------------


class LocalPython:
    """A Python environment on this machine."""

    def __init__(self, python: Path | str, *, what: str, timeout_s: float = 600.0):
        # absolute, not resolved: a venv's python is a link that must stay inside its venv
        self.python, self.what, self.timeout_s = os.path.abspath(python), what, timeout_s

    def identity(self, board: BoardProfile) -> str:
        """The runtime's name and version, as its installation recorded them (no process started)."""
        try:
            marker = json.loads((Path(self.python).parents[1] / RUNTIME_MARKER).read_text())
            return for_terminal(f"{marker['runtime']} {marker['version']}")[:MAX_TEXT]
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return f"{board.runtime} {board.version}"

    def execute(self, folder: Path, mode: str) -> dict:
        shutil.copy2(WORKER, folder / WORKER_NAME)
        try:
            proc = subprocess.run([self.python, WORKER_NAME, mode, "."], cwd=folder, capture_output=True, text=True,
                                  timeout=self.timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise BoardRuntimeError(f"{self.what} did not finish within {self.timeout_s:.0f} s") from exc
        except OSError as exc:
            raise BoardRuntimeError(f"{self.what} cannot be started ({exc}); reinstall it: edgeport boards install") from exc
        return _read_result(folder, proc.returncode, proc.stderr, self.what, mode)


class Ssh:
    """A real board over SSH: ``ssh`` and a POSIX shell with ``tar`` on the board."""

    def __init__(self, spec: RunnerSpec, *, board: str):
        self.spec, self.board = spec, board
        self.what = f"board {spec.url}"

    def identity(self, board: BoardProfile) -> str:
        """What the profile says the board runs; the run's reply says what it is, and a row notes a difference."""
        return f"{'TFLite' if board.runtime == 'tflite' else board.runtime} {board.version} over SSH"

    def _ssh(self, remote_command: str) -> list[str]:
        """The ssh command line. Only fixed options, each from a checked field of the profile
        (``profiles.runner_spec``): the port and timeout numbers, the key and known-hosts files
        ``PLAIN_PATH``s; user and host are checked names, and "--" ends ssh's options all the same.
        A profile never gives ssh an option of its own choosing (ProxyCommand runs a command)."""
        s = self.spec
        cmd = ["ssh", "-p", str(int(s.port)), "-o", "BatchMode=yes", "-o", f"ConnectTimeout={int(s.connect_timeout_s)}",
               "-o", "ServerAliveInterval=10"]
        if s.identity:
            cmd += ["-o", f"IdentityFile={_plain_local(s.identity, 'identity')}", "-o", "IdentitiesOnly=yes"]
        if s.known_hosts:
            cmd += ["-o", f"UserKnownHostsFile={_plain_local(s.known_hosts, 'known_hosts')}", "-o", "StrictHostKeyChecking=yes"]
        return [*cmd, "--", f"{s.user}@{s.host}" if s.user else s.host, remote_command]

    def execute(self, folder: Path, mode: str) -> dict:
        if shutil.which("ssh") is None:
            raise BoardRuntimeError(f"--runner {self.spec.url} needs the ssh client; install OpenSSH (apt install openssh-client)")
        shutil.copy2(WORKER, folder / WORKER_NAME)
        s = self.spec
        if not PLAIN_PATH.fullmatch(s.workdir):  # checked when the profile was read; a spec made in code too
            raise BoardRuntimeError(f"[runner] workdir {s.workdir!r} is not an absolute path of plain characters on the board")
        run_dir = f"{s.workdir.rstrip('/') or ''}/edgeport-run-{uuid.uuid4().hex[:12]}"
        remote_timeout = max(1, int(s.timeout_s))
        script = "\n".join([
            f"d={shlex.quote(run_dir)}",
            "umask 077",
            'mkdir "$d" || exit 90',
            "trap 'rm -rf \"$d\"' EXIT HUP INT TERM",
            'cd "$d" && tar -xf - || exit 91',
            f"if command -v timeout >/dev/null 2>&1; then T='timeout -s KILL {remote_timeout}'; else T=''; fi",
            f"$T {shlex.quote(remote_python(s.python))} {WORKER_NAME} {shlex.quote(mode)} . >stdout.txt 2>stderr.txt; "
            f"echo $? >status.txt",
            "tar -cf - $(ls -d result.json outputs stderr.txt status.txt 2>/dev/null)",
        ])
        payload = io.BytesIO()
        with tarfile.open(fileobj=payload, mode="w") as tar:
            for item in sorted(folder.iterdir()):
                tar.add(item, arcname=item.name)
        # the board's reply goes to files, never into memory, and no further than the profile allows:
        # past max_reply_mb the kernel stops ssh (RLIMIT_FSIZE), and the run is refused
        cap = int(s.max_reply_mb * 2**20)
        reply, errors = folder / ".reply.tar", folder / ".reply.err"
        try:
            with open(reply, "wb") as out, open(errors, "wb") as err:
                proc = subprocess.run(self._ssh("sh -c " + shlex.quote(script)), input=payload.getvalue(), stdout=out, stderr=err,
                                      timeout=s.timeout_s + SSH_GRACE_S, preexec_fn=lambda: _limit_file_size(cap))
        except subprocess.TimeoutExpired as exc:
            self._cleanup(run_dir)
            raise BoardRuntimeError(f"{self.what}: the run did not finish within {s.timeout_s:.0f} s; raise timeout_s "
                                    f"in the board profile's [runner], or check the board") from exc
        stderr = _head(errors)
        if proc.returncode == -signal.SIGXFSZ or reply.stat().st_size >= cap or errors.stat().st_size >= cap:
            self._cleanup(run_dir)
            raise BoardRuntimeError(f"{self.what} sent back more than max_reply_mb = {s.max_reply_mb:g} MB; the run was stopped: "
                                    f"raise max_reply_mb in the board profile's [runner] if its outputs are that large")
        if proc.returncode == 255:
            raise BoardRuntimeError(self._connection_error(stderr))
        if proc.returncode in (90, 91):
            raise BoardRuntimeError(f"{self.what}: cannot make a run folder in {s.workdir} on the board; set workdir in [runner] "
                                    f"to a writable folder")
        try:
            with tarfile.open(reply, mode="r") as tar:
                members = tar.getmembers()
                for member in members:  # only plain files and folders inside the run folder
                    if not (member.isfile() or member.isdir()) or Path(member.name).is_absolute() or ".." in Path(member.name).parts:
                        raise tarfile.TarError(f"unexpected member {member.name!r}")
                extra = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
                tar.extractall(folder, members=members, **extra)
        except tarfile.TarError as exc:
            raise BoardRuntimeError(f"{self.what} sent back no results ({exc}; ssh said: {_last_line(stderr)})") from exc
        finally:
            reply.unlink(missing_ok=True)
            errors.unlink(missing_ok=True)
        status = _head(folder / "status.txt").strip() if (folder / "status.txt").is_file() else ""
        board_stderr = _head(folder / "stderr.txt") if (folder / "stderr.txt").is_file() else ""
        if status in ("124", "137"):
            raise BoardRuntimeError(f"{self.what}: the run did not finish within {s.timeout_s:.0f} s and was stopped; raise "
                                    f"timeout_s in the board profile's [runner], or check the board")
        if status == "127":
            raise BoardRuntimeError(f"{self.what} has no {s.python!r} ({_last_line(board_stderr)}); set python in the board "
                                    f"profile's [runner] to a Python with TFLite")
        return _read_result(folder, int(status) if status.isdigit() else -1, board_stderr, self.what, mode)

    def _connection_error(self, stderr: str) -> str:
        line = _last_line(stderr)
        if "Permission denied" in stderr or "Too many authentication failures" in stderr:
            return (f"authentication to {self.spec.url} failed ({line}); give the key with identity in the board profile's "
                    f"[runner], or load it into ssh-agent")
        if "Host key verification failed" in stderr or "REMOTE HOST IDENTIFICATION HAS CHANGED" in stderr:
            return f"{self.spec.host}'s host key is not trusted ({line}); connect once with ssh to accept it"
        return f"{self.what} is unreachable ({line}); check the host, the port and that sshd runs there"

    def _cleanup(self, run_dir: str) -> None:
        """After a local timeout, the board's shell may still be running: remove its folder."""
        try:
            subprocess.run(self._ssh("rm -rf " + shlex.quote(run_dir)), capture_output=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            pass


def _plain_local(path: str, key: str) -> str:
    """A local file for ssh, as the profile reader checked it (``~/`` expanded): one plain word."""
    path = str(Path(path).expanduser())
    if not PLAIN_PATH.fullmatch(path):
        raise BoardRuntimeError(f"[runner] {key} {path!r} is not an absolute path of plain characters")
    return path


def _head(path: Path) -> str:
    """The first 64 KiB of a file the board wrote, as text: its messages, never all of them."""
    with open(path, "rb") as f:
        return f.read(64 * 1024).decode(errors="replace")


def _limit_file_size(cap: int) -> None:
    """In the ssh child, before it starts: no file it writes may grow past ``cap`` bytes."""
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (cap, cap))


def transport_for(board: BoardProfile):
    """How to reach ``board``'s real runtime: its SSH runner, else the installed local runtime,
    else None (only the emulator)."""
    if board.runner is not None:
        return Ssh(board.runner, board=board.name)
    python = installed_python(board) if board.install is not None else None
    if python is not None:
        return LocalPython(python, what=f"{board.name}'s installed runtime ({runtime_dir(board)})")
    return None


def install_hint(board: BoardProfile) -> str | None:
    return None if board.install is None else f"edgeport boards install {board.name}"


def this_python() -> LocalPython:
    """The runtime this Python has (the default board's)."""
    return LocalPython(sys.executable, what="this Python's TFLite runtime")
