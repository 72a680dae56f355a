"""JSON that edgeport did not write in this run, read strictly: a report or baseline given to
``edgeport check``, a board's reply (``validate/board/reply.py``).

Bounded before a byte is parsed (JSON costs many times its size in memory), and never read past
the bound whatever the file says of itself (a reply may grow while it is read); UTF-8; nesting a
parser can follow; and no key twice in one object: the standard reader keeps the last, another
reader the first, so such a file says two things.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


class Refused(ValueError):
    """Why the file is not JSON edgeport reads, in words that follow "it"/"the file"."""


class DuplicateKey(Refused):
    """A key twice in one object: edgeport never writes that, so the file was edited."""


def read_json(path: Path, limit: int):
    """The JSON value in ``path``; ``Refused`` saying why not. ``OSError`` (missing, a folder,
    unreadable) is the caller's to name."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size > limit:
            raise Refused(f"is larger than {limit // 2**20} MB")
        raw = f.read(limit + 1)
    if len(raw) > limit:
        raise Refused(f"is larger than {limit // 2**20} MB")
    try:
        return json.loads(raw.decode("utf-8"), object_pairs_hook=_one_of_each_key)
    except UnicodeDecodeError as exc:
        raise Refused(f"is not text (byte {exc.start} is not UTF-8)") from None
    except RecursionError:
        raise Refused("is nested too deeply") from None
    except Refused:
        raise
    except ValueError as exc:  # malformed JSON, or an integer too long to convert
        raise Refused(f"is not readable JSON ({str(exc)[:200]})") from None


def _one_of_each_key(pairs: list[tuple[str, object]]) -> dict:
    out = {}
    for key, value in pairs:
        if key in out:
            keys = ", ".join(map(repr, (k for k, _ in pairs)))
            raise DuplicateKey(f"holds the key {repr(key)[:80]} twice in one object (its keys: {keys[:120]}), so what it says "
                          f"depends on the reader")
        out[key] = value
    return out
