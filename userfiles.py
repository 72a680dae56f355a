"""Files a user hands edgeport, read with bounds: every reader of one opens it here.

A file is data, and only a plain file is one: a FIFO blocks ``open`` until a writer comes and
every read after it, a device (``/dev/zero``) or a sparse file of gigabytes would be read whole
into memory. So a file is opened with ``O_NONBLOCK`` (a FIFO opens at once, and is refused),
checked with ``fstat`` on the descriptor that is read (what is read is what was checked), and
read to at most its limit plus one byte, whatever it says of its own size (a file may grow while
it is read). Links are followed: where a file may lie is its reader's rule (a dataset's labels
stay inside it, its images may be links, as DVC and git-annex make them).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO


class Refused(ValueError):
    """Why the file is not one edgeport reads, in words that follow "it"/"the file"."""


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (a named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def size_text(n: int) -> str:
    """A byte limit in words: 16 MB, 1 GB, 512 KB."""
    for unit, shift in (("GB", 30), ("MB", 20), ("KB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g} {unit}"
    return f"{n} bytes"


def open_plain(path: Path | str) -> BinaryIO:
    """``path`` open for reading in binary, when it is a plain file (links followed). ``Refused``
    for a FIFO, a device or a socket; ``IsADirectoryError`` for a folder; other ``OSError``s
    (missing, unreadable) as ``open`` raises them: each is the caller's to name."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket, or a device with nothing behind it
            raise Refused("is a socket or a device, not a plain file") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(mode):
            raise Refused(f"is {_kind(mode)}, not a plain file")
        os.set_blocking(fd, True)  # the flag was for the open alone
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bounded(path: Path | str, limit: int) -> bytes:
    """The bytes of the plain file at ``path`` (``open_plain``), ``Refused`` when it holds more than
    ``limit``: its size is checked before a byte is read, and no more than ``limit + 1`` are read."""
    with open_plain(path) as f:
        if os.fstat(f.fileno()).st_size > limit:
            raise Refused(f"is larger than {size_text(limit)}")
        raw = f.read(limit + 1)
    if len(raw) > limit:
        raise Refused(f"is larger than {size_text(limit)}")
    return raw
