"""A board's own runtime, out of process: the final word on what the board runs and computes.

edgeport talks to it through the runner protocol of ``board_worker.py`` (a folder with the
model and npy inputs in; npy outputs, the runtime's name and version out), over one of two
transports:

- ``LocalPython``: a Python environment on this machine. ``edgeport boards install
  tflite-1.13`` builds one holding the real TensorFlow Lite 1.13.1 (Python 3.7) under
  ``$EDGEPORT_HOME/runtimes/`` (default ``~/.local/share/edgeport``);
- ``Ssh``: a real board, from the profile's ``[runner]`` or ``--runner ssh://user@host[:port]``.
  One ``ssh`` call per run: the folder goes over as a tar stream, the board's shell removes
  its run folder on every exit (timeouts included), and the outputs come back the same way.

What the board cannot be used for (unreachable, authentication, no runtime there, timed out)
is bad input: ``BoardRuntimeError``, exit 2, one line. What the runtime refuses to load or
run is a verdict on the model: ``runners.RuntimeRefused``, a failed row with its message.
"""

from __future__ import annotations

import datetime as _dt
import io
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import uuid
from pathlib import Path

from edgeport import venvs
from edgeport.errors import BadInputError
from edgeport.jsonfile import Refused, read_json
from edgeport.text import for_terminal
from edgeport.validate.board.profiles import BoardProfile, RunnerSpec, is_plain_name, remote_python

WORKER = Path(__file__).with_name("worker.py")
WORKER_NAME = "board_worker.py"  # what it is called on the board
RUNTIME_MARKER = ".edgeport-runtime.json"
SSH_GRACE_S = 30.0  # transfers and connection set-up, on top of the board-side timeout


class BoardRuntimeError(BadInputError):
    """The board's runtime cannot be reached or used (exit 2): nothing was judged."""


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
    """The installed runtime's Python for ``board``, or None."""
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
        (``profiles.runner_spec``): the port a number, the key and known-hosts files absolute paths
        of plain characters (one word each, never read as an option: they start with "/"), the
        timeout a number; user and host are checked names, and "--" ends ssh's options all the same.
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
        if not _PLAIN_REMOTE.fullmatch(s.workdir):  # checked when the profile was read; a spec made in code too
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


_PLAIN_REMOTE = re.compile(r"/[A-Za-z0-9._+/@-]{0,1023}")


def _plain_local(path: str, key: str) -> str:
    """A local file for ssh, as the profile reader checked it (``~/`` expanded): one plain word."""
    path = str(Path(path).expanduser())
    if not _PLAIN_REMOTE.fullmatch(path):
        raise BoardRuntimeError(f"[runner] {key} {path!r} is not an absolute path of plain characters")
    return path


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("Warning: Permanently added")]
    return for_terminal(lines[-1][:300]) if lines else "no message"


def _head(path: Path, limit: int = 64 * 1024) -> str:
    """The first ``limit`` bytes of a file the board wrote, as text: its messages, never all of them."""
    with open(path, "rb") as f:
        return f.read(limit).decode(errors="replace")


def _limit_file_size(cap: int) -> None:
    """In the ssh child, before it starts: no file it writes may grow past ``cap`` bytes."""
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (cap, cap))


# what a board's reply may hold (board_worker.py)
MAX_TEXT = 200
OUTPUT_DTYPES = ("float32", "float16", "int8", "uint8", "int16", "int32", "int64", "bool")
MAX_DIM = 1 << 20
# a model's outputs, or, to locate where a board parts from the reference kernels, every tensor
# of one (``parity/divergence.py``); the reply's bytes are capped apart (max_reply_mb)
MAX_OUTPUTS = 4096
# result.json: names, shapes and times, about 150 bytes an output (4096 of them: 0.6 MB), a probe's
# few thousand accepted op versions; what a legitimate reply needs, with room
MAX_RESULT_BYTES = 4 * 2**20


class _BadReply(Exception):
    pass


