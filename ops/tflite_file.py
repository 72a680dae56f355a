"""The one reader of .tflite bytes: every file edgeport reads is checked here, on the raw
buffer, before the schema's object API (``ModelT.InitFromPackedBuf``) unpacks it.

A flatbuffer is a graph of offsets. The object API follows every offset and makes a Python
object for each table it reaches, however many times it is reached: a 160 KB file whose 20,000
subgraph entries all point at one subgraph (and 20,000 tensor entries at one tensor) unpacks
into 400 million objects, and never returns. Nothing can be counted once it has started.

So ``check`` walks the file first, lazily, with the schema's own accessor classes (the fields
it follows are exactly those the object API unpacks, whatever version of the schema is
installed), and bounds the work by the file's size:

- every table lies inside the file, with its vtable and fields;
- the tables the object API will make, an aliased one counted each time it is reached, are at
  most ``len(data) / 4``. Converters alias small tables themselves (litert-torch points its empty
  ``Buffers`` entries at one table), so an aliased table is walked once as each type it is reached
  as, and its count (tables and bytes below it) added again each time it is reached;
- the bytes of every vector and string reached are counted each time they are reached, and
  may not add up to more than ``2 x`` the file (plus 1 MB): a vector shared by thousands of
  tables is refused;
- a vector's length fits in the file before its entries are read.

It costs one pass over the tables (YOLOv8n's float32 file, 1,667 tables: docs/measured.md)
and refuses a hostile one in about as long: ``DamagedModel``, exit 2, one line naming the entry.
Each file is walked once per exact bytes and process (``_WALKED``; ``ByContent`` says why).
"""

from __future__ import annotations

import hashlib
import struct
import threading
from collections import OrderedDict
from functools import lru_cache

from edgeport._lazy import require
from edgeport.errors import BadInputError

# a union field -> the union (the enum naming the table type of each value), by (table, field)
UNIONS = {("Operator", "BuiltinOptions"): "BuiltinOptions", ("Operator", "BuiltinOptions2"): "BuiltinOptions2",
          ("QuantizationParameters", "Details"): "QuantizationDetails",
          ("DimensionMetadata", "ArraySegments"): "SparseIndexVector",
          ("DimensionMetadata", "ArrayIndices"): "SparseIndexVector"}
EXTRA_BYTES = 1 << 20  # what the vectors and strings reached may add to twice the file's size
# whatever the file's size: the largest published models (LLMs) have well under 100,000 tensors and
# operators; half a million tables take the walk and the object API about a minute
MAX_TABLES = 500_000


class DamagedModel(BadInputError):
    """A .tflite whose flatbuffer is out of bounds or larger unpacked than its size allows (exit 2)."""


def schema():
    return require("ai_edge_litert.schema_py_generated", package="ai-edge-litert", purpose="reading and editing .tflite files")


def unpack(data: bytes, what: str = "the model"):
    """The checked file as the object API's ``ModelT``: what every edit starts from."""
    check(data, what)
    try:
        return schema().ModelT.InitFromPackedBuf(bytearray(data), 0)
    except Exception as exc:  # a field the walk does not follow, damaged: struct errors to IndexError
        raise DamagedModel(f"{what} is a damaged TFLite flatbuffer ({type(exc).__name__}: {exc})") from exc


def digest(data: bytes) -> bytes:
    """The file's identity for what is computed once per exact bytes: far cheaper than the walk it keys."""
    return hashlib.blake2b(data, digest_size=32).digest()


class ByContent:
    """What a read computes from a file's exact bytes, kept for this process (parity's threads
    share it): a convert reads each file several times (gate, lowering, parity's step checks).
    Only immutable results belong here; an error is raised each time, never kept."""

    def __init__(self, size: int):
        self._kept: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self._size = size

    def get(self, key, compute):
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                return self._kept[key]
        value = compute()
        with self._lock:
            self._kept[key] = value
            while len(self._kept) > self._size:
                self._kept.popitem(last=False)
        return value


def check(data: bytes, what: str = "the model") -> None:
    """Raise ``DamagedModel`` unless ``data`` is a TFLite flatbuffer that unpacks within bounds
    set by its size (module docstring)."""
    if len(data) < 8 or bytes(data[4:8]) != b"TFL3":
        raise DamagedModel(f"{what} is not a TFLite model (no TFL3 identifier); pass a .tflite file")
    _WALKED.get(digest(data), lambda: _walk(data, what))


# the files ``check`` has walked and passed in this process, by their digests
_WALKED = ByContent(64)


