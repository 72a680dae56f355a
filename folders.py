"""Output folders: claimed atomically, marked as edgeport's, replaced only when provably ours.

The safety contract (README, "What edgeport will never do") lives here:

- every output folder edgeport makes holds a marker file (``MARKER``) naming the command and
  listing every file it wrote with its SHA-256 (the manifest);
- ``--force`` replaces a folder only when it carries the marker of the same command and holds
  nothing but the files its manifest lists, unchanged; never one that holds an input, the
  working directory, or a parent of either;
- a run that writes over its life (training) holds a lock on its folder (``LOCK``, an flock
  that dies with its process): no other run replaces or resumes it meanwhile;
- default run folders (``runs/<command>/N``) are claimed with an atomic ``mkdir``, so two
  runs started at once get different folders;
- work happens in a hidden staging folder next to the output, renamed into place at the end;
  if the output changed during the run, nothing in it is touched and the results are kept
  in a sibling folder, named in the error; a staging folder a killed run left (it carries
  ``STAGING_MARKER``, whose lock died with its owner) is removed by the next run beside it;
- a symlinked ``--out`` is followed to the folder it points at.

No torch, no numpy: the CLI imports this at start-up.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import json
import os
import re
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from edgeport.errors import BadInputError

MARKER = ".edgeport-run.json"
MARKER_SCHEMA = "edgeport.run/2"  # /1 markers carried no manifest: their folders are never replaced
STAGING_PREFIX = ".edgeport-staging-"
LOCK = ".edgeport-lock"  # held (flock) by the process that owns the folder, for its whole life
STAGING_MARKER = ".edgeport-staging"  # inside a staging folder: its owner holds a lock on it
NAME_MAX = 255  # bytes in one path component on the file systems edgeport writes to

# What each command writes into its output folder (relative paths, glob patterns): the folder
# a command claims is recognised by these; what it may replace is only what its manifest lists.
OUTPUTS: dict[str, tuple[str, ...]] = {
    "convert": ("model.onnx", "model_float32.tflite", "model_int8.tflite", "model_uint8.tflite", "model_int8_repaired.tflite",
                "model_uint8_repaired.tflite", "report.json", "report.md", "report.html", "edgeport.log"),
    "validate": ("report.json", "report.md", "report.html", "edgeport.log"),
    "train": ("args.json", "best.pt", "last.pt", "metrics.csv", "metrics.png", "summary.json"),
    "data": ("images", "labels", "annotations", "images/train", "images/val", "labels/train", "labels/val",
             "images/*/*.png", "labels/*/*.txt", "annotations/*.json"),
}
# the temporaries ``writing`` renames away (its name for them); left behind only by a killed run, and nobody else's
TRANSIENT = re.compile(r"\..+\.tmp-[0-9]+-[0-9a-f]{8}")
_OWN_FILES = (MARKER, LOCK)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# -- the marker and its manifest --------------------------------------------------------------------


@dataclass(frozen=True)
class Marker:
    command: str
    files: dict[str, str]  # relative path -> SHA-256 of what the command wrote there
    dirs: frozenset[str]  # folders it made (relative paths)


def _sha256(path: Path) -> str:
    import hashlib

    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


class NotOurs(BadInputError):
    """A lock or marker path that is a link, or not a plain file of its own: never followed, never written."""


# edgeport's own small files (locks, markers) are opened without following a link, made with
# O_EXCL so that nothing already there is written through: a lock or marker symlinked (or
# hard-linked) to a user's file would otherwise be truncated and overwritten with JSON
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
MAX_OWN_FILE = 64 << 20  # a marker's manifest: a path and a hash per file the run wrote


def _not_ours(path: Path, what: str = "") -> NotOurs:
    return NotOurs(f"{str(path)!r} is a link{what} (or not a plain file edgeport made); edgeport never follows or writes "
                   f"through its lock and marker files: remove it, or choose another folder")


def _open_own(path: Path, flags: int) -> int:
    """Open an existing lock or marker: never through a link, and only a plain file with one name."""
    try:
        fd = os.open(path, flags | _NOFOLLOW | os.O_NONBLOCK)  # a FIFO in its place opens at once, and is refused below
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise _not_ours(path) from exc
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        raise _not_ours(path, " to another file" if st.st_nlink != 1 else "")
    return fd


def _create_own(path: Path, mode: int = 0o644) -> int:
    """Create a new file: O_EXCL | O_NOFOLLOW, so a link or a file already there is never written."""
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _NOFOLLOW, mode)


def _read_own(path: Path) -> str:
    """A lock's or marker's text, read without following a link (``NotOurs`` for one)."""
    fd = _open_own(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_OWN_FILE + 1)
    if len(data) > MAX_OWN_FILE:
        raise ValueError(f"{path} is larger than {MAX_OWN_FILE >> 20} MB")
    return data.decode()


def write_marker(folder: Path, command: str, files: dict[str, str] | None = None, dirs=()) -> None:
    """Mark ``folder`` as ``command``'s, with the manifest of what it wrote there (empty at first)."""
    data = {"schema": MARKER_SCHEMA, "command": command, "created": _now(), "files": dict(sorted((files or {}).items())),
            "dirs": sorted(dirs)}
    with writing(folder / MARKER) as f:
        f.write((json.dumps(data) + "\n").encode())


