"""Output folders: claimed atomically, marked as edgeport's, replaced only when provably ours.

The safety contract (README, "What edgeport will never do") lives here:

- every output folder edgeport makes holds a marker file (``MARKER``) naming the command;
- ``--force`` replaces a folder only when it carries the marker of the same command and
  holds nothing but what that command writes; never one that holds an input, the working
  directory, or a parent of either;
- default run folders (``runs/<command>/N``) are claimed with an atomic ``mkdir``, so two
  runs started at once get different folders;
- work happens in a hidden staging folder next to the output, renamed into place at the end;
  if the output changed during the run, nothing in it is touched and the results are kept
  in a sibling folder, named in the error;
- a symlinked ``--out`` is followed to the folder it points at.

No torch, no numpy: the CLI imports this at start-up.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fnmatch
import json
import os
import shutil
import signal
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from edgeport.errors import BadInputError

MARKER = ".edgeport-run.json"
MARKER_SCHEMA = "edgeport.run/1"
STAGING_PREFIX = ".edgeport-staging-"

# What each command writes into its output folder (relative paths, glob patterns). A folder
# holding anything else is not replaced by --force.
OUTPUTS: dict[str, tuple[str, ...]] = {
    "convert": ("model.onnx", "model_float32.tflite", "model_int8.tflite", "report.json", "report.md", "report.html",
                "edgeport.log"),
    "validate": ("report.json", "report.md", "report.html", "edgeport.log"),
    "train": ("args.json", "best.pt", "last.pt", "metrics.csv", "metrics.png", "summary.json", ".*.pt.tmp-*"),
    "data": ("images", "labels", "annotations", "images/train", "images/val", "labels/train", "labels/val",
             "images/*/*.png", "labels/*/*.txt", "annotations/*.json"),
}


class Terminated(BaseException):
    """SIGTERM arrived: unwind like Ctrl-C so staging folders are removed."""


def _raise_terminated(signum, frame):  # noqa: ARG001 - signal handler signature
    raise Terminated()


def handle_sigterm() -> None:
    """Make SIGTERM clean up exactly as SIGINT does (only from the main thread)."""
    with contextlib.suppress(ValueError):
        signal.signal(signal.SIGTERM, _raise_terminated)


def exit_now(code: int) -> NoReturn:
    """Everything is cleaned up: flush the logs, stdout and stderr, then exit with ``code`` at once,
    without the interpreter's teardown (atexit handlers, finalizers, a last garbage collection).
    Interpreter shutdown after an interrupt can end in a death by SIGINT (exit -2 instead of 130;
    seen on Python 3.12 under load); torch's teardown costs 0.6 s a run."""
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader that went away (`| head`), a closed stream
            stream.flush()
    os._exit(code)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def write_marker(folder: Path, command: str) -> None:
    (folder / MARKER).write_text(json.dumps({"schema": MARKER_SCHEMA, "command": command, "created": _now()}) + "\n")


def marker_command(folder: Path) -> str | None:
    """The command whose marker ``folder`` carries, or None."""
    try:
        data = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema") != MARKER_SCHEMA:
        return None
    return data.get("command") if isinstance(data.get("command"), str) else None


def foreign_entries(folder: Path, command: str) -> list[str]:
    """Entries of ``folder`` (recursively) that ``command`` does not write; the marker is ours."""
    patterns = OUTPUTS[command]
    out = []
    for root, dirs, files in os.walk(folder, followlinks=False):
        rel_root = Path(root).relative_to(folder)
        for name in sorted(dirs) + sorted(files):
            rel = (rel_root / name).as_posix()
            if rel == MARKER:
                continue
            path = Path(root) / name
            if path.is_symlink() or not any(fnmatch.fnmatchcase(rel, p) for p in patterns):
                out.append(rel)
        dirs[:] = [d for d in dirs if not (Path(root) / d).is_symlink()]
    return out


def owned(folder: Path, command: str) -> bool:
    """``folder`` carries ``command``'s marker and holds nothing else."""
    return marker_command(folder) == command and not foreign_entries(folder, command)


