"""Selective float: a quantised file some of whose ops are the float32 file's -- as a float tail,
or as float islands.

A quantised file that fails its gate often fails on a few ops (``validate/parity/op_errors.py``
names them). Keeping those in float repairs it, and a board without a QUANTIZE op (TFLite 1.13)
cannot go back from float to integers: a float op's every consumer must be float too. So the
float ops form a tail: the ops chosen and everything downstream of them, taken from the float32
file the same converter wrote (its weights, its ops, lowered for the same board), fed where the
tail meets the quantised graph by a DEQUANTIZE of the quantised file's tensor of the same name.
The quantised ops that only fed the dropped part go with it; the file's input stays as the
quantised file takes it, and its outputs are the float32 file's.

A board with a QUANTIZE from float (today's TFLite) can go back: ``float_islands`` runs the chosen
ops in float, fed by DEQUANTIZEs of the quantised tensors, and QUANTIZEs each output another op (or
the graph) reads back onto its quantised tensor; every other op stays quantised.

``float_tail`` and ``float_islands`` write one such file; the search for the fewest ops that pass is
the repair pass's (``convert/passes/repair_pass.py``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from edgeport.ops.tflite_graph import Graph
from edgeport.ops.tflite_graph import name_key as key


@dataclass(frozen=True)
class Tail:
    model: bytes
    float_ops: tuple[int, ...]  # the float32 file's ops it runs, in file order
    fed_at: tuple[str, ...]  # the tensors where it reads the quantised graph (DEQUANTIZE), by name
    islands: bool = False  # float islands, each QUANTIZEd back (``float_islands``); else a tail to the outputs


def _producers(g: Graph) -> dict[int, int]:
    return {t: i for i, op in enumerate(g.ops) for t in op.outputs if t >= 0}


def downstream(g: Graph, seeds) -> set[int]:
    """``seeds`` (op indices) and every op that reads what they write, transitively."""
    readers: dict[int, list[int]] = {}
    for i, op in enumerate(g.ops):
        for t in op.inputs:
            if t >= 0:
                readers.setdefault(t, []).append(i)
    found, stack = set(), list(seeds)
    while stack:
        i = stack.pop()
        if i in found:
            continue
        found.add(i)
        stack += [j for t in g.ops[i].outputs if t >= 0 for j in readers.get(t, ())]
    return found


def tail_ops(f: Graph, seeds, fed) -> tuple[set[int], tuple[int, ...]] | None:
    """The float32 file's ops a tail from ``seeds`` runs, and the tensors it is fed at: ``seeds``
    and their downstream, grown upstream where it would be fed at a tensor ``fed(t)`` refuses (one
    the quantised file lacks, or holds in other units) -- the graph's input is always fed. None
    where the tail would hold every op (that is the float32 file, not a repair)."""
    producer = _producers(f)
    ops = downstream(f, seeds)
    while True:
        boundary = {t for j in ops for t in f.ops[j].inputs if t >= 0 and f.const(t) is None and producer.get(t) not in ops}
        refused = {t for t in boundary if t not in f.sg.inputs and not fed(t)}
        if not refused:
            break
        ops |= downstream(f, {producer[t] for t in refused if t in producer})
        if any(t not in producer for t in refused):
            return None
    if len(ops) == len(f.ops):
        return None
    return ops, tuple(sorted(boundary))


def _code(q: Graph, f: Graph, op) -> int:
    """The quantised model's op-code index for the float32 file's ``op`` (added when missing)."""
    code = f.model.operatorCodes[op.opcodeIndex]
    if not code.customCode:
        return q.opcode(f.code_name(code), int(code.version))
    for i, mine in enumerate(q.model.operatorCodes):
        if mine.customCode == code.customCode and mine.version == code.version:
            return i
    q.model.operatorCodes.append(copy.copy(code))
    return len(q.model.operatorCodes) - 1


def float_tail(quantised: bytes, float_file: bytes, seeds, fed_by) -> Tail | None:
    """The quantised file with the float32 file's ops from ``seeds`` (the float32 file's op
    indices) to the outputs in float; ``fed_by(name)``: the quantised file's tensor holding the
    float tensor ``name`` in the same units (quantised or not), or None. None where no tail short
    of the whole float32 file exists, or either file has control flow."""
    q, f = Graph(quantised, what="the quantised file"), Graph(float_file, what="the float32 file")
    if q.subgraphs != 1 or f.subgraphs != 1 or len(q.sg.inputs) != 1 or len(f.sg.inputs) != 1:
        return None

    def source(t: int) -> int | None:  # the quantised tensor that feeds float tensor t
        if t in f.sg.inputs:
            return q.sg.inputs[0]
        s = fed_by(key(f.tensor_name(t)))
        return s if s is not None and q.shape(s) == f.shape(t) else None

    # every output's op is in the tail: none is left in the quantised file's units, which may divide
    # an output's channels (convert/converters/int8_groups.py)
    producer_f = _producers(f)
    seeds = set(seeds) | {producer_f[t] for t in f.sg.outputs if t in producer_f}
    found = tail_ops(f, seeds, lambda t: source(t) is not None)
    if found is None:
        return None
    ops, boundary = found
    fed = {t: source(t) for t in boundary}
    # the quantised ops that compute what the tail is fed, in their order
    producer, need, stack = _producers(q), set(), [s for s in fed.values()]
    while stack:
        t = stack.pop()
        if t in producer and producer[t] not in need:
            need.add(producer[t])
            stack += [u for u in q.ops[producer[t]].inputs if u >= 0]
    kept = [q.ops[i] for i in sorted(need)]
    mapped: dict[int, int] = {}

    def take(t: int) -> int:
        return _taken(f, q, mapped, t)

    for t, s in fed.items():
        if q.dtype(s) == "float32":
            mapped[t] = s
            continue
        out = take(t)
        q.tensor(out).name = f"{key(f.tensor_name(t))}/dequantized".encode()  # not the quantised tensor's name twice
        kept.append(q.new_op("DEQUANTIZE", [s], [out], version=2 if q.dtype(s) == "int8" else 1))
    for j in sorted(ops):
        op = copy.copy(f.ops[j])
        op.opcodeIndex = _code(q, f, f.ops[j])
        op.inputs = [take(t) if t >= 0 else t for t in op.inputs]
        op.outputs = [take(t) if t >= 0 else t for t in op.outputs]
        kept.append(op)
    q.sg.operators = kept
    q.set_io(q.sg.inputs, [take(t) for t in f.sg.outputs])
    q.model.signatureDefs = None  # they name the quantised file's outputs, which are gone
    q.prune()
    return Tail(q.to_bytes(), tuple(sorted(ops)), tuple(f.tensor_name(t) for t in boundary))


def islandable(q: Graph, f: Graph, j: int, fed_by) -> bool:
    """Whether op ``j`` of the float32 file alone can be a float island in ``q`` (``float_islands``):
    every non-constant tensor it reads and writes has a quantised tensor of its shape to meet."""
    def held(t: int) -> bool:
        s = q.sg.inputs[0] if t in f.sg.inputs else fed_by(key(f.tensor_name(t)))
        return s is not None and q.shape(s) == f.shape(t)

    op = f.ops[j]
    return all(held(t) for t in op.outputs if t >= 0) and all(held(t) for t in op.inputs if t >= 0 and f.const(t) is None)


def float_islands(quantised: bytes, float_file: bytes, ops, fed_by) -> Tail | None:
    """The quantised file with the float32 file's ``ops`` (its op indices) run in float, in place of
    the quantised ops that write the same tensors (module docstring); ``fed_by`` as for ``float_tail``.
    None where an op's outputs or inputs have no quantised tensor to meet (other units, a tensor the
    converter fused away), or either file has control flow."""
    q, f = Graph(quantised, what="the quantised file"), Graph(float_file, what="the float32 file")
    if q.subgraphs != 1 or f.subgraphs != 1 or len(q.sg.inputs) != 1 or len(f.sg.inputs) != 1:
        return None
    chosen = sorted(set(ops))

    def held(t: int) -> int | None:  # the quantised tensor holding the float32 file's tensor t
        if t in f.sg.inputs:
            return q.sg.inputs[0]
        s = fed_by(key(f.tensor_name(t)))
        return s if s is not None and q.shape(s) == f.shape(t) else None

    made = {t for j in chosen for t in f.ops[j].outputs if t >= 0}
    writes = {}  # quantised tensor -> the chosen float op that now writes it
    for j in chosen:
        for t in f.ops[j].outputs:
            if t >= 0:
                if held(t) is None:
                    return None
                writes[held(t)] = j
        for t in f.ops[j].inputs:
            if t >= 0 and f.const(t) is None and t not in made and held(t) is None:
                return None
    producer_q = _producers(q)
    replaced = {producer_q[t] for t in writes if t in producer_q}
    if len(replaced) < len(set(writes.values())) or any(t >= 0 and t not in writes for i in replaced for t in q.ops[i].outputs):
        return None  # a chosen op the quantised file has no op for, or a quantised op the chosen ones replace only in part
    read_outside = {t for i, op in enumerate(q.ops) if i not in replaced for t in op.inputs if t >= 0} | set(q.sg.outputs)
    mapped: dict[int, int] = {}
    dequantized: dict[int, int] = {}

    def take(t: int) -> int:
        return _taken(f, q, mapped, t)

    new_ops = []
    for i, op in enumerate(q.ops):
        if i not in replaced:
            new_ops.append(op)
            continue
        for j in sorted({writes[t] for t in op.outputs if t in writes}):
            inputs = []
            for t in f.ops[j].inputs:
                if t < 0 or f.const(t) is not None or t in made:
                    inputs.append(take(t) if t >= 0 else t)
                    continue
                s = held(t)
                if q.dtype(s) == f.dtype(t):  # float already, or an integer input (a shape, indices) as it is
                    inputs.append(s)
                    continue
                if s not in dequantized:
                    out = take(t)
                    q.tensor(out).name = f"{key(f.tensor_name(t))}/dequantized".encode()
                    new_ops.append(q.new_op("DEQUANTIZE", [s], [out], version=2 if q.dtype(s) == "int8" else 1))
                    dequantized[s] = out
                inputs.append(dequantized[s])
            fop = copy.copy(f.ops[j])
            fop.opcodeIndex = _code(q, f, f.ops[j])
            fop.inputs = inputs
            fop.outputs = [take(t) if t >= 0 else t for t in f.ops[j].outputs]
            new_ops.append(fop)
            for t in f.ops[j].outputs:
                if t >= 0 and held(t) in read_outside:
                    mapped_t = take(t)
                    q.tensor(mapped_t).name = f"{key(f.tensor_name(t))}/float".encode()  # the quantised one keeps its name
                    new_ops.append(q.new_op("QUANTIZE", [mapped_t], [held(t)], version=2 if q.dtype(held(t)) == "int8" else 1))
    q.sg.operators = new_ops
    q.prune()
    return Tail(q.to_bytes(), tuple(chosen), tuple(sorted({f.tensor_name(t) for j in chosen for t in f.ops[j].inputs
                                                           if t >= 0 and f.const(t) is None and t not in made})), islands=True)


def _taken(f, q, mapped: dict[int, int], t: int) -> int:
    """The float32 file ``f``'s tensor ``t``, copied into the quantised model ``q`` once (``mapped``: which are)."""
    if t not in mapped:
        tensor = copy.copy(f.tensor(t))
        tensor.buffer = 0
        q.sg.tensors.append(tensor)
        mapped[t] = len(q.sg.tensors) - 1
        value = f.const(t)
        if value is not None:
            q.set_const(mapped[t], value)
    return mapped[t]