def read_marker(folder: Path) -> Marker | None:
    """The marker ``folder`` carries, or None (none, unreadable, or an older one without a manifest)."""
    try:
        data = json.loads(_read_own(folder / MARKER))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("schema") != MARKER_SCHEMA or not isinstance(data.get("command"), str):
        return None
    files, dirs = data.get("files"), data.get("dirs")
    if not (isinstance(files, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in files.items())
            and isinstance(dirs, list) and all(isinstance(d, str) for d in dirs)):
        return None
    return Marker(data["command"], files, frozenset(dirs))


def manifest(folder: Path) -> tuple[dict[str, str], list[str]]:
    """(files with their SHA-256, folders) under ``folder``, edgeport's own marker and lock aside:
    what a run wrote, taken when it is complete."""
    files, dirs = {}, []
    for root, subdirs, names in os.walk(folder):
        rel_root = Path(root).relative_to(folder)
        dirs += [(rel_root / d).as_posix() for d in subdirs]
        for name in names:
            rel = (rel_root / name).as_posix()
            if rel not in _OWN_FILES:
                files[rel] = _sha256(Path(root) / name)
    return files, dirs


def record_outputs(folder: Path, *names: str) -> None:
    """Add the files ``names`` (relative to ``folder``), as they are now, to its manifest: a run that
    writes over its life (training) records each once written. A folder without edgeport's marker
    (the trainer as a library, into the caller's folder) has no manifest to keep."""
    marker = read_marker(folder)
    if marker is None:
        return
    files = dict(marker.files)
    dirs = set(marker.dirs)
    for name in names:
        path = folder / name
        if path.is_file():
            files[name] = _sha256(path)
            dirs |= {p.as_posix() for p in Path(name).parents if p != Path(".")}
        else:
            files.pop(name, None)
    write_marker(folder, marker.command, files, dirs)


def foreign_entries(folder: Path, command: str) -> list[str]:
    """Entries of ``folder`` (recursively) that ``command`` did not write as they are now: not in its
    manifest, changed since, or a link. An older marker without a manifest owns nothing."""
    marker = read_marker(folder)
    files = marker.files if marker and marker.command == command else {}
    dirs = marker.dirs if marker and marker.command == command else frozenset()
    out = []
    for root, subdirs, names in os.walk(folder, followlinks=False):
        rel_root = Path(root).relative_to(folder)
        for name in sorted(subdirs) + sorted(names):
            rel = (rel_root / name).as_posix()
            path = Path(root) / name
            if rel in _OWN_FILES and not path.is_symlink():
                continue
            if path.is_symlink():
                out.append(rel)
            elif path.is_dir():
                if rel not in dirs:
                    out.append(rel)
            elif rel in files:
                if _sha256(path) != files[rel]:
                    out.append(f"{rel} (changed since edgeport wrote it)")
            elif not (rel_root == Path(".") and TRANSIENT.fullmatch(name)):
                out.append(rel)
        subdirs[:] = [d for d in subdirs if not (Path(root) / d).is_symlink()]
    return out


