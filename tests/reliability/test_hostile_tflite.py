"""A hostile or damaged .tflite: refused in seconds with one line, never a hang, never exit 3.

Every reader of a .tflite goes through ``ops/tflite_file.py``, which walks the raw flatbuffer
before the object API unpacks it and bounds the work by the file's size. The bombs here are
built as an attacker builds them, with the flatbuffers builder: a 160 KB file whose 20,000
subgraph entries all point at one subgraph (whose 20,000 tensor entries point at one tensor),
a vector or string shared by thousands of tables, constants stored after the flatbuffer shared
by thousands of buffers, a vector claiming billions of entries. The fuzz flips bytes and
duplicates table entries of real small files: each comes back summarised or refused as bad
input, within seconds.

A file that unpacks but cannot run (a buffer index of 99999, an empty operator list, an op
reading its own output, a cut-short weight buffer) is not runnable, with the reason: the
gate agrees with the runtime.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgeport.errors import BadInputError
from edgeport.ops.tflite_graph import Graph
from edgeport.ops.tflite_model import read_tflite
from edgeport.validate.board.profiles import check_model, load_board

from ..conftest import fc_model
from .conftest import assert_kept, assert_one_line, inventory, run_cli, within


def _schema():
    import ai_edge_litert.schema_py_generated as schema

    return schema


def _vector(b, offsets) -> int:
    b.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return b.EndVector()


def _model(b, *, subgraphs: int, buffers: list[int] | None = None, codes: list[int] | None = None) -> bytes:
    s = _schema()
    if buffers is None:
        s.BufferStart(b)
        buffers = [s.BufferEnd(b)]
    buffer_vec = _vector(b, buffers)
    code_vec = _vector(b, codes or [])
    s.ModelStart(b)
    s.ModelAddVersion(b, 3)
    s.ModelAddSubgraphs(b, subgraphs)
    s.ModelAddBuffers(b, buffer_vec)
    s.ModelAddOperatorCodes(b, code_vec)
    b.Finish(s.ModelEnd(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def aliased_bomb(n: int = 20_000, *, as_operator_code: bool = False) -> bytes:
    """The issue's file: ``n`` subgraph entries pointing at one subgraph, whose ``n`` tensor
    entries point at one tensor (160 KB; unpacked, n * n tensors). ``as_operator_code``: the one
    operator code points at that subgraph too (reached first, read as a small table)."""
    import flatbuffers

    s = _schema()
    b = flatbuffers.Builder(1024)
    name = b.CreateString("t")
    s.TensorStart(b)
    s.TensorAddName(b, name)
    tensor = s.TensorEnd(b)
    tensors = _vector(b, [tensor] * n)
    s.SubGraphStart(b)
    s.SubGraphAddTensors(b, tensors)
    sg = s.SubGraphEnd(b)
    return _model(b, subgraphs=_vector(b, [sg] * n), codes=[sg] if as_operator_code else None)


def shared_leaf_bomb(kind: str, n: int = 5_000) -> bytes:
    """``n`` distinct tensors sharing one large shape vector (``vector``) or name (``string``)."""
    import flatbuffers

    s = _schema()
    b = flatbuffers.Builder(1024)
    if kind == "vector":
        s.TensorStartShapeVector(b, 8_000)
        for _ in range(8_000):
            b.PrependInt32(1)
        leaf = b.EndVector()
    else:
        leaf = b.CreateString("x" * 30_000)
    tensors = []
    for _ in range(n):
        s.TensorStart(b)
        (s.TensorAddShape if kind == "vector" else s.TensorAddName)(b, leaf)
        tensors.append(s.TensorEnd(b))
    tensor_vec = _vector(b, tensors)
    s.SubGraphStart(b)
    s.SubGraphAddTensors(b, tensor_vec)
    sg = s.SubGraphEnd(b)
    return _model(b, subgraphs=_vector(b, [sg]))


def shared_external_data_bomb(n: int = 5_000, size: int = 60_000) -> bytes:
    """``n`` buffers whose data, stored after the flatbuffer (``offset``/``size``, as
    ai-edge-quantizer writes large constants), is the same ``size`` bytes."""
    import flatbuffers

    s = _schema()

    def build(offset: int) -> bytes:
        b = flatbuffers.Builder(1024)
        buffers = []
        for _ in range(n):
            s.BufferStart(b)
            s.BufferAddOffset(b, offset)
            s.BufferAddSize(b, size)
            buffers.append(s.BufferEnd(b))
        s.SubGraphStart(b)
        sg = s.SubGraphEnd(b)
        return _model(b, subgraphs=_vector(b, [sg]), buffers=buffers)

    head = build(2)  # the same layout whatever the offset: then aim every buffer past its end
    head = build(len(head))
    return head + bytes(size)


def huge_vector_claim() -> bytes:
    """A real one-op model whose tensors vector says it has 2^31 entries."""
    from edgeport.validate.board.probe import one_op_model

    s = _schema()
    data = bytearray(one_op_model("ADD", 1))
    sg = s.Model.GetRootAs(bytes(data), 0).Subgraphs(0)
    at = sg._tab.Vector(sg._tab.Offset(4)) - 4  # the tensors vector's length
    data[at:at + 4] = (2**31).to_bytes(4, "little")
    return bytes(data)


# -- bombs --------------------------------------------------------------------------------------


def test_the_160_kb_bomb_is_refused_by_boards_check_and_validate_in_seconds(workspace):
    (workspace / "bomb.tflite").write_bytes(aliased_bomb())
    assert 150_000 < (workspace / "bomb.tflite").stat().st_size < 170_000
    before = inventory(workspace)
    t0 = time.monotonic()
    r = run_cli("boards", "check", "bomb.tflite", "--board", "tflite-1.13", cwd=workspace, timeout=120)
    assert_one_line(r, 2, "bomb.tflite", "is the same table as model.Subgraphs[0]", "aliased",
                    "more tables than a file of")
    r = run_cli("validate", "model.pt", "--tflite", "bomb.tflite", "--arch", "pdet-n", cwd=workspace, timeout=120)
    assert_one_line(r, 2, "bomb.tflite", "aliased")
    assert time.monotonic() - t0 < 60, "two processes, each refusing the file in seconds"
    assert_kept(before, inventory(workspace))
    assert not (workspace / "runs").exists()


@pytest.mark.parametrize("make, needle", [
    (lambda: shared_leaf_bomb("vector"), "more than twice the file"),
    (lambda: shared_leaf_bomb("string"), "more than twice the file"),
    (shared_external_data_bomb, "adds up to more than the file"),
    (huge_vector_claim, "claims 2,147,483,648 entries"),
])
def test_shared_leaves_and_huge_claims_are_refused(workspace, run_inproc, make, needle):
    (workspace / "m.tflite").write_bytes(make())
    before = inventory(workspace)
    with within(30):
        r = run_inproc("boards", "check", "m.tflite", "--board", "tflite-1.13")
    assert_one_line(r, 2, "m.tflite", "damaged TFLite flatbuffer", needle)
    assert_kept(before, inventory(workspace))


def test_a_table_aliased_as_two_types_is_walked_as_each():
    """One position that ``OperatorCodes`` reaches first (read as an operator code: one small table)
    and 20,000 ``Subgraphs`` entries reach next (read as a subgraph, whose tensors vector is a bomb
    of its own): walked as a subgraph too, and refused."""
    from edgeport.ops.tflite_file import DamagedModel, check

    data = aliased_bomb(as_operator_code=True)
    with within(20), pytest.raises(DamagedModel, match="more tables than a file of"):
        check(data, "the model")


def test_a_converters_own_aliasing_is_read():
    """litert-torch points its empty ``Buffers`` entries at one table: each is unpacked once
    more, a few tables in all, and the file is read as any other."""
    import flatbuffers

    from edgeport.ops.tflite_file import check, unpack

    s = _schema()
    b = flatbuffers.Builder(1024)
    s.BufferStart(b)
    empty = s.BufferEnd(b)
    name = b.CreateString("t")
    s.TensorStart(b)
    s.TensorAddName(b, name)
    tensor = s.TensorEnd(b)
    tensors = _vector(b, [tensor])
    s.SubGraphStart(b)
    s.SubGraphAddTensors(b, tensors)
    sg = s.SubGraphEnd(b)
    data = _model(b, subgraphs=_vector(b, [sg]), buffers=[empty] * 5)
    check(data, "the model")
    assert len(unpack(data).buffers) == 5


def test_every_reader_goes_through_the_bounded_one():
    """The object API and ``Graph`` on it (every reader and editor) refuse the bomb."""
    from edgeport.ops.tflite_file import DamagedModel, unpack
    bomb = aliased_bomb(2_000)
    with within(20):
        for read in (Graph, unpack):
            with pytest.raises(DamagedModel, match="aliased"):
                read(bomb)


def test_no_module_reads_a_tflite_but_through_the_bounded_reader():
    """grep: the schema's object API and root accessor are called in ops/tflite_file.py only
    (the probe writes its models through Graph too)."""
    import re

    root = Path(__file__).resolve().parents[2]
    pattern = re.compile(r"InitFromPackedBuf|InitFromBuf\(|InitFromObj\(|\.GetRootAs\(|GetRootAsModel")
    files = [*root.glob("*.py"), *(p for pkg in ("commands", "convert", "models", "ops", "scripts", "train", "validate")
                                   for p in (root / pkg).rglob("*.py"))]
    readers = sorted(str(p.relative_to(root)) for p in files if pattern.search(p.read_text(errors="replace")))
    assert readers == ["ops/tflite_file.py"], readers


# -- structurally invalid files: not runnable, with the reason ------------------------------------


def _damaged(kind: str) -> bytes:
    g = fc_model()
    if kind == "buffer-99999":
        g.sg.tensors[1].buffer = 99999
    elif kind == "no-operators":
        g.sg.operators = []
    elif kind == "reads-own-output":
        g.ops[0].inputs[0] = g.ops[0].outputs[0]
    elif kind == "cut-short-weights":
        w = g.model.buffers[g.sg.tensors[1].buffer]
        w.data = np.asarray(w.data)[:20]
    return g.to_bytes()


DAMAGE = [
    ("buffer-99999", "tensor 'w' names buffer 99999; the model has"),
    ("no-operators", "output 'y' is never computed (the operator list is empty)"),
    ("reads-own-output", "operator 0 (FULLY_CONNECTED) reads tensor 'y', which it writes itself"),
    ("cut-short-weights", "constant 'w' holds 20 bytes; its shape [3, 4] of float32 needs 48 (a cut-short buffer)"),
]


def test_the_undamaged_model_is_runnable(tmp_path):
    (tmp_path / "ok.tflite").write_bytes(fc_model().to_bytes())
    summary = read_tflite(tmp_path / "ok.tflite")
    assert summary.problems == () and check_model(summary, load_board("tflite-1.13")) == []


@pytest.mark.parametrize("kind, reason", DAMAGE)
def test_boards_check_calls_a_structurally_invalid_file_not_runnable(workspace, run_inproc, kind, reason):
    (workspace / "m.tflite").write_bytes(_damaged(kind))
    before = inventory(workspace)
    r = run_inproc("boards", "check", "m.tflite", "--board", "tflite-1.13")
    assert r.code == 1 and "Traceback" not in r.err, r.out + r.err
    assert "NOT runnable on tflite-1.13:" in r.out and f"the file is structurally invalid: {reason}" in r.out, r.out
    assert_kept(before, inventory(workspace))


@pytest.mark.slow  # the runtime runs in a process
def test_litert_itself_refuses_a_buffer_index_past_the_end(tmp_path):
    """The gate agrees with the runtime: today's LiteRT refuses the file the gate calls not runnable."""
    from edgeport.ops.tflite_run import load_interpreter

    (tmp_path / "m.tflite").write_bytes(_damaged("buffer-99999"))
    with pytest.raises(Exception):  # noqa: B017 -- LiteRT's own error type varies by release
        load_interpreter(tmp_path / "m.tflite", kernels="reference").allocate_tensors()


