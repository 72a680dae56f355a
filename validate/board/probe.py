"""Which builtin op versions a runtime has, asked of the runtime itself.

For every builtin op of the TFLite schema and every version up to ``MAX_VERSION``, a model
with that one operator code and an empty graph; a TFLite interpreter resolves every operator
code when it is built, before it looks at any tensor, and refuses one it has no kernel for
("Didn't find op for builtin opcode 'CONV_2D' version '2'"). ``edgeport boards probe BOARD``
writes what it accepts to ``validate/board_profiles/NAME.ops.toml``, the board gate's table.
"""

from __future__ import annotations

import datetime as _dt
import tempfile
from pathlib import Path

import numpy as np

from edgeport.validate.board import uint8_probe

MAX_VERSION = 16  # past the highest version of any builtin op to date (FULLY_CONNECTED: 13)


def one_op_model(name: str, version: int) -> bytes:
    """A model holding the one operator code ``name`` at ``version`` and an empty graph (one tensor, in = out)."""
    from edgeport.ops.tflite_graph import Graph

    g = Graph.empty()
    x = g.add_tensor("x", (1,), "float32")
    g.opcode(name, version)
    g.set_io([x], [x])
    return g.to_bytes(drop_unused_opcodes=False)


def builtin_ops() -> list[str]:
    from edgeport.ops.tflite_file import enum_names

    return list(enum_names("BuiltinOperator").values())


def probe(transport, *, max_version: int = MAX_VERSION) -> tuple[dict, dict[str, list[int]]]:
    """Run the probe on ``transport``; returns (what the runtime says of itself, op -> versions).
    Each op of ``uint8_probe.PROBES`` also runs as a uint8 model; ``uint8_ops`` lists those it computes."""
    with tempfile.TemporaryDirectory(prefix="edgeport-probe-") as tmp:
        folder = Path(tmp)
        (folder / "probes").mkdir()
        for name in builtin_ops():
            for version in range(1, max_version + 1):
                (folder / "probes" / f"{name}.{version}.tflite").write_bytes(one_op_model(name, version))
        models = uint8_probe.probe_models()
        if models:
            (folder / "uint8").mkdir()
            for name, model in models.items():
                (folder / "uint8" / f"{name}.tflite").write_bytes(model)
                np.save(folder / "uint8" / f"{name}.input.npy", uint8_probe.probe_input(name))
        result = transport.execute(folder, "probe")
        if models:
            result["uint8_ops"], result["uint8_not"] = _uint8_kernels(folder, models, result.get("uint8") or {})
    table: dict[str, list[int]] = {}
    for item in result["accepted"]:
        name, version = item.rsplit(".", 1)
        table.setdefault(name, []).append(int(version))
    return result, {op: sorted(vs) for op, vs in sorted(table.items())}


def _uint8_kernels(folder: Path, models: dict[str, bytes], said: dict) -> tuple[list[str], dict[str, str]]:
    """The ops whose uint8 model the runtime ran within ``uint8_probe.STEPS`` of today's reference
    kernels on the same file (read strictly: a plain array of the output's shape and type), and
    for each other op, why not."""
    from edgeport.ops.tflite_run import run_tflite

    agree, why = [], {}
    for name in models:
        if said.get(name) != "ran":
            why[name] = said.get(name, "no answer")
            continue
        want = run_tflite(folder / "uint8" / f"{name}.tflite", uint8_probe.probe_input(name))[0]
        try:
            got = np.load(folder / "outputs" / f"uint8.{name}.npy", allow_pickle=False)
        except (OSError, ValueError) as exc:
            why[name] = f"its output cannot be read ({exc})"
            continue
        if got.shape != want.shape or got.dtype != want.dtype:
            why[name] = f"returned {got.dtype}{list(got.shape)}, not {want.dtype}{list(want.shape)}"
            continue
        if want.dtype.kind == "f":  # DEQUANTIZE: a float output, in steps of its input's grid
            steps = np.rint(np.abs(got.astype(np.float64) - want) / uint8_probe.IN.scale).astype(np.int64)
        else:
            steps = np.abs(got.astype(np.int32) - want.astype(np.int32))
        if int(steps.max()) > uint8_probe.STEPS:
            why[name] = (f"{int((steps > uint8_probe.STEPS).sum())} of {steps.size} values differ from today's kernels by more "
                         f"than {uint8_probe.STEPS} step (up to {int(steps.max())}: got {got.ravel()[int(steps.argmax())]}, "
                         f"expected {want.ravel()[int(steps.argmax())]})")
            continue
        agree.append(name)
    return sorted(agree), why


def table_toml(board: str, runtime: dict, table: dict[str, list[int]], *, command: str) -> str:
    """``NAME.ops.toml``: the probed op versions with their provenance. What the runtime said of
    itself is quoted (a JSON string is a TOML basic string), so its reply cannot add keys."""
    import json

    from edgeport.text import for_terminal

    def q(value) -> str:
        return json.dumps(str(value), ensure_ascii=True)

    lines = [
        f"# The builtin op versions {for_terminal(runtime['runtime'])} {for_terminal(runtime['version'])} has: each op and version was",
        "# asked of the runtime with a one-op model (validate/board/probe.py); what it loaded is listed.",
        f"# Written by `{for_terminal(command)}`; re-checked against the runtime by tests/validate/test_real_tflite113.py and "
        f"test_board_runtime.py.",
        "[provenance]",
        f"board = {q(board)}",
        f"runtime = {q(runtime['runtime'])}",
        f"version = {q(runtime['version'])}",
        f"package = {q(str(runtime['package']) + '==' + str(runtime['version']))}",
        f"python = {q(runtime.get('python', '?'))}",
        f"date = {q(_dt.date.today().isoformat())}",
        f"probed = {len(builtin_ops()) * MAX_VERSION}",
        f'method = "one-op model per builtin op and version 1-{MAX_VERSION}; accepted when the interpreter builds"',
        "",
        "[ops]",
        *[f"{op} = [{', '.join(map(str, vs))}]" for op, vs in table.items()],
    ]
    if runtime.get("uint8_ops") is not None:
        lines += [
            "",
            "# The ops it computes on uint8: each ran as a one-op uint8 model (validate/board/uint8_probe.py)",
            f"# and agreed with today's reference kernels on the same file within {uint8_probe.STEPS} step.",
            "# Not computed on uint8 (what the runtime said, or how it differed):",
            *[f"#   {op}: {for_terminal(why)[:200]}" for op, why in sorted(runtime.get("uint8_not", {}).items())],
            "[uint8]",
            f"probed = {len(uint8_probe.PROBES)}",
            f"ops = [{', '.join(q(op) for op in runtime['uint8_ops'])}]",
        ]
    return "\n".join(lines) + "\n"