def owned(folder: Path, command: str) -> bool:
    """``folder`` carries ``command``'s marker and holds nothing but what its manifest lists."""
    marker = read_marker(folder)
    return marker is not None and marker.command == command and not foreign_entries(folder, command)


# -- locks: a live run's folder is never replaced or resumed by another -----------------------------


class FolderInUse(BadInputError):
    """Another edgeport process holds the folder's lock."""


@dataclass
class FolderLock:
    path: Path
    fd: int | None

    def release(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)  # closing the descriptor releases the flock
            self.fd = None

    def __enter__(self) -> "FolderLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _try_lock(path: Path) -> int | None:
    """An exclusive lock on ``path`` (created if need be), or None when a live process holds it.
    A lock dies with its process: a lock file left by a killed run is simply taken. The file is
    edgeport's own (``_create_own``, ``_open_own``), so its JSON never lands in a user's file."""
    import fcntl

    try:
        fd = _create_own(path)
    except FileExistsError:
        fd = _open_own(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            return None
        raise
    return fd


def _in_use(folder: Path, command: str, what: str) -> FolderInUse:
    try:
        holder = json.loads(_read_own(folder / LOCK) or "{}")
    except (OSError, ValueError, NotOurs):
        holder = {}
    holder = holder if isinstance(holder, dict) else {}
    pid, theirs = holder.get("pid"), holder.get("command")
    # the holder's command as the lock file says, only where it names one of edgeport's: text read
    # from a file never reaches the terminal as it is
    return FolderInUse(f"{what} {str(folder)!r} is in use by a running edgeport {theirs if theirs in OUTPUTS else command}"
                       + (f" (process {pid})" if isinstance(pid, int) else "")
                       + "; wait for it to finish or stop it, or choose another folder")


def refuse_if_in_use(folder: Path, command: str, what: str = "--out") -> None:
    """``FolderInUse`` where a live process holds ``folder``'s lock; nothing is created or taken.
    Asked before anything is judged of the folder's files: a live run changes them as it goes, and
    that it runs is the reason to give (the files a run is writing are not the user's)."""
    import fcntl

    if not (folder / LOCK).is_file():
        return
    try:
        fd = _open_own(folder / LOCK, os.O_RDONLY)
    except (OSError, NotOurs):
        return  # not a lock of edgeport's: the checks after this one say what the folder holds
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            raise _in_use(folder, command, what) from None
        raise
    finally:
        os.close(fd)  # (a lock this probe took is released with it)


def lock_folder(folder: Path, command: str, what: str = "--out") -> FolderLock:
    """Lock ``folder`` (one of edgeport's) for this process's life, or refuse: a run still using it."""
    fd = _try_lock(folder / LOCK)
    if fd is None:
        raise _in_use(folder, command, what)
    os.ftruncate(fd, 0)
    os.write(fd, json.dumps({"pid": os.getpid(), "command": command, "since": _now()}).encode())
    return FolderLock(folder / LOCK, fd)


def _check_path(out: Path, flag: str) -> None:
    """A path edgeport can make: no component over the file system's name limit, no file on the way."""
    for part in Path(out).parts:
        if len(os.fsencode(part)) > NAME_MAX:
            raise BadInputError(f"{flag} {str(out)[:80]!r}...: the name {part[:40]!r}... is {len(os.fsencode(part))} bytes; "
                                f"file systems allow {NAME_MAX}: choose a shorter name")
    absolute = Path(os.path.abspath(out))
    for parent in reversed(absolute.parents):
        if parent.exists() and not parent.is_dir():
            raise BadInputError(f"{flag} {str(out)!r}: {str(parent)!r} is a file, not a folder; choose another path")


def check_out(out: Path, *, command: str, force: bool, inputs: tuple[Path | None, ...] = ()) -> Path:
    """Check that writing ``command``'s results to ``out`` can lose nothing; return the real folder (symlinks followed)."""
    flag = "--out"
    _check_path(out, flag)
    target = Path(out).resolve()
    if target.exists() and not target.is_dir():
        raise BadInputError(f"{flag} {str(out)!r} is a file; pass a folder")
    cwd = Path.cwd().resolve()
    if cwd.is_relative_to(target):
        what = "the working directory" if target == cwd else "a parent of the working directory"
        raise BadInputError(f"{flag} {str(out)!r} is {what}; pass a new folder such as runs/{command}/mine")
    for inp in inputs:
        if inp is not None and Path(inp).resolve().is_relative_to(target):
            raise BadInputError(f"{flag} {str(out)!r} holds the input {str(inp)!r}; pass an output folder that holds none of the inputs")
    if not target.is_dir() or not any(target.iterdir()):
        return target
    refuse_if_in_use(target, command, flag)
    if not force:
        raise BadInputError(f"{flag} {str(out)!r} is not empty; pass --force to replace an earlier edgeport {command} "
                            f"result there, or choose another folder")
    marker = read_marker(target)
    if marker is None or marker.command != command:
        older = (target / MARKER).is_file() and marker is None
        why = f"its {MARKER} is from an older edgeport, without the list of files it wrote" if older else f"no {MARKER} of it"
        raise BadInputError(f"{flag} {str(out)!r} was not made by edgeport {command} ({why}); --force only replaces "
                            f"edgeport's own results: choose another folder")
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
        try:
            write_marker(folder, command)
        except BaseException:  # a full disk: leave nothing, not even the marker
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return folder


def clear_owned(folder: Path, command: str) -> None:
    """Delete what ``command`` wrote in ``folder`` (checked to be ours), keeping the folder, marker and lock."""
    if not owned(folder, command):
        raise BadInputError(f"{folder} is not an edgeport {command} result only; nothing was deleted")
    for entry in folder.iterdir():
        if entry.name in _OWN_FILES:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    write_marker(folder, command)


def remove_transient(folder: Path) -> list[str]:
    """Remove what a killed run left half-written in ``folder`` (``writing``'s temporaries);
    the caller holds the folder's lock, so no live run is writing them."""
    gone = []
    for path in folder.glob(".*.tmp-*"):
        if TRANSIENT.fullmatch(path.name) and path.is_file() and not path.is_symlink():
            path.unlink()
            gone.append(path.name)
    return gone


@contextlib.contextmanager
def writing(path: Path):
    """Write ``path`` whole or not at all: yields a new temporary file beside it (O_EXCL |
    O_NOFOLLOW, a name no one else has), renamed over ``path`` when the block ends, so ``path`` is
    replaced, never written through, whatever it was. On any failure the temporary is removed, and
    an OS error names ``path`` (a write on a full disk says ENOSPC but not which file). Every file
    a run writes whole goes through here: outputs, markers, checkpoints."""
    import secrets

    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")  # (TRANSIENT matches it)
    try:  # (the umask applies, as open()'s does); a file already at that name is not ours to remove
        fd = _create_own(tmp, 0o666)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OSError) and not exc.filename:
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise


