"""The parts import each other in one direction only: no cycle between them, ever."""

from __future__ import annotations

import ast
import functools
import io
import os
import re
import tokenize
from pathlib import Path

import edgeport

ROOT = Path(edgeport.__file__).parent
# the folders of the design card and the top-level modules; tests, benchmarks and scripts sit outside
# (hidden folders -- virtual environments among them -- and run outputs are not the package)
SKIP = {"tests", "benchmarks", "scripts", "build", "runs", "_build_backend"}


def _modules() -> dict[str, Path]:
    """edgeport.X.Y -> its file, for every module of the package (a package is its __init__)."""
    out = {}
    for dirpath, dirs, files in os.walk(ROOT):
        rel = Path(dirpath).relative_to(ROOT)
        dirs[:] = [d for d in dirs if not d.startswith((".", "__")) and not (rel == Path(".") and d in SKIP)]
        for name in files:
            if name.endswith(".py"):
                parts = list((rel / name[:-3]).parts)
                out[".".join(["edgeport", *(parts[:-1] if parts[-1] == "__init__" else parts)])] = Path(dirpath) / name
    return out


@functools.lru_cache(maxsize=1)
def module_graph() -> dict[str, frozenset[str]]:
    """module -> the edgeport modules it imports (imports inside functions included)."""
    modules = _modules()
    graph = {}
    for module, path in modules.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "edgeport":
                deps |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module for a in node.names}
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.split(".")[0] == "edgeport"}
        graph[module] = frozenset(d for d in deps if d in modules and d != module)
    return graph


def _part(module: str) -> str | None:
    bits = module.split(".")
    return bits[1] if bits[0] == "edgeport" and len(bits) > 1 else None


def import_graph() -> dict[str, set[str]]:
    """part (top-level folder or module) -> the parts it imports."""
    graph: dict[str, set[str]] = {}
    for module, deps in module_graph().items():
        src = _part(module)
        if src is None:
            continue
        graph.setdefault(src, set()).update(d for d in map(_part, deps) if d and d != src)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every elementary cycle's members, found as strongly connected components of size > 1."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_modules():
    """Not only between folders: no two files import each other, however indirectly."""
    found = cycles({m: set(d) for m, d in module_graph().items()})
    assert not found, f"import cycles between modules: {found}; move the shared code into a module both can import"


def test_no_import_cycle_between_parts():
    graph = import_graph()
    assert {"convert", "ops", "validate", "models", "train", "cli", "commands"} <= set(graph)
    found = cycles(graph)
    assert not found, f"import cycles between parts: {found}; move the shared code down a layer"


def test_the_layers_go_down():
    graph = import_graph()
    # the lowest layers import no part at all
    for lowest in ("text", "userfiles"):  # userfiles: every reader of a user's file opens it there
        assert graph[lowest] == set(), f"{lowest} imports {graph[lowest]}"
    for base in ("errors", "folders", "cliargs", "checkpoints", "_lazy", "venvs", "jsonfile", "process"):
        assert graph[base] <= {"errors", "text", "userfiles"}, f"{base} imports {graph[base]}"
    assert graph["ops"] <= {"errors", "_lazy", "userfiles", "process"}
    assert "train" not in graph["convert"] | graph["validate"] | graph["models"]
    assert "convert" not in graph["validate"] | graph["models"] | graph["train"]


def test_edgeport_never_imports_ultralytics_or_timm():
    """Ultralytics is AGPL-3.0: the tests may build models with it, edgeport's code never imports
    it (its decoders are written from the published output formats, models/heads.py)."""
    pattern = re.compile(r"^\s*(import|from)\s+(ultralytics|timm)\b", re.MULTILINE)
    # tests build models with them and benchmarks measure against them: both may; the package may not
    offenders = [str(p.relative_to(ROOT)) for p in _modules().values() if pattern.search(p.read_text())]
    assert offenders == []


