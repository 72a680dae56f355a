"""run_pipeline: passes in order, and later passes' imports loaded while a pass waits on its child."""

from __future__ import annotations

import sys
import threading

from edgeport._lazy import idle
from edgeport.convert.base import ConvertConfig, Pass, PassResult, State
from edgeport.convert.pipeline import run_pipeline


class Step(Pass):
    """A pass that records what was loaded when it ran; ``waits``: it then waits as on a child."""

    def __init__(self, name: str, *, waits: bool = False, imports: tuple[str, ...] = (), seen: list | None = None):
        self.name, self.waits, self.imports, self.seen = name, waits, imports, seen

    def run(self, state: State) -> PassResult:
        if self.seen is not None:
            self.seen.append((self.name, {m: m in sys.modules for m in ("ep_probe_later", "ep_probe_after")}))
        if self.waits:
            idle()
        return PassResult(state, changed=False, summary=self.name)

    def check(self, before: State, after: State) -> None:
        """Promises nothing."""


def _probe(folder, name: str) -> None:
    (folder / f"{name}.py").write_text("import threading\nLOADED_BY = threading.current_thread().name\n")


def test_while_a_pass_waits_the_imports_of_later_passes_and_the_caller_load(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("ep_probe_later", "ep_probe_after"):
        _probe(tmp_path, name)
        monkeypatch.delitem(sys.modules, name, raising=False)
    seen: list = []
    passes = [Step("first", seen=seen), Step("convert", waits=True, seen=seen),
              Step("validate", imports=("ep_probe_later", "no_such_module_anywhere"), seen=seen)]
    config = ConvertConfig(checkpoint=tmp_path / "unused.pt", work_dir=tmp_path)
    _, records = run_pipeline(config, passes, then_imports=("ep_probe_after",))
    assert [r.name for r in records] == ["first", "convert", "validate"]
    assert seen[0] == ("first", {"ep_probe_later": False, "ep_probe_after": False}), "nothing loads before a pass waits"
    assert sys.modules["ep_probe_later"].LOADED_BY == "edgeport-preload"
    assert sys.modules["ep_probe_after"].LOADED_BY == "edgeport-preload", "the caller's imports: loaded by the time it returns"
    assert "no_such_module_anywhere" not in sys.modules  # a module that cannot load is left to its user's import
    assert not [t for t in threading.enumerate() if t.name == "edgeport-preload"], "the thread is joined"


def test_without_a_pass_that_waits_nothing_loads_ahead(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    _probe(tmp_path, "ep_probe_later")
    monkeypatch.delitem(sys.modules, "ep_probe_later", raising=False)
    config = ConvertConfig(checkpoint=tmp_path / "unused.pt", work_dir=tmp_path)
    run_pipeline(config, [Step("one"), Step("two", imports=("ep_probe_later",))])
    assert "ep_probe_later" not in sys.modules