def write_output(folder: Path, name: str, data: bytes | str) -> None:
    """Write ``folder/name`` whole or not at all (``writing``), then record it in the folder's manifest."""
    with writing(folder / name) as f:
        f.write(data.encode() if isinstance(data, str) else data)
    record_outputs(folder, name)


def discard_run(folder: Path, command: str) -> bool:
    """Remove a run folder this process claimed and whose run failed before it wrote anything worth
    keeping: the files its manifest lists (unchanged), what it left half-written, its marker and
    lock, and the folder. Nothing else: a folder holding anything more is left as it is."""
    remove_transient(folder)
    if not owned(folder, command):
        return False
    for name in sorted(read_marker(folder).files, key=lambda n: -n.count("/")):
        (folder / name).unlink(missing_ok=True)
    for rel in sorted(read_marker(folder).dirs, key=lambda n: -n.count("/")):
        with contextlib.suppress(OSError):
            (folder / rel).rmdir()
    release_claim(folder)
    return not folder.exists()


def release_claim(folder: Path) -> None:
    """Remove a claimed run folder that a failed run left empty (nothing in it but the marker and lock)."""
    with contextlib.suppress(OSError):
        if {p.name for p in folder.iterdir()} <= set(_OWN_FILES):
            for name in _OWN_FILES:
                (folder / name).unlink(missing_ok=True)
            folder.rmdir()