def test_the_layers_inside_validate_go_down():
    """metrics <- board <- parity <- report <- gate: the board's code (profiles, probe, runtime)
    never imports parity's, parity never imports the report's or the gate's, and the report never
    imports the gate's (the gate reads reports; the commands that write one ask the gate first)."""
    above = {"metrics": {"board", "parity", "report", "gate"}, "board": {"parity", "report", "gate"},
             "parity": {"report", "gate"}, "report": {"gate"}}
    found = []
    for module, deps in module_graph().items():
        bits = module.split(".")
        if bits[1:2] != ["validate"] or len(bits) < 3 or bits[2] not in above:
            continue
        found += [f"{module} imports {d}" for d in deps if d.split(".")[1:2] == ["validate"] and len(d.split(".")) > 2
                  and d.split(".")[2] in above[bits[2]]]
    assert not found, found


def test_every_report_a_command_writes_is_checked_first():
    """The report never imports the gate, so the identity check (``validate.gate.check.check_written``:
    ``edgeport check R --baseline R`` passes for every report edgeport writes) is the writer's to ask:
    a module that writes reports (``render.write_reports``) imports it too."""
    def imported(path: Path) -> set[str]:
        return {a.name for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ImportFrom) for a in node.names}

    writers = {m: imported(p) for m, p in _modules().items() if not m.startswith("edgeport.validate.report")}
    writers = {m: names for m, names in writers.items() if "write_reports" in names}
    assert writers, "no module writes reports: the test looks for render.write_reports"
    assert [m for m, names in writers.items() if "check_written" not in names] == []


# a measured time ("8.8 s", "340 ms"), or a figure's change ("25.0 s -> 12.7 s", "4 before, 0 after")
MEASURED_TIME = re.compile(r"(?<![\w.])\d+(?:\.\d+)?\s?(?:s|ms|µs|min|sec|seconds?|minutes?)(?![\w.]|\.\w)")
FIGURE_CHANGE = re.compile(r"(?<![\w.])\d[\d.,]*\s*\S{0,3}\s*(?:->|→)\s*\d|\bbefore\b.*(?<![\w.])\d.*\bafter\b"
                           r"|(?<![\w.])\d.*\bbefore\b.*\bafter\b")


def comment_lines(path: Path) -> list[tuple[int, str]]:
    """Every comment and every docstring line of a file, with its line number."""
    source = path.read_text()
    found = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and ast.get_docstring(node) is not None:
            first = node.body[0]
            found += [(first.lineno + i, line) for i, line in enumerate(first.value.value.splitlines())]
    return found


def measurements(path: Path) -> list[str]:
    """The comment and docstring lines that hold a measured time or a before/after figure without
    citing docs/measured.md, where measurements live (history lives in git log)."""
    return [f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:{n}: {line.strip()}" for n, line in comment_lines(path)
            if "measured.md" not in line and (MEASURED_TIME.search(line) or FIGURE_CHANGE.search(line))]


def test_the_measurement_finder_finds_times_and_changes(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('"""Fast.\n\nYOLOv8s at 640 px: 8.8 s, done twice."""\n\n'
                      "def f(before, after):\n    \"\"\"Runs before and after the pass.\"\"\"\n"
                      "    x = 1  # parity 25.0 -> 12.7 at 320 px\n    y = 2  # 4 of 246 runs before, 0 of 150 after\n"
                      "    z = 3  # int8 -> 2, a version (no figure); a 3 x 3 window\n"
                      "    w = 4  # 340 ms (docs/measured.md)\n")
    assert sorted(line.split(": ")[0] for line in measurements(sample)) == ["sample.py:3", "sample.py:7", "sample.py:8"]


def test_comments_say_what_and_why_not_what_was_measured():
    """Measurements go to docs/measured.md, history to git log: a comment or docstring holding a
    measured time or a before/after figure fails, unless its line cites docs/measured.md."""
    found = [line for path in _modules().values() for line in measurements(path)]
    assert not found, "\n".join(found)