def graph_outputs(data: bytes) -> list[int]:
    """Subgraph 0's outputs (tensor indices), read without unpacking the model."""
    check(data)
    return [int(t) for t in schema().Model.GetRootAs(bytes(data), 0).Subgraphs(0).OutputsAsNumpy()]


def recorded_ranges(calibrated: bytes) -> dict[int, tuple[float, float]]:
    """The tensors of subgraph 0 that carry calibration statistics (TensorFlow's calibrator: a
    minimum and a maximum each), with them, in order. ValueError where a tensor carries several
    (per channel); ``DamagedModel`` where the file is no sound flatbuffer."""
    check(calibrated, "the calibrated model")
    graph = schema().Model.GetRootAs(bytes(calibrated), 0).Subgraphs(0)
    recorded = {}
    for t in range(graph.TensorsLength()):
        q = graph.Tensors(t).Quantization()
        if q is not None and q.MinLength() and q.MaxLength():
            if q.MinLength() != 1 or q.MaxLength() != 1:
                raise ValueError(f"tensor {t} carries {q.MinLength()} minima, not one")
            recorded[t] = (float(q.MinAsNumpy()[0]), float(q.MaxAsNumpy()[0]))
    return recorded


def set_ranges(calibrated: bytes, ranges: dict[int, tuple[float, float]]) -> bytes:
    """``calibrated`` (TensorFlow's calibrator's model) with the statistics of each tensor of
    subgraph 0 in ``ranges`` set to its (minimum, maximum), in place, every other byte kept
    (``convert/converters/tf_calibration.py``). ValueError where a tensor in ``ranges`` carries none, or
    several (per channel)."""
    import numpy as np

    check(calibrated, "the calibrated model")
    buf = bytearray(calibrated)
    graph = schema().Model.GetRootAs(buf, 0).Subgraphs(0)
    for t, (low, high) in ranges.items():
        q = graph.Tensors(t).Quantization() if 0 <= t < graph.TensorsLength() else None
        if q is None or not (q.MinLength() and q.MaxLength()):
            raise ValueError(f"tensor {t} carries no calibration statistics")
        if q.MinLength() != 1 or q.MaxLength() != 1:
            raise ValueError(f"tensor {t} carries {q.MinLength()} minima, not one")
        q.MinAsNumpy()[:] = np.float32(low)  # views into ``buf``
        q.MaxAsNumpy()[:] = np.float32(high)
    return bytes(buf)


def _walk(data: bytes, what: str) -> None:
    walk = _Walk(bytes(data), what)
    try:
        walk.table(schema().Model.GetRootAs(walk.data, 0), "model")
    except DamagedModel:
        raise
    except Exception as exc:  # what the accessors raise on bytes that are not what they say
        raise DamagedModel(f"{what} is a damaged TFLite flatbuffer ({type(exc).__name__}: {exc})") from exc