def make_parents(path: Path) -> list[Path]:
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


def remove_empty(created: list[Path]) -> None:
    """Remove the parent folders ``make_parents`` made, deepest first, each only while still empty."""
    for folder in reversed(created):
        with contextlib.suppress(OSError):
            folder.rmdir()


@contextlib.contextmanager
def creating(path: Path, flag: str = "--out"):
    """Making an output folder (its parents, the folder, its marker and lock, a staging folder
    beside it): an OS error there is the place the user named -- a folder that takes no new
    entries (``/proc``), one without write permission, a read-only or full disk -- so it is bad
    input naming ``flag``, whatever its errno."""
    try:
        yield
    except OSError as exc:
        # a parent it could not make is named; edgeport's own files inside (a staging folder, a marker) are not
        failed = Path(os.path.abspath(os.fsdecode(exc.filename))) if exc.filename else None
        what = f" ({str(failed)!r})" if failed is not None and failed in Path(os.path.abspath(path)).parents else ""
        why = exc.strerror or str(exc)
        if exc.errno == errno.ENOENT:  # its folder exists (make_parents made it): the file system there takes nothing new
            why += " (the file system there makes no new entries)"
        hint = ("free some disk space or choose another folder" if exc.errno in (errno.ENOSPC, errno.EDQUOT)
                else "choose a folder you can write")
        raise BadInputError(f"{flag} {str(path)!r} cannot be created or written{what}: {why}; {hint}") from exc


class OutputConflict(BadInputError):
    """The output folder changed during the run; the results were kept elsewhere."""


@dataclass(frozen=True)
class Staging:
    out: Path  # where the results land at the end (the real folder, symlinks followed)
    work: Path  # scratch space, removed at the end
    result: Path  # what will become ``out``
    reclaimed: tuple[str, ...] = ()  # staging folders of killed runs, removed before this run began


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
    files, dirs = manifest(result)
    write_marker(result, command, files, dirs)
    try:
        os.rename(result, out)  # out absent, or an empty folder
        return
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
            raise
    if out.is_dir() and owned(out, command):
        only_marker = {p.name for p in out.iterdir()} <= set(_OWN_FILES)
        if force or only_marker:
            lock = lock_folder(out, command)  # not while another run holds it
            old = tmp / "replaced"
            os.rename(out, old)
            os.rename(result, out)
            lock.release()
            shutil.rmtree(old)  # held only the marker and files this command wrote
            return
    keep = _sibling(out)
    keep.rmdir()
    os.rename(result, keep)
    foreign = foreign_entries(out, command) if out.is_dir() else [out.name]
    raise OutputConflict(
        f"--out {str(out)!r} changed during the run ({', '.join(foreign[:3]) or 'its contents'}); nothing in it was "
        f"touched, and the results are in {str(keep)!r}"
    )


STAGING_SCHEMA = "edgeport.staging/1"
# tempfile.mkdtemp's names: the prefix and 8 characters of its alphabet
_STAGING_NAME = re.compile(re.escape(STAGING_PREFIX) + r"[a-z0-9_]{8}")
_STAGING_ENTRIES = {"work", "result", "replaced", STAGING_MARKER}  # all a staging folder ever holds


