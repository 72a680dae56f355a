"""``_lazy.importing``: in a one-shot process, imports pause the cyclic collector and freeze what they leave."""

from __future__ import annotations

import gc
import sys
import threading

import pytest

from edgeport import _lazy


@pytest.fixture
def one_shot(monkeypatch):
    """This test process as a one-shot one; afterwards nothing stays frozen and the collector runs."""
    monkeypatch.setattr(_lazy, "_one_shot", True)
    yield
    gc.unfreeze()
    gc.enable()


def test_in_a_library_process_the_block_changes_nothing():
    frozen = gc.get_freeze_count()
    with _lazy.importing():
        assert gc.isenabled()
        garbage = [[] for _ in range(100)]
    assert gc.isenabled() and gc.get_freeze_count() == frozen
    del garbage


def test_the_collector_pauses_inside_and_what_was_made_is_frozen(one_shot):
    frozen = gc.get_freeze_count()
    with _lazy.importing():
        assert not gc.isenabled()
        made = [[] for _ in range(1000)]
    assert gc.isenabled(), "the collector runs again"
    assert gc.get_freeze_count() >= frozen + 1000, "what the block left is frozen"
    del made


def test_a_collector_paused_before_stays_paused(one_shot):
    gc.disable()
    with _lazy.importing():
        pass
    assert not gc.isenabled()


def test_the_collector_resumes_when_the_last_block_on_any_thread_ends(one_shot):
    inside, leave = threading.Event(), threading.Event()

    def other() -> None:
        with _lazy.importing():
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    inside.wait(10)
    with _lazy.importing():
        with _lazy.importing():
            assert not gc.isenabled()
    assert not gc.isenabled(), "another thread is still importing"
    leave.set()
    thread.join(10)
    assert gc.isenabled()


def test_require_imports_a_new_module_inside_the_block(one_shot, tmp_path, monkeypatch):
    (tmp_path / "ep_probe_gc.py").write_text("import gc\nPAUSED = not gc.isenabled()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "ep_probe_gc", raising=False)
    assert _lazy.require("ep_probe_gc").PAUSED
    assert gc.isenabled()


def test_the_cli_process_is_one_shot(monkeypatch):
    monkeypatch.setattr(_lazy, "_one_shot", False)
    from edgeport import cli

    monkeypatch.setattr(cli, "exit_now", lambda code: None)
    monkeypatch.setattr(sys, "argv", ["edgeport", "boards"])
    cli.entry(lambda: 0)
    assert _lazy._one_shot


def test_training_is_not_one_shot(monkeypatch):
    monkeypatch.setattr(_lazy, "_one_shot", False)
    from edgeport import cli
    from edgeport.train import launch

    def ended(code):
        raise SystemExit(code)

    monkeypatch.setattr(launch, "exit_process", ended)
    monkeypatch.setattr(sys, "argv", ["edgeport", "train"])
    with pytest.raises(SystemExit) as exc:
        cli.entry(lambda: 0)
    assert exc.value.code == 0 and not _lazy._one_shot