def _text(value, what: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise _BadReply(f"{what} is not a short text")
    return for_terminal(value)


def _whole(value, lo: int, hi: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi


def _real(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_reply(result, mode: str, *, images: int | None = None, probes: set[str] | None = None,
                uint8_probes: set[str] | None = None) -> dict:
    """The worker's ``result.json``, checked field by field; raises ``_BadReply`` naming the first
    field that is missing, of the wrong type or out of range. Text is made inert for the terminal."""
    if not isinstance(result, dict) or not isinstance(result.get("ok"), bool):
        raise _BadReply("it is not an object with an 'ok' flag")
    if not result["ok"]:
        if result.get("error") not in ("no_runtime", "load", "run"):
            raise _BadReply("its 'error' is not one of no_runtime, load, run")
        return {"ok": False, "error": result["error"],
                **{k: for_terminal(str(result.get(k, "?"))[:MAX_TEXT]) for k in ("message", "runtime", "version", "package")}}
    checked = {"ok": True, **{k: _text(result.get(k), k) for k in ("runtime", "version", "package")}}
    if "python" in result:
        checked["python"] = _text(result["python"], "python")
    if mode == "run":
        outputs, ms = result.get("outputs"), result.get("ms")
        if not isinstance(outputs, list) or not 0 < len(outputs) <= MAX_OUTPUTS:
            raise _BadReply(f"'outputs' is not a list of 1 to {MAX_OUTPUTS} outputs")
        checked["outputs"] = []
        for k, d in enumerate(outputs):
            shape, dtype, quant = (d.get("shape"), d.get("dtype"), d.get("quantization")) if isinstance(d, dict) else (None,) * 3
            if not (isinstance(shape, list) and 0 < len(shape) <= 8 and all(_whole(v, 1, MAX_DIM) for v in shape)):
                raise _BadReply(f"outputs[{k}].shape is not a list of positive whole numbers")
            if dtype not in OUTPUT_DTYPES:
                raise _BadReply(f"outputs[{k}].dtype is not one of {', '.join(OUTPUT_DTYPES)}")
            if not (isinstance(quant, list) and len(quant) == 2 and _real(quant[0]) and quant[0] >= 0
                    and _whole(quant[1], -(2**31), 2**31 - 1)):
                raise _BadReply(f"outputs[{k}].quantization is not [scale, zero point]")
            checked["outputs"].append({"shape": shape, "dtype": dtype, "quantization": [float(quant[0]), quant[1]]})
        if not (isinstance(ms, list) and len(ms) == images and all(_real(v) and v >= 0 for v in ms)):
            raise _BadReply(f"'ms' is not one time (ms >= 0) per image ({images})")
        checked["ms"] = [float(v) for v in ms]
        repeat = result.get("repeat_max_abs")  # -1: a NaN or infinite difference; absent: an older worker
        if repeat is not None and not (_real(repeat) and (repeat >= 0 or repeat == -1.0)):
            raise _BadReply("'repeat_max_abs' is not a difference >= 0 (or -1)")
        checked["repeat_max_abs"] = None if repeat is None else (float("inf") if repeat == -1.0 else float(repeat))
    elif mode == "probe":
        accepted = result.get("accepted")
        if not isinstance(accepted, list) or not all(isinstance(a, str) and a in (probes or ()) for a in accepted):
            raise _BadReply("'accepted' is not a list of the probe models sent")
        checked["accepted"] = list(accepted)
        uint8 = result.get("uint8", {})  # absent: an older worker
        if not (isinstance(uint8, dict) and all(isinstance(k, str) and k in (uint8_probes or ()) and isinstance(v, str)
                                                for k, v in uint8.items())):
            raise _BadReply("'uint8' is not an object of the uint8 probe models sent, each with what happened")
        checked["uint8"] = {k: for_terminal(v[:MAX_TEXT]) for k, v in uint8.items()}
    return checked


def _read_result(folder: Path, returncode: int, stderr: str, what: str, mode: str) -> dict:
    path = folder / "result.json"
    if not path.is_file():
        raise BoardRuntimeError(f"{what} crashed (exit {returncode}): {_last_line(stderr)}")
    images = len(list((folder / "inputs").glob("*.npy"))) if mode == "run" else None
    probes = {p.name[: -len(".tflite")] for p in (folder / "probes").glob("*.tflite")} if mode == "probe" else None
    uint8 = {p.name[: -len(".tflite")] for p in (folder / "uint8").glob("*.tflite")} if mode == "probe" else None
    try:  # bounded, UTF-8, no key twice (jsonfile.py): a whole reply is capped only at max_reply_mb
        result = check_reply(read_json(path, MAX_RESULT_BYTES), mode, images=images, probes=probes, uint8_probes=uint8)
    except (OSError, ValueError, _BadReply) as exc:  # (Refused is a ValueError)
        why = f"it {exc}" if isinstance(exc, Refused) else str(exc)
        raise BoardRuntimeError(f"{what} answered with a result.json edgeport cannot use ({for_terminal(why[:200])}); "
                                f"check the runtime there, or reinstall it") from None
    if not result["ok"] and result["error"] == "no_runtime":
        raise BoardRuntimeError(f"{what} cannot run TFLite: {result['message']}; install tflite-runtime there, or point "
                                f"python at an environment that has it")
    return result


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
    if board.install is None:
        return None
    return f"edgeport boards install {board.name}"


# -- install -------------------------------------------------------------------------------


def find_python(version: str) -> str | None:
    """A working ``python{version}``: on PATH, else in pyenv's versions folder (a pyenv shim on
    PATH for a version that is not selected fails, and is passed over)."""
    candidates = [shutil.which(f"python{version}")]
    for root in filter(None, [os.environ.get("PYENV_ROOT"), str(Path.home() / ".pyenv")]):
        candidates += [str(p) for p in sorted(Path(root, "versions").glob(f"{version}*/bin/python{version}"), reverse=True)]
    for candidate in filter(None, candidates):
        got = _python_version(candidate)
        if got is not None and _is_version(got, version):
            return candidate
    return None


def _is_version(got: str, wanted: str) -> bool:
    return got == wanted or got.startswith(wanted + ".")


def install(board: BoardProfile, *, python: str | None = None, log=print) -> dict:
    """Build ``board``'s runtime in its own venv; returns what the runtime says of itself.
    Idempotent: an installed runtime that answers is kept."""
    if board.install is None:
        raise BadInputError(f"board {board.name!r} has no installable runtime (no [install] in its profile); "
                            f"boards with one: {', '.join(_installable())}")
    if not board.shipped:
        # the packages an [install] names are installed, and installing runs their code: only
        # edgeport's own profiles choose them
        raise BadInputError(f"board profile {board.name!r} is not one edgeport ships; `boards install` installs only the runtimes "
                            f"of shipped profiles ({', '.join(_installable())}): install a custom board's runtime yourself")
    spec = board.install
    interpreter = python or find_python(spec.python)
    if interpreter is None:
        raise BadInputError(f"{board.name} needs Python {spec.python}, and none is on PATH or in pyenv; install it "
                            f"(pyenv install {spec.python}) or pass --python /path/to/python{spec.python}")
    got = _python_version(interpreter)
    if got is None or not _is_version(got, spec.python):
        raise BadInputError(f"--python {interpreter} is Python {got or '?'}; {board.name}'s runtime needs Python {spec.python}")
    folder = runtime_dir(board)
    if installed_python(board) is not None:
        info = _version_of(LocalPython(folder / "bin" / "python", what=f"{board.name}'s runtime"))
        log(f"{board.name}: {info['runtime']} {info['version']} already installed in {folder}")
        return info
    log(f"{board.name}: installing {' '.join(spec.packages)} for Python {got} in {folder}")
    made = not folder.exists()  # only a folder this install made is removed when it fails
    python = venvs.build_venv(folder, interpreter, spec.packages, what=f"{board.name}'s runtime", named=f"--python {interpreter}")
    try:
        info = _version_of(LocalPython(python, what=f"{board.name}'s runtime"))
    except BaseException:
        if made:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    venvs.write_marker(folder, RUNTIME_MARKER, {"board": board.name, "python": got, "packages": list(spec.packages),
                                                "runtime": info["runtime"], "version": info["version"],
                                                "installed": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")})
    log(f"{board.name}: {info['runtime']} {info['version']} installed in {folder}")
    return info


def _installable() -> list[str]:
    from edgeport.validate.board.profiles import board_names, load_board

    return [n for n in board_names() if load_board(n).install is not None]


def _python_version(python: str) -> str | None:
    try:
        proc = subprocess.run([python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"], capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def _version_of(transport) -> dict:
    with tempfile.TemporaryDirectory(prefix="edgeport-runtime-") as tmp:
        return transport.execute(Path(tmp), "version")


def this_python() -> LocalPython:
    """The runtime this Python has (the default board's)."""
    return LocalPython(sys.executable, what="this Python's TFLite runtime")