class _Walk:
    def __init__(self, data: bytes, what: str):
        self.data, self.n, self.what = data, len(data), what
        # (position, table type) -> (first entry, tables, bytes below it): a position read as another
        # type is other fields, walked as that type (else a table walked as a small type could be
        # unpacked as a large one, unwalked)
        self.tables: dict[tuple[int, type], tuple[str, int, int]] = {}
        self.vtables: set[int] = set()
        self.count = 0  # the tables the object API makes, an aliased one each time it is reached
        self.limit = min(self.n // 4, MAX_TABLES)
        self.bytes = 0
        self.budget = 2 * self.n + EXTRA_BYTES

    def refuse(self, why: str):
        raise DamagedModel(f"{self.what} is a damaged TFLite flatbuffer: {why}; re-export it from its converter")

    def charge(self, nbytes: int, where: str) -> None:
        self.bytes += nbytes
        if self.bytes > self.budget:
            self.refuse(f"{where}: its vectors and strings add up to more than twice the file's {self.n:,} bytes "
                        f"(a vector shared by many tables)")

    def header(self, pos: int, where: str) -> None:
        """The table at ``pos``, its vtable and every field inside the file."""
        n, data = self.n, self.data
        if not 0 <= pos <= n - 4:
            self.refuse(f"{where} lies outside the file (byte {pos} of {n:,})")
        vt = pos - struct.unpack_from("<i", data, pos)[0]
        if vt not in self.vtables:
            if not 0 <= vt <= n - 4:
                self.refuse(f"{where}'s vtable lies outside the file (byte {vt} of {n:,})")
            vsize, tsize = struct.unpack_from("<HH", data, vt)
            if vsize < 4 or vsize % 2 or vt + vsize > n or tsize < 4:
                self.refuse(f"{where}'s vtable is malformed")
            fields = struct.unpack_from(f"<{(vsize - 4) // 2}H", data, vt + 4)
            if any(f and (f < 4 or f >= tsize) for f in fields):
                self.refuse(f"{where} has a field outside its table")
            self.vtables.add(vt)
        if pos + struct.unpack_from("<H", data, vt + 2)[0] > n:
            self.refuse(f"{where} runs past the end of the file")

    def table(self, obj, where: str) -> None:
        pos = obj._tab.Pos
        key = (pos, type(obj))
        if key in self.tables:  # aliased: unpacked again with all below it, walked once
            first, tables, nbytes = self.tables[key]
            if tables < 0:
                self.refuse(f"{where} contains itself")  # offsets only point forward: a damaged file
            self.count += tables
            if self.count > self.limit:
                self.refuse(f"{where} is the same table as {first} (an aliased table), and unpacks into more "
                            f"tables than a file of {self.n:,} bytes can hold (or than {MAX_TABLES:,})")
            self.charge(nbytes, where)
            return
        self.header(pos, where)
        self.tables[key] = (where, -1, 0)
        count0, bytes0 = self.count, self.bytes
        self.count += 1
        if self.count > self.limit:
            self.refuse(f"{where}: more tables than a file of {self.n:,} bytes can hold (or than {MAX_TABLES:,})")
        cls = type(obj)
        for name, is_vector in _fields(cls):
            if is_vector:
                self.vector(obj, name, f"{where}.{name}")
                continue
            value = getattr(obj, name)()
            if hasattr(value, "_tab"):
                self.table(value, f"{where}.{name}")
            elif isinstance(value, _table_class()):  # a union: its type says which table
                self.union(obj, cls.__name__, name, value, f"{where}.{name}")
            elif isinstance(value, bytes):
                self.charge(len(value), f"{where}.{name}")
        self.tables[key] = (where, self.count - count0, self.bytes - bytes0)

    def vector(self, obj, name: str, where: str) -> None:
        length = getattr(obj, f"{name}Length")()
        if length == 0:
            return
        if length > self.n:
            self.refuse(f"{where} claims {length:,} entries in a file of {self.n:,} bytes")
        as_numpy = getattr(obj, f"{name}AsNumpy", None)
        if as_numpy is not None:  # scalars: a view of the file (numpy checks its bounds)
            self.charge(as_numpy().nbytes, where)
            return
        get = getattr(obj, name)
        first = get(0)
        if hasattr(first, "_tab"):
            if 4 * length > self.n:
                self.refuse(f"{where} claims {length:,} tables in a file of {self.n:,} bytes")
            self.table(first, f"{where}[0]")
            for j in range(1, length):
                self.table(get(j), f"{where}[{j}]")
        elif isinstance(first, bytes):
            for j in range(length):
                self.charge(4 + len(get(j)), f"{where}[{j}]")
        else:
            self.charge(length, where)

    def union(self, obj, cls_name: str, name: str, value, where: str) -> None:
        s = schema()
        kind = getattr(obj, f"{name}Type")()
        enum = UNIONS.get((cls_name, name))
        member = enum_names(enum).get(kind) if enum else None
        table_cls = getattr(s, member, None) if member else None
        if table_cls is None:  # a type the object API does not unpack: only where it lies
            self.header(value.Pos, where)
            return
        typed = table_cls()
        typed.Init(self.data, value.Pos)
        self.table(typed, where)


@lru_cache(maxsize=1)
def _table_class():
    return require("flatbuffers.table", package="flatbuffers", purpose="reading and editing .tflite files").Table


@lru_cache(maxsize=None)
def enum_names(enum: str) -> dict[int, str]:
    """value -> name of one of the schema's enums (``BuiltinOperator``, ``TensorType``, ...)."""
    return {v: k for k, v in vars(getattr(schema(), enum)).items() if not k.startswith("_") and isinstance(v, int)}


_SUFFIXES = ("AsNumpy", "Length", "IsNone", "Type")


@lru_cache(maxsize=None)
def _fields(cls) -> tuple[tuple[str, bool], ...]:
    """A generated table class's field accessors as (name, whether a vector), in declaration order:
    not flatc's helpers beside a field (``_SUFFIXES``), nor the class's own methods."""
    out = []
    own = vars(cls)
    for name, fn in own.items():
        if name.startswith("_") or name == "Init" or not callable(fn) or isinstance(fn, (classmethod, staticmethod)):
            continue
        if any(name.endswith(sfx) and name[: -len(sfx)] in own for sfx in _SUFFIXES):
            continue
        out.append((name, fn.__code__.co_argcount == 2))  # (self, j): a vector's entry
    return tuple(out)