# -- the fuzz -----------------------------------------------------------------------------------


def _seeds() -> list[bytes]:
    """Real small files: every uint8 probe model (options, quantisation, constants), the FC model
    and a two-op one with a resize."""
    from edgeport.validate.board import uint8_probe

    seeds = [fc_model().to_bytes()]
    models = uint8_probe.probe_models()
    seeds += [models[k] for k in sorted(models)[:12]]
    g = Graph.empty()
    x = g.add_tensor("x", (1, 2, 2, 1), "float32")
    r = g.add_tensor("r", (1, 4, 4, 1), "float32")
    y = g.add_tensor("y", (1, 4, 4, 1), "float32")
    g.add(g.new_op("RESIZE_BILINEAR", [x, g.constant("s", np.array([4, 4], np.int32), "int32")], [r], "ResizeBilinearOptions",
                   halfPixelCenters=True))
    g.add(g.new_op("RELU", [r], [y]))
    g.set_io([x], [y])
    seeds.append(g.to_bytes())
    return seeds


SEEDS = _seeds()


def _table_vectors(data: bytes) -> list[list[int]]:
    """The positions of the entries of every vector of tables the model and its subgraphs hold
    (subgraphs, buffers, operator codes; tensors and operators), found with the schema's accessors."""
    s = _schema()
    model = s.Model.GetRootAs(data, 0)
    found = []

    def entries(tab, slot: int) -> list[int]:
        o = tab.Offset(slot)
        if not o:
            return []
        start = tab.Vector(o)
        return [start + 4 * j for j in range(tab.VectorLen(o))]

    for slot in (6, 8, 12):  # operator_codes, subgraphs, buffers
        found.append(entries(model._tab, slot))
    for g in range(model.SubgraphsLength()):
        sg = model.Subgraphs(g)._tab
        found += [entries(sg, 4), entries(sg, 10)]  # tensors, operators
    return [v for v in found if len(v) >= 2]


