"""Which builtin op versions a runtime has, asked of the runtime itself.

For every builtin op of the TFLite schema and every version up to ``MAX_VERSION``, a model
with that one operator code and an empty graph; a TFLite interpreter resolves every operator
code when it is built and refuses one it has no kernel for ("Didn't find op for builtin
opcode 'CONV_2D' version '2'"), before it looks at any tensor. What it accepts is the set
of op versions it can load. ``edgeport boards probe BOARD`` runs the probe on the board's
runtime and writes ``boards/NAME.ops.toml``, the table the board gate then reads.
"""

from __future__ import annotations

import datetime as _dt
import tempfile
from pathlib import Path

from edgeport._lazy import require

MAX_VERSION = 16  # past the highest version of any builtin op to date (FULLY_CONNECTED: 13)


def one_op_model(schema, code: int, version: int) -> bytes:
    """A flatbuffer holding one operator code and an empty graph (one tensor, in = out)."""
    flatbuffers = require("flatbuffers", purpose="writing probe models")
    model = schema.ModelT()
    model.version = 3
    opcode = schema.OperatorCodeT()
    opcode.builtinCode = code
    opcode.deprecatedBuiltinCode = min(code, 127)  # the field runtimes before 2.4 read
    opcode.version = version
    model.operatorCodes = [opcode]
    model.buffers = [schema.BufferT()]
    tensor = schema.TensorT()
    tensor.shape, tensor.type, tensor.buffer, tensor.name = [1], schema.TensorType.FLOAT32, 0, b"x"
    graph = schema.SubGraphT()
    graph.tensors, graph.inputs, graph.outputs, graph.operators = [tensor], [0], [0], []
    model.subgraphs = [graph]
    builder = flatbuffers.Builder(256)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def builtin_ops() -> dict[str, int]:
    schema = require("ai_edge_litert.schema_py_generated", package="ai-edge-litert", purpose="writing probe models")
    return {k: v for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_") and isinstance(v, int)}


def probe(transport, *, max_version: int = MAX_VERSION, workdir: Path | None = None) -> tuple[dict, dict[str, list[int]]]:
    """Run the probe on ``transport``; returns (what the runtime says of itself, op -> versions)."""
    schema = require("ai_edge_litert.schema_py_generated", package="ai-edge-litert", purpose="writing probe models")
    with tempfile.TemporaryDirectory(prefix="edgeport-probe-", dir=workdir) as tmp:
        folder = Path(tmp)
        (folder / "probes").mkdir()
        for name, code in builtin_ops().items():
            for version in range(1, max_version + 1):
                (folder / "probes" / f"{name}.{version}.tflite").write_bytes(one_op_model(schema, code, version))
        result = transport.execute(folder, "probe")
    table: dict[str, list[int]] = {}
    for item in result["accepted"]:
        name, version = item.rsplit(".", 1)
        table.setdefault(name, []).append(int(version))
    return result, {op: sorted(vs) for op, vs in sorted(table.items())}


def table_toml(board: str, runtime: dict, table: dict[str, list[int]], *, command: str) -> str:
    """``NAME.ops.toml``: the probed op versions with their provenance. What the runtime said of
    itself is quoted (a JSON string is a TOML basic string), so its reply cannot add keys."""
    import json

    from edgeport.text import for_terminal

    date = _dt.date.today().isoformat()

    def q(value) -> str:
        return json.dumps(str(value), ensure_ascii=True)

    lines = [
        f"# The builtin op versions {for_terminal(runtime['runtime'])} {for_terminal(runtime['version'])} has: each op and version was",
        "# asked of the runtime with a one-op model (validate/op_probe.py); what it loaded is listed.",
        f"# Written by `{for_terminal(command)}`; re-checked against the runtime by tests/validate/test_real_tflite113.py and "
        f"test_board_runtime.py.",
        "[provenance]",
        f"board = {q(board)}",
        f"runtime = {q(runtime['runtime'])}",
        f"version = {q(runtime['version'])}",
        f"package = {q(str(runtime['package']) + '==' + str(runtime['version']))}",
        f"python = {q(runtime.get('python', '?'))}",
        f"date = {q(date)}",
        f"probed = {len(builtin_ops()) * MAX_VERSION}",
        f'method = "one-op model per builtin op and version 1-{MAX_VERSION}; accepted when the interpreter builds"',
        "",
        "[ops]",
        *[f"{op} = [{', '.join(map(str, vs))}]" for op, vs in table.items()],
    ]
    return "\n".join(lines) + "\n"
