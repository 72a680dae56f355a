"""JSON that edgeport did not write in this run, read strictly: a report or baseline given to
``edgeport check``, a board's reply (``validate/board/reply.py``), a dataset's COCO annotations.

Bounded before a byte is parsed (JSON costs many times its size in memory): a plain file of at
most its limit in bytes, never read past it whatever the file says of itself (``userfiles``: a
reply may grow while it is read), with at most so many objects and lists (``BYTES_PER_CONTAINER``);
UTF-8; nesting a parser can follow; and no key twice in one object: the standard reader keeps the
last, another reader the first, so such a file says two things.
"""

from __future__ import annotations

import functools
import json
import math
import types
import typing
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path

from edgeport.text import shown
from edgeport.userfiles import Refused, read_bounded

# objects and lists a file may hold, per byte of its limit, unless its reader says otherwise: an empty
# one costs about 64 bytes in memory for its 3 in the file, so one per 64 keeps their memory to about
# the file's size; a report or a reply holds far fewer (a few per metric)
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


# -- a typed record as JSON: the report's sections, the board gate's verdict -----------------------
# A field is read by its annotation: a ``Section``, ``X | None``, ``tuple[X, ...]`` (a list),
# ``dict[str, X]``, ``str``, ``int``, ``float`` (a JSON number, or "inf", "-inf", "nan"), ``bool``, or a
# bare ``dict`` kept as it is. A wrong type, or a number outside its ``ranged`` bounds, is ``Malformed``
# naming the field (``repairs.int8.latency.ratio``); a field without a default must be there; one the
# file does not hold takes its default (an older file lacks some), and one it holds that no field names
# is allowed (new ones come within a schema version).


@dataclass(frozen=True, kw_only=True)
class Section:
    """A part of the report, read (``from_dict``) and written (``to_dict``) by its fields' annotations."""

    # the fields the dict it was read from did not hold: ``to_dict`` leaves them out, so a section
    # is written as it was given (the repair log's entries each hold their own fields; a field one
    # holds as null another does not hold at all)
    absent: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    def to_dict(self) -> dict:
        return {_key(f.name): written(getattr(self, f.name)) for f in _fields(type(self)) if f.name not in self.absent}

    @classmethod
    def from_dict(cls, value, where: str):
        expect(value, dict, where)
        hints, given = _hints(cls), {}
        for f in _fields(cls):
            key = _key(f.name)
            if key in value:
                given[f.name] = read(hints[f.name], value[key], f"{where}.{key}")
                if "range" in f.metadata and given[f.name] is not None:
                    _within(value[key], f"{where}.{key}", *f.metadata["range"])
            elif f.default is MISSING and f.default_factory is MISSING:
                raise Malformed(f"{where}.{key} is missing")
        return cls(**given, absent=frozenset(f.name for f in _fields(cls) if f.name not in given))


def ranged(lo: float, hi: float, *, finite: bool = False, **kw):
    """A number field held to [lo, hi] when read; ``finite``: NaN and infinities too (elsewhere the gate reports them)."""
    return field(metadata={"range": (lo, hi, finite)}, **kw)


def _within(value, where: str, lo: float, hi: float, finite: bool) -> None:
    if not math.isfinite(number(value, where, lo, hi)) and finite:
        raise Malformed(f"{where} is {shown(value)}: not a finite number")


_hints = functools.cache(typing.get_type_hints)


@functools.cache
def _fields(cls) -> tuple:
    return tuple(f for f in fields(cls) if f.name != "absent")


def _key(name: str) -> str:
    """A field's key in the file: its name, less the underscore that keeps a keyword a name (``from_``)."""
    return name.removesuffix("_")


def read(kind, value, where: str):
    """``value`` as the annotation ``kind`` says (the module's docstring); ``Malformed`` naming ``where``."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is types.UnionType:  # X | None
        return None if value is None else read(next(a for a in args if a is not type(None)), value, where)
    if origin is tuple:  # a phase may hand a tuple where the file holds a list
        items = list(value) if isinstance(value, tuple) else expect(value, list, where)
        return tuple(read(args[0], v, f"{where}[{i}]") for i, v in enumerate(items))
    if origin is dict:
        return {k: read(args[1], v, f"{where}.{k}") for k, v in expect(value, dict, where).items()}
    if isinstance(kind, type) and issubclass(kind, Section):
        return kind.from_dict(value, where)
    if kind is float:
        number(value, where)
        return value if isinstance(value, (int, float)) else float(value)  # an integer stays one, as written
    return expect(value, kind, where)


def written(value):
    """A section's value as the file holds it: sections as dicts, tuples as lists."""
    if isinstance(value, Section):
        return value.to_dict()
    if isinstance(value, (tuple, list)):
        return [written(v) for v in value]
    if isinstance(value, dict):
        return {k: written(v) for k, v in value.items()}
    return value