@st.composite
def mutated(draw):
    data = bytearray(draw(st.sampled_from(SEEDS)))
    if draw(st.booleans()):  # tables duplicated: one entry of a vector of tables aimed at another's table
        vectors = _table_vectors(bytes(data))
        if vectors:
            vec = draw(st.sampled_from(vectors))
            src, dst = draw(st.sampled_from(vec)), draw(st.sampled_from(vec))
            target = src + int.from_bytes(data[src:src + 4], "little")
            data[dst:dst + 4] = (target - dst).to_bytes(4, "little", signed=False) if target >= dst else data[dst:dst + 4]
    for _ in range(draw(st.integers(0, 6))):  # bytes flipped
        at = draw(st.integers(0, len(data) - 1))
        data[at] ^= draw(st.integers(1, 255))
    if draw(st.booleans()):  # a word set to an extreme: lengths, offsets, indices
        at = draw(st.integers(0, len(data) - 4))
        data[at:at + 4] = draw(st.sampled_from([0, 1, 0x7FFFFFFF, 0xFFFFFFFF, 0x80000000, 99999])).to_bytes(4, "little")
    if draw(st.integers(0, 7)) == 0:  # cut short (rarely: most offsets then point past the end)
        data = data[: draw(st.integers(8, len(data)))]
    return bytes(data)