def _mark_staging(fd: int, command: str) -> None:
    """What the staging marker says of its owner: this process, on this host."""
    import socket

    os.write(fd, json.dumps({"schema": STAGING_SCHEMA, "command": command, "pid": os.getpid(),
                             "host": socket.gethostname(), "created": _now()}).encode())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def _stale_staging(folder: Path) -> bool:
    """Whether ``folder`` is provably a staging folder that edgeport made and whose owner is gone:
    mkdtemp's name pattern; a real folder of this user's holding only what staging holds; a
    plain marker (no link, one name) whose JSON names edgeport's schema and an owner process on
    this host that no longer exists. A user's folder that merely looks like one fails one of these."""
    import socket

    if not _STAGING_NAME.fullmatch(folder.name):
        return False
    try:
        st = os.lstat(folder)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            return False
        if not {p.name for p in folder.iterdir()} <= _STAGING_ENTRIES:
            return False
        said = json.loads(_read_own(folder / STAGING_MARKER))
    except (OSError, ValueError, NotOurs):
        return False
    return (isinstance(said, dict) and said.get("schema") == STAGING_SCHEMA and said.get("host") == socket.gethostname()
            and isinstance(said.get("pid"), int) and not isinstance(said.get("pid"), bool) and not _alive(said["pid"]))


def reclaim_staging(parent: Path) -> list[str]:
    """Remove the staging folders that killed runs left in ``parent``: only those provably made by
    edgeport (``_stale_staging``) whose owner no longer holds its lock (a lock dies with its process)."""
    gone = []
    try:
        candidates = [p for p in parent.iterdir() if p.name.startswith(STAGING_PREFIX)]
    except OSError:
        return gone
    for folder in candidates:
        if not _stale_staging(folder):
            continue
        try:
            fd = _try_lock(folder / STAGING_MARKER)
        except (OSError, NotOurs):
            continue
        if fd is None:
            continue  # a live run
        try:
            shutil.rmtree(folder)
            gone.append(folder.name)
        finally:
            os.close(fd)
    return gone


@contextlib.contextmanager
def staged_output(out: Path | None, *, command: str, force: bool, default_root: Path,
                  inputs: tuple[Path | None, ...] = ()):
    """Write into a hidden folder next to the output; move it into place only on success. On any
    failure (an error, Ctrl-C, SIGTERM) everything this run created is removed: the staging folder,
    a claimed run folder, parent folders it made; a killed run's staging folder, by the next run."""
    created: list[Path] = []
    claimed = out is None
    if out is None:
        with creating(default_root, "the default run folder"):
            created = make_parents(default_root / "x")
            try:
                target = claim_run_dir(default_root, command)
            except BaseException:
                remove_empty(created)
                raise
    else:
        target = check_out(out, command=command, force=force, inputs=inputs)
        with creating(out):
            created = make_parents(target)
    tmp = owner = None
    try:
        with creating(out if out is not None else target, "--out" if out is not None else "the run folder"):
            reclaimed = tuple(reclaim_staging(target.parent))
            if reclaimed:
                from edgeport.text import for_terminal

                print(for_terminal(f"edgeport: removed {len(reclaimed)} staging folder(s) that killed runs left in "
                                   f"{target.parent}: {', '.join(reclaimed[:3])}"), file=sys.stderr)
            tmp = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=target.parent)).resolve()
            owner = _try_lock(tmp / STAGING_MARKER)  # held for this run's life: the folder is not stale
            if owner is not None:
                _mark_staging(owner, command)  # whose it is, so that only a provably stale one is ever removed
            stage = Staging(out=target, work=tmp / "work", result=tmp / "result", reclaimed=reclaimed)
            stage.work.mkdir()
            stage.result.mkdir()
            write_marker(stage.result, command)
        yield stage
        _place(stage.result, target, tmp, command, force)
    except BaseException:
        if owner is not None:
            os.close(owner)
            owner = None
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if claimed:
            release_claim(target)
        remove_empty(created)
        raise
    finally:
        if owner is not None:
            os.close(owner)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
