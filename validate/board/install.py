"""``edgeport boards install NAME``: a shipped board's runtime in its own venv (``venvs.py``),
under ``$EDGEPORT_HOME/runtimes/NAME``, where ``transport_for`` finds it."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from edgeport import venvs
from edgeport.errors import BadInputError
from edgeport.validate.board.profiles import BoardProfile
from edgeport.validate.board.runtime import RUNTIME_MARKER, LocalPython, installed_python, runtime_dir


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


def install(board: BoardProfile, *, python: str | None = None) -> dict:
    """Build ``board``'s runtime in its own venv; returns what the runtime says of itself.
    Idempotent: an installed runtime that answers is kept."""
    if board.install is None:
        raise BadInputError(f"board {board.name!r} has no installable runtime (no [install] in its profile); "
                            f"boards with one: {', '.join(_installable())}")
    if not board.shipped:
        # installing a package runs its code: only edgeport's own profiles choose what [install] names
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
        print(f"{board.name}: {info['runtime']} {info['version']} already installed in {folder}")
        return info
    print(f"{board.name}: installing {' '.join(spec.packages)} for Python {got} in {folder}")
    made = not folder.exists()  # only a folder this install made is removed when it fails
    python = venvs.build_venv(folder, interpreter, spec.packages, what=f"{board.name}'s runtime", named=f"--python {interpreter}")
    try:
        info = _version_of(LocalPython(python, what=f"{board.name}'s runtime"))
    except BaseException:
        if made:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    venvs.write_marker(folder, RUNTIME_MARKER, {"board": board.name, "python": got, "packages": list(spec.packages),
                                                "runtime": info["runtime"], "version": info["version"]})
    print(f"{board.name}: {info['runtime']} {info['version']} installed in {folder}")
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