BOARDS = [load_board(name) for name in ("default", "tflite-1.13", "tflm-m4-256k")]


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_the_fuzzed_reader_never_hangs_and_never_fails_as_a_bug(tmp_path_factory, data):
    """What ``boards check`` and ``validate`` do with a file: read it, judge it against each board.
    Either is bad input (exit 2) or a verdict; anything else would be exit 3."""
    path = tmp_path_factory.getbasetemp() / "fuzz.tflite"
    path.write_bytes(data)
    with within(10):
        try:
            summary = read_tflite(path)
        except BadInputError:
            return
        for board in BOARDS:
            check_model(summary, board)


def test_a_file_walked_once_is_not_walked_again_and_a_refused_one_always_is(monkeypatch):
    """A convert reads its files about ten times: the exact bytes that passed are not walked again (in
    this process); a file that was refused is walked, and refused, every time."""
    import edgeport.ops.tflite_file as tflite_file

    walks = []
    real = tflite_file._walk
    monkeypatch.setattr(tflite_file, "_walk", lambda data, what: (walks.append(len(data)), real(data, what))[1])
    good = _seeds()[-1]
    tflite_file.check(good)
    tflite_file.check(bytes(good))
    assert len(walks) <= 1  # 0 where an earlier test walked these bytes already
    n = len(walks)
    bad = bytearray(good)
    bad[4:8] = b"TFL3"
    bad[0:4] = (len(bad) + 64).to_bytes(4, "little")  # the root table past the end of the file
    for _ in range(2):
        with pytest.raises(BadInputError):
            tflite_file.check(bytes(bad))
    assert len(walks) == n + 2
