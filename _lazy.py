"""Import heavy back ends where they are used, and say what to install when one is missing."""

from __future__ import annotations

import contextlib
import gc
import importlib
import sys
import threading
from types import ModuleType
from typing import Iterable

from edgeport.errors import MissingDependencyError


def installed_versions(names) -> dict[str, str]:
    """Installed version of each distribution, without importing it."""
    import importlib.metadata as md

    out = {}
    for name in names:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = "not installed"
    return out


_one_shot = False
_quiet = threading.Lock()
_quiet_depth = 0
_gc_was_enabled = False


def one_shot_process() -> None:
    """This process runs one command and exits (the CLI's entry point says so): ``importing``
    then pauses the cyclic garbage collector while it imports and freezes what was imported."""
    global _one_shot
    _one_shot = True


@contextlib.contextmanager
def importing():
    """Import heavy modules inside this block. In a one-shot process, the cyclic garbage collector
    is paused meanwhile, and afterwards every object alive is frozen (``gc.freeze``): torch,
    onnxslim (sympy) and matplotlib leave hundreds of thousands of long-lived objects that each
    later full collection would walk again. In the demo's convert (3.12) that walking was 0.49 s
    of 4.4 s; paused and frozen, 0.02 s. Frozen objects are still freed when nothing refers to
    them; only a reference cycle among them waits for the process's exit. Elsewhere (edgeport
    used as a library, inside someone else's process) the block changes nothing. Blocks may
    nest and run on several threads: the collector resumes when the last one ends."""
    global _quiet_depth, _gc_was_enabled
    if not _one_shot:
        yield
        return
    with _quiet:
        if _quiet_depth == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _quiet_depth += 1
    try:
        yield
    finally:
        with _quiet:
            _quiet_depth -= 1
            if _quiet_depth == 0:
                gc.freeze()
                if _gc_was_enabled:
                    gc.enable()


def require(module: str, *, package: str | None = None, purpose: str = "") -> ModuleType:
    """Import ``module`` or raise a one-line error naming the pip package to install."""
    try:
        if module in sys.modules:  # loaded, or loading on another thread: import_module waits for it
            return importlib.import_module(module)
        with importing():
            return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - exercised only on broken installs
        pkg = package or module.split(".")[0]
        why = f" (needed for {purpose})" if purpose else ""
        raise MissingDependencyError(
            f"cannot import {module!r}{why}: {exc}; install it with `pip install {pkg}` "
            f"or run `make setup`"
        ) from exc


_wanted: tuple[str, ...] = ()
_loading: list[threading.Thread] = []


@contextlib.contextmanager
def preloading(modules: Iterable[str]):
    """Within the block, the first ``idle()`` imports ``modules`` on a background thread; the
    block's end waits for that thread (so nothing is left importing at exit)."""
    global _wanted
    _wanted = tuple(modules)
    try:
        yield
    finally:
        _wanted = ()
        while _loading:
            _loading.pop().join()


def idle() -> None:
    """The main thread is about to wait on a child process: meanwhile, import what ``preloading``
    asked for (once). Only then: a thread importing beside the main thread's own Python work slows
    that work (each torch op waits for the GIL) more than the import saves.

    An ``import`` of the same module elsewhere waits for this one (the module's import lock), so
    nothing is imported twice. A module that fails here is simply not loaded: its user's own
    import raises the error, with the message ``require`` gives it.
    """
    global _wanted
    if not _wanted or threading.current_thread() is not threading.main_thread():
        return
    names, _wanted = _wanted, ()

    def load() -> None:
        with importing():
            for name in names:
                try:
                    importlib.import_module(name)
                except Exception:  # noqa: BLE001 - reported by the import that needs it
                    pass

    thread = threading.Thread(target=load, name="edgeport-preload", daemon=True)
    thread.start()
    _loading.append(thread)
