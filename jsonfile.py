"""JSON that edgeport did not write in this run, read strictly: a report or baseline given to
``edgeport check``, a board's reply (``validate/board/reply.py``), a dataset's COCO annotations.

Bounded before a byte is parsed (JSON costs many times its size in memory): a plain file of at
most its limit in bytes, never read past it whatever the file says of itself (``userfiles``: a
reply may grow while it is read), with at most so many objects and lists (an empty one costs
about 64 bytes in memory for its 3 in the file); UTF-8; nesting a parser can follow; and no key
twice in one object: the standard reader keeps the last, another reader the first, so such a
file says two things.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from edgeport.userfiles import Refused, read_bounded

# objects and lists a file may hold, per byte of its limit, unless its reader says otherwise:
# one per 64 bytes keeps them to about as much memory as the file's bytes, and a report or a
# reply holds far fewer (a few per metric)
BYTES_PER_CONTAINER = 64


class DuplicateKey(Refused):
    """A key twice in one object: edgeport never writes that, so the file was edited."""


def read_json(path: Path, limit: int, *, containers: int | None = None):
    """The JSON value in ``path``; ``Refused`` saying why not: not a plain file, more than ``limit``
    bytes, more than ``containers`` objects and lists (``limit // BYTES_PER_CONTAINER`` unless
    given), not UTF-8, not JSON, a key twice. ``OSError`` (missing, a folder, unreadable) is the
    caller's to name."""
    raw = read_bounded(path, limit)
    most = limit // BYTES_PER_CONTAINER if containers is None else containers
    # counted before the parse, in bytes: a '{' or '[' inside a string counts too, which only
    # makes the bound stricter than the file's real count, never looser
    found = raw.count(b"{") + raw.count(b"[")
    if found > most:
        raise Refused(f"holds {found:,} objects and lists ('{{' and '[' counted), more than {most:,}, the most edgeport "
                      f"reads (parsed, each costs about 64 bytes of memory)")
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


# -- its fields, each checked where it is read: the report reader (validate/report/schema.py,
# validate/parity/result.py) and the board's reply (validate/board/reply.py) ---------------------


class Malformed(ValueError):
    """A field missing, of the wrong type or out of range; the message names it (``results[1].passed``)."""


def clip(text: str, limit: int = 200) -> str:
    """Text from a file, bounded: a reason may be long, a line of edgeport's output may not."""
    return text if len(text) <= limit else text[:limit] + "..."


def shown(value) -> str:
    """A value from a file as an error shows it: exactly (``repr``), bounded."""
    return clip(repr(value), 80)


def expect(value, kind, where: str):
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise Malformed(f"{where} is missing or not a{'n' if kind.__name__[0] in 'aeiou' else ''} {kind.__name__}")
    return value


def number(value, where: str, lo: float = -math.inf, hi: float = math.inf) -> float:
    """A JSON number (or the renderer's "inf", "-inf", "nan") within [lo, hi]; NaN and infinities pass here."""
    if isinstance(value, str) and value in ("inf", "-inf", "nan"):
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Malformed(f"{where} is {shown(value)}, not a number")
    try:
        out = float(value)
    except OverflowError:  # an integer past 1.8e308: no number edgeport writes is one
        digits = int(value.bit_length() * math.log10(2)) + 1
        raise Malformed(f"{where} is an integer of about {digits} digits, past the largest float (1.8e308): not a metric") from None
    if math.isfinite(out) and not lo <= out <= hi:
        # exactly as read: a cosine of 1.0000000000000002 must not print as 1
        raise Malformed(f"{where} is {out!r}, outside [{lo!r}, {hi!r}]")
    return out


def count(value, where: str, *, nullable: bool = False) -> int | None:
    """A non-negative integer (or null where ``nullable``): a float, NaN or bool is not a count."""
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise Malformed(f"{where} is {shown(value)}, not a non-negative integer" + (" or null" if nullable else ""))
    return value


def strings(value, where: str) -> tuple[str, ...]:
    return tuple(expect(s, str, f"{where}[{i}]") for i, s in enumerate(expect(value, list, where)))
