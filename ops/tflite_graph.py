"""A .tflite flatbuffer as an editable graph: what the board lowering (``ops/lowering``) and
the uint8 rewrite (``convert/uint8.py``) change after conversion.

Built on the schema's generated object API (``ModelT``), as TensorFlow's own flatbuffer tools
are. A ``Graph`` views one subgraph (``at`` gives another view of the same model): the lowering
and the uint8 rewrite edit the main one (every detector converts to one) and leave a model with
control flow (several subgraphs) as it is; the int8 fixes visit each.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgeport._lazy import require
from edgeport.ops.tflite_file import enum_names, schema

DTYPES = {"FLOAT32": np.float32, "INT8": np.int8, "UINT8": np.uint8, "INT32": np.int32, "INT64": np.int64,
          "INT16": np.int16, "BOOL": np.bool_, "FLOAT16": np.float16}


def _inline_buffers(model, raw: bytes) -> None:
    """Constants stored after the flatbuffer (a buffer's ``offset``/``size``, as ai-edge-quantizer
    writes them) are read into the buffer itself: the object API would drop them on writing, and
    runtimes older than TFLite 2.13 read only inline data."""
    total = 0
    for b in model.buffers or ():
        if getattr(b, "offset", 0) > 1 and getattr(b, "size", 0):
            if b.offset + b.size > len(raw):
                raise ValueError(f"a buffer's data lies past the end of the file ({b.offset} + {b.size} > {len(raw)} bytes)")
            total += b.size
            if total > len(raw):  # each region is one buffer's: shared by many, a small file would copy into gigabytes
                raise ValueError(f"the buffers' data stored after the flatbuffer adds up to more than the file's {len(raw):,} bytes")
            b.data = np.frombuffer(raw, np.uint8, count=b.size, offset=b.offset).copy()
            b.offset, b.size = 0, 0


def name_key(name: str) -> str:
    """A tensor's name as two files of one graph both give it: up to its first ``;`` (a converter's
    fused names end differently). What tensors are paired by (``validate/parity/op_errors.py``,
    ``ops/float_tail.py``, ``convert/ranges.py``), and what ``Graph.like`` names a new tensor under."""
    return name.split(";", 1)[0]


@dataclass(frozen=True)
class Quant:
    """Per-tensor affine quantisation: real = scale * (q - zero_point)."""

    scale: float
    zero_point: int


class Graph:
    """The main subgraph of one model, editable; ``to_bytes`` writes the model back."""

    def __init__(self, model: bytes, subgraph: int = 0, *, what: str = "the model"):
        from edgeport.ops.tflite_file import DamagedModel, unpack

        self.schema = schema()
        self.model = unpack(model, what)  # bounded by the file's size: ops/tflite_file.py
        try:
            _inline_buffers(self.model, model)
        except ValueError as exc:
            raise DamagedModel(f"{what} is a damaged TFLite flatbuffer ({exc})") from exc
        if not self.model.subgraphs:
            raise DamagedModel(f"{what} is a damaged TFLite flatbuffer (no subgraphs)")
        self._view(subgraph)

    @classmethod
    def empty(cls) -> "Graph":
        """A model with one empty subgraph, to be filled (tests and one-op probe models)."""
        s = schema()
        model = s.ModelT()
        model.version = 3
        model.operatorCodes, model.buffers = [], [s.BufferT()]
        sg = s.SubGraphT()
        sg.tensors, sg.operators, sg.inputs, sg.outputs = [], [], [], []
        model.subgraphs = [sg]
        g = object.__new__(cls)
        g.schema, g.model = s, model
        g._view(0)
        return g

    def add(self, op) -> None:
        """Append ``op`` at the end of the graph (building one)."""
        self.sg.operators.append(op)

    def set_io(self, inputs, outputs) -> None:
        self.sg.inputs, self.sg.outputs = [int(i) for i in inputs], [int(o) for o in outputs]

    def at(self, subgraph: int) -> "Graph":
        """The same model, another subgraph (shared: an edit through either is an edit of both)."""
        view = object.__new__(Graph)
        view.schema, view.model = self.schema, self.model
        view._view(subgraph)
        return view

    def _view(self, subgraph: int) -> None:
        self.sg = self.model.subgraphs[subgraph]
        self._op_names = enum_names("BuiltinOperator")
        self._type_names = enum_names("TensorType")
        if self.model.buffers is None:
            self.model.buffers = [self.schema.BufferT()]
        if self.sg.operators is None:
            self.sg.operators = []
        if self.sg.tensors is None:
            self.sg.tensors = []
        for op in self.sg.operators:
            op.inputs = [int(i) for i in (op.inputs if op.inputs is not None else ())]
            op.outputs = [int(o) for o in (op.outputs if op.outputs is not None else ())]
        self.sg.inputs = [int(i) for i in (self.sg.inputs if self.sg.inputs is not None else ())]
        self.sg.outputs = [int(o) for o in (self.sg.outputs if self.sg.outputs is not None else ())]

    @property
    def subgraphs(self) -> int:
        return len(self.model.subgraphs)

    @property
    def ops(self) -> list:
        return self.sg.operators

    # -- operator codes -------------------------------------------------------------------------

    def name(self, op) -> str:
        return self.code_name(self.model.operatorCodes[op.opcodeIndex])

    def code_name(self, code) -> str:
        """An op code's name: its builtin's (``RESIZE_BILINEAR``), or ``CUSTOM:`` and the custom code."""
        if code.customCode:
            custom = code.customCode.decode(errors="replace") if isinstance(code.customCode, bytes) else code.customCode
            return f"CUSTOM:{custom}"
        builtin = max(code.builtinCode, code.deprecatedBuiltinCode)
        return self._op_names.get(builtin, f"OP_{builtin}")

    def version(self, op) -> int:
        return int(self.model.operatorCodes[op.opcodeIndex].version)

    def opcode(self, name: str, version: int) -> int:
        """The index of builtin ``name`` at ``version`` in the model's op codes, added when missing
        (the runtime resolves a kernel per op code: one entry per version in use)."""
        builtin = getattr(self.schema.BuiltinOperator, name)
        for i, code in enumerate(self.model.operatorCodes):
            if not code.customCode and max(code.builtinCode, code.deprecatedBuiltinCode) == builtin and code.version == version:
                return i
        code = self.schema.OperatorCodeT()
        code.builtinCode = builtin
        code.deprecatedBuiltinCode = min(builtin, 127)  # the field runtimes before 2.4 read
        code.version = version
        self.model.operatorCodes.append(code)
        return len(self.model.operatorCodes) - 1

    def set_version(self, op, version: int) -> None:
        op.opcodeIndex = self.opcode(self.name(op), version)

    def drop_unused_opcodes(self) -> None:
        used = sorted({op.opcodeIndex for sg in self.model.subgraphs for op in (sg.operators or ())})
        index = {old: new for new, old in enumerate(used)}
        self.model.operatorCodes = [self.model.operatorCodes[i] for i in used]
        for sg in self.model.subgraphs:
            for op in sg.operators or ():
                op.opcodeIndex = index[op.opcodeIndex]

    # -- metadata -----------------------------------------------------------------------------

    def metadata_text(self, name: str) -> str | None:
        for md in self.model.metadata or ():
            if md.name == name.encode():
                data = self.model.buffers[md.buffer].data
                return bytes(bytearray(data)).split(b"\x00")[0].decode() if data is not None else None
        return None

    def set_metadata_text(self, name: str, text: str | None) -> None:
        """Write a metadata string as TensorFlow's converter does (zero-padded to 16 bytes), or
        drop the entry (``None``); its buffer is left empty, never shared."""
        for md in list(self.model.metadata or ()):
            if md.name == name.encode():
                self.model.buffers[md.buffer].data = None
                self.model.metadata.remove(md)
        if text is None:
            return
        raw = text.encode().ljust(16, b"\x00")
        buf = self.schema.BufferT()
        buf.data = np.frombuffer(raw, dtype=np.uint8).copy()
        self.model.buffers.append(buf)
        md = self.schema.MetadataT()
        md.name, md.buffer = name.encode(), len(self.model.buffers) - 1
        self.model.metadata = [*(self.model.metadata or ()), md]

    # -- tensors ------------------------------------------------------------------------------

    def tensor(self, i: int):
        return self.sg.tensors[i]

    def shape(self, i: int) -> tuple[int, ...]:
        shape = self.sg.tensors[i].shape
        return tuple(int(v) for v in shape) if shape is not None else ()

    def dtype(self, i: int) -> str:
        """``float32``, ``int8``, ``uint8``, ``int32``, ..."""
        return self._type_names[self.sg.tensors[i].type].lower()

    def quant(self, i: int) -> Quant | None:
        """Per-tensor quantisation, or None (float, or per-channel: ``per_channel``)."""
        q = self.sg.tensors[i].quantization
        if q is None or q.scale is None or len(q.scale) != 1:
            return None
        return Quant(float(q.scale[0]), int(q.zeroPoint[0]) if q.zeroPoint is not None and len(q.zeroPoint) else 0)

    def per_channel(self, i: int) -> bool:
        q = self.sg.tensors[i].quantization
        return q is not None and q.scale is not None and len(q.scale) > 1

    def const(self, i: int) -> np.ndarray | None:
        """A constant tensor's value (its stored integers, for a quantised one), or None."""
        t = self.sg.tensors[i]
        buf = self.model.buffers[t.buffer] if 0 < t.buffer < len(self.model.buffers) else None
        if buf is None or buf.data is None or len(buf.data) == 0:
            return None
        dtype = DTYPES[self._type_names[t.type]]
        return np.frombuffer(np.asarray(buf.data, np.uint8).tobytes(), dtype=dtype).reshape(self.shape(i))

    def set_const(self, i: int, value: np.ndarray) -> None:
        """Give tensor ``i`` its own buffer holding ``value`` (never shared with another tensor)."""
        t = self.sg.tensors[i]
        buf = self.schema.BufferT()
        buf.data = np.frombuffer(np.ascontiguousarray(value).tobytes(), np.uint8)
        self.model.buffers.append(buf)
        t.buffer = len(self.model.buffers) - 1
        t.shape = [int(v) for v in value.shape]

    def add_tensor(self, name: str, shape, dtype: str, quant: Quant | None = None, value: np.ndarray | None = None) -> int:
        t = self.schema.TensorT()
        t.name = name.encode()
        t.shape = [int(v) for v in shape]
        t.type = getattr(self.schema.TensorType, dtype.upper())
        t.buffer = 0
        if quant is not None:
            q = self.schema.QuantizationParametersT()
            q.scale, q.zeroPoint, q.quantizedDimension = [float(quant.scale)], [int(quant.zero_point)], 0
            t.quantization = q
        self.sg.tensors.append(t)
        index = len(self.sg.tensors) - 1
        if value is not None:
            self.set_const(index, np.asarray(value, DTYPES[dtype.upper()]).reshape(t.shape))
        return index

    def like(self, i: int, suffix: str, shape=None, quant: Quant | None | bool = True) -> int:
        """A new activation tensor shaped (or ``shape``) and typed like ``i``, named ``i``'s
        ``name_key`` then ``/suffix`` (its own name, never read as ``i``'s); ``quant`` True keeps its
        quantisation, a ``Quant`` gives another."""
        q = self.quant(i) if quant is True else (quant or None)
        return self.add_tensor(f"{name_key(self.tensor_name(i))}/{suffix}", self.shape(i) if shape is None else shape, self.dtype(i), q)

    def constant(self, name: str, value: np.ndarray, dtype: str | None = None, quant: Quant | None = None) -> int:
        value = np.asarray(value)
        return self.add_tensor(name, value.shape, dtype or value.dtype.name, quant, value)

    def tensor_name(self, i: int) -> str:
        n = self.sg.tensors[i].name
        return n.decode() if isinstance(n, bytes) else str(n or f"t{i}")

    # -- operators ----------------------------------------------------------------------------

    def new_op(self, name: str, inputs, outputs, options: str | None = None, version: int = 1, **fields):
        """An operator (not yet placed: ``replace`` places it); ``options`` names its builtin options
        table (``AddOptions``) and ``fields`` set them."""
        op = self.schema.OperatorT()
        op.opcodeIndex = self.opcode(name, version)
        op.inputs, op.outputs = [int(i) for i in inputs], [int(o) for o in outputs]
        if options is not None:
            op.builtinOptionsType = getattr(self.schema.BuiltinOptions, options)
            opts = getattr(self.schema, f"{options}T")()
            for key, value in fields.items():
                if not hasattr(opts, key):
                    raise AttributeError(f"{options} has no field {key}")
                setattr(opts, key, value)
            op.builtinOptions = opts
        return op

    def replace(self, op, new_ops: list) -> None:
        """Put ``new_ops`` where ``op`` was, in order."""
        at = self.sg.operators.index(op)
        self.sg.operators[at:at + 1] = list(new_ops)

    def prune(self) -> None:
        """Drop the tensors no operator and no graph input or output names, and empty the buffers
        only they held (a rewrite that dropped ops: its file keeps no weights nothing reads)."""
        used = sorted({t for op in self.sg.operators for t in (*op.inputs, *op.outputs) if t >= 0}
                      | set(self.sg.inputs) | set(self.sg.outputs))
        index = {old: new for new, old in enumerate(used)}
        dropped = [t for i, t in enumerate(self.sg.tensors) if i not in index]
        self.sg.tensors = [self.sg.tensors[i] for i in used]
        for op in self.sg.operators:
            op.inputs = [index[t] if t >= 0 else t for t in op.inputs]
            op.outputs = [index[t] if t >= 0 else t for t in op.outputs]
        self.set_io([index[t] for t in self.sg.inputs], [index[t] for t in self.sg.outputs])
        held = {t.buffer for sg in self.model.subgraphs for t in (sg.tensors or ())}
        held |= {md.buffer for md in self.model.metadata or ()}
        for t in dropped:
            if t.buffer not in held and 0 < t.buffer < len(self.model.buffers):
                self.model.buffers[t.buffer].data = None

    def to_bytes(self, *, drop_unused_opcodes: bool = True) -> bytes:
        """The model as a .tflite file; op codes no operator uses are dropped unless asked to stay
        (the board probe's models: a runtime resolves a kernel per op code as it loads a file)."""
        flatbuffers = require("flatbuffers", purpose="writing .tflite files")
        if drop_unused_opcodes:
            self.drop_unused_opcodes()
        size = sum(len(b.data) for b in self.model.buffers if b.data is not None)
        builder = flatbuffers.Builder(size + 65536)
        builder.Finish(self.model.Pack(builder), file_identifier=b"TFL3")
        return bytes(builder.Output())


ACTIVATIONS = {"NONE": 0, "RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3}
