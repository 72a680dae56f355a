"""Environments edgeport installs for itself, at setup time: a board's runtime (``edgeport boards
install``, ``validate/board/install.py``) and the second converter (``edgeport converters install
litert-torch``, ``convert/converters/litert.py``). Each is a venv under edgeport's home with a marker file
saying what was installed; nothing in them downloads at run time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Callable

from edgeport.errors import BadInputError
from edgeport.text import for_terminal


def home() -> Path:
    """Where edgeport's environments live: ``$EDGEPORT_HOME``, else the XDG data folder."""
    if os.environ.get("EDGEPORT_HOME"):
        return Path(os.environ["EDGEPORT_HOME"]).expanduser()
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share").expanduser() / "edgeport"


def read_marker(folder: Path, marker: str) -> dict | None:
    """What an install wrote of itself in ``folder``, or None where it is not installed."""
    try:
        data = json.loads((folder / marker).read_text())
    except (OSError, ValueError):
        return None
    return data if (folder / "bin" / "python").exists() and isinstance(data, dict) else None


def build_venv(folder: Path, interpreter: str, packages: tuple[str, ...], *, what: str, named: str | None = None,
               layer: Callable[[Path], list[str]] | None = None) -> Path:
    """A venv of ``interpreter`` in ``folder`` with ``packages`` installed; its Python.
    ``layer(python)``, run between the two steps, returns more arguments for pip (litert-torch
    layers its venv on edgeport's own and pins torch to it). A failing step is bad input naming
    the step; a folder this call made is removed when it fails, and one that holds something else
    is never touched. ``named``: how the error names ``interpreter`` (``--python PATH``)."""
    python = folder / "bin" / "python"
    if folder.exists() and any(folder.iterdir()) and not python.exists():
        raise BadInputError(f"{folder} exists and is not an edgeport environment; move it away, or set EDGEPORT_HOME")
    made = not folder.exists()
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        _step([interpreter, "-m", "venv", str(folder)], what, folder)
        if not python.exists():
            raise BadInputError(f"{named or interpreter} made no venv in {folder} (no bin/python after `-m venv`); pass a Python "
                                f"that has the venv module (apt install python3.X-venv, X its minor version)")
        extra = layer(python) if layer is not None else []
        _step([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *extra, *packages],
              what, folder)
    except BaseException:
        if made:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    return python


def _step(step: list[str], what: str, folder: Path) -> None:
    try:
        proc = subprocess.run(step, capture_output=True, text=True)
    except OSError as exc:
        raise BadInputError(f"installing {what} failed at `{' '.join(step[:4])} ...`: cannot start it "
                            f"({exc.strerror or exc}); nothing was installed in {folder}") from exc
    if proc.returncode != 0:
        lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
        said = ([line for line in lines if "error" in line.lower()] or lines or ["no output"])[-1]  # pip ends on a hint
        raise BadInputError(f"installing {what} failed at `{' '.join(step[:4])} ...`: {for_terminal(said[:300])}; "
                            f"nothing was marked installed in {folder}")


def write_marker(folder: Path, marker: str, data: dict) -> None:
    """What the install made (``data``), and when: the folder is complete only once this is written."""
    import datetime as dt

    installed = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    (folder / marker).write_text(json.dumps({**data, "installed": installed}, indent=2) + "\n")