def _is_within(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
        return True
    except ValueError:
        return False


def check_out(out: Path, *, command: str, force: bool, inputs: tuple[Path | None, ...] = ()) -> Path:
    """Check that writing ``command``'s results to ``out`` can lose nothing; return the real folder
    (symlinks followed)."""
    flag = "--out"
    target = Path(out).resolve()
    if target.exists() and not target.is_dir():
        raise BadInputError(f"{flag} {str(out)!r} is a file; pass a folder")
    cwd = Path.cwd().resolve()
    if _is_within(cwd, target):
        what = "the working directory" if target == cwd else "a parent of the working directory"
        raise BadInputError(f"{flag} {str(out)!r} is {what}; pass a new folder such as runs/{command}/mine")
    for inp in inputs:
        if inp is not None and _is_within(Path(inp).resolve(), target):
            raise BadInputError(f"{flag} {str(out)!r} holds the input {str(inp)!r}; pass an output folder that holds none of the inputs")
    if not target.is_dir() or not any(target.iterdir()):
        return target
    if not force:
        raise BadInputError(f"{flag} {str(out)!r} is not empty; pass --force to replace an earlier edgeport {command} "
                            f"result there, or choose another folder")
    if marker_command(target) != command:
        raise BadInputError(f"{flag} {str(out)!r} was not made by edgeport {command} (no {MARKER} of it); --force only "
                            f"replaces edgeport's own results: choose another folder")
    foreign = foreign_entries(target, command)
    if foreign:
        raise BadInputError(f"{flag} {str(out)!r} holds files edgeport {command} did not write ({', '.join(foreign[:3])}); "
                            f"--force never deletes them: move them or choose another folder")
    return target


def claim_run_dir(root: Path, command: str) -> Path:
    """Create and mark ``root/N`` for the next free N. ``mkdir`` is atomic: concurrent runs never share."""
    root.mkdir(parents=True, exist_ok=True)
    n = max((int(p.name) for p in root.iterdir() if p.name.isdigit()), default=0) + 1
    while True:
        folder = root / str(n)
        try:
            folder.mkdir()
        except FileExistsError:
            n += 1
            continue
        write_marker(folder, command)
        return folder


def clear_owned(folder: Path, command: str) -> None:
    """Delete what ``command`` wrote in ``folder`` (checked to be ours), keeping the folder and marker."""
    if not owned(folder, command):
        raise BadInputError(f"{folder} is not an edgeport {command} result only; nothing was deleted")
    for entry in folder.iterdir():
        if entry.name == MARKER:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def release_claim(folder: Path) -> None:
    """Remove a claimed run folder that a failed run left empty (nothing in it but the marker)."""
    with contextlib.suppress(OSError):
        if {p.name for p in folder.iterdir()} <= {MARKER}:
            (folder / MARKER).unlink(missing_ok=True)
            folder.rmdir()


def _make_parents(path: Path) -> list[Path]:
    """mkdir -p of ``path``'s parents, returning those it created (to remove them on failure)."""
    created = []
    for parent in reversed(path.parents):
        if not parent.exists():
            try:
                parent.mkdir()
            except FileExistsError:  # a run started at the same moment made it: not ours to remove
                continue
            created.append(parent)
    return created


class OutputConflict(BadInputError):
    """The output folder changed during the run; the results were kept elsewhere."""


@dataclass(frozen=True)
class Staging:
    out: Path  # where the results land at the end (the real folder, symlinks followed)
    work: Path  # scratch space, removed at the end
    result: Path  # what will become ``out``


def _sibling(out: Path) -> Path:
    n = 1
    while True:
        cand = out.with_name(f"{out.name}.edgeport-{n}")
        try:
            cand.mkdir()
            return cand
        except FileExistsError:
            n += 1


def _place(result: Path, out: Path, tmp: Path, command: str, force: bool) -> None:
    """Rename ``result`` to ``out``; replace ``out`` only when it is provably ours."""
    try:
        os.rename(result, out)  # out absent, or an empty folder
        return
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
            raise
    if out.is_dir() and owned(out, command):
        only_marker = {p.name for p in out.iterdir()} <= {MARKER}
        if force or only_marker:
            old = tmp / "replaced"
            os.rename(out, old)
            os.rename(result, out)
            shutil.rmtree(old)  # held only the marker and files this command writes
            return
    keep = _sibling(out)
    keep.rmdir()
    os.rename(result, keep)
    foreign = foreign_entries(out, command) if out.is_dir() else [out.name]
    raise OutputConflict(
        f"--out {str(out)!r} changed during the run ({', '.join(foreign[:3]) or 'its contents'}); nothing in it was "
        f"touched, and the results are in {str(keep)!r}"
    )


@contextlib.contextmanager
def staged_output(out: Path | None, *, command: str, force: bool, default_root: Path,
                  inputs: tuple[Path | None, ...] = ()):
    """Write into a hidden folder next to the output; move it into place only on success.

    On any failure (an error, Ctrl-C, SIGTERM) everything this run created is removed again:
    the staging folder, a claimed run folder, and parent folders it made.
    """
    if out is None:
        created = _make_parents(default_root / "x")
        target = claim_run_dir(default_root, command)
        claimed = True
    else:
        target = check_out(out, command=command, force=force, inputs=inputs)
        created = _make_parents(target)
        claimed = False
    tmp = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=target.parent)).resolve()
    stage = Staging(out=target, work=tmp / "work", result=tmp / "result")
    try:
        stage.work.mkdir()
        stage.result.mkdir()
        write_marker(stage.result, command)
        yield stage
        _place(stage.result, target, tmp, command, force)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if claimed:
            release_claim(target)
        for folder in reversed(created):
            with contextlib.suppress(OSError):
                folder.rmdir()  # only if still empty
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class Progress:
    """One line per stage, with its time, on stderr."""

    def __init__(self, console):
        self.console = console
        self.status = None

    def start(self, name: str) -> None:
        if self.console is not None and self.console.is_terminal:  # a spinner's thread redraws nothing into a file
            self.status = self.console.status(f"{name} ...")
            self.status.start()

    def close(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None

    def done(self, record) -> None:
        if self.console is None:
            return
        self.close()
        self.console.print(f"[green]ok[/] {record.name:<16} {record.seconds:7.2f} s  {record.summary}", highlight=False)
