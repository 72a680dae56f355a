"""``_lazy.importing``: in a one-shot process, imports pause the cyclic collector and freeze what they leave."""

from __future__ import annotations

import gc
import json
import subprocess
import sys

import pytest

from edgeport import _lazy


def test_in_a_library_process_the_block_changes_nothing():
    frozen = gc.get_freeze_count()
    with _lazy.importing():
        assert gc.isenabled()
        garbage = [[] for _ in range(100)]
    assert gc.isenabled() and gc.get_freeze_count() == frozen
    del garbage


def test_a_missing_back_end_says_what_to_install():
    with pytest.raises(_lazy.MissingDependencyError, match="pip install no-such-package"):
        _lazy.require("no_such_module_anywhere", package="no-such-package")


PROBE = r"""
import gc, json, sys, threading
from edgeport import _lazy, cli

def command():
    seen = {}
    frozen = gc.get_freeze_count()
    with _lazy.importing():
        seen["paused_inside"] = not gc.isenabled()
        made = [[] for _ in range(1000)]
        inside, leave = threading.Event(), threading.Event()

        def other():
            with _lazy.importing():
                inside.set()
                leave.wait(10)

        thread = threading.Thread(target=other)
        thread.start()
        inside.wait(10)
    seen["paused_while_another_thread_imports"] = not gc.isenabled()
    leave.set()
    thread.join(10)
    seen["runs_again"] = gc.isenabled()
    seen["frozen"] = gc.get_freeze_count() - frozen
    open(sys.argv[1], "w").write(json.dumps(seen))
    return 0

sys.argv = ["edgeport", sys.argv[2], sys.argv[1]]
cli.entry(command)
"""


@pytest.mark.slow  # a fresh process: one-shot is what a CLI process becomes
@pytest.mark.parametrize("command, one_shot", [("boards", True), ("train", False)])
def test_a_cli_process_pauses_and_freezes_while_it_imports_and_training_does_not(tmp_path, command, one_shot):
    out = tmp_path / "seen.json"
    proc = subprocess.run([sys.executable, "-c", PROBE.replace("sys.argv[1]", repr(str(out))).replace("sys.argv[2]", repr(command))],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(out.read_text())
    if one_shot:
        assert seen == {"paused_inside": True, "paused_while_another_thread_imports": True, "runs_again": True,
                        "frozen": seen["frozen"]} and seen["frozen"] >= 1000, seen
    else:
        assert not seen["paused_inside"] and seen["runs_again"] and seen["frozen"] == 0, seen
