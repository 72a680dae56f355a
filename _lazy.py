"""Import heavy back ends where they are used, and say what to install when one is missing."""

from __future__ import annotations

import contextlib
import gc
import importlib
import sys
import threading
from types import ModuleType

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
    """This process runs one command and exits: ``importing`` then pauses and freezes the collector."""
    global _one_shot
    _one_shot = True


def is_one_shot() -> bool:
    """Whether this process runs one command and exits (what ``one_shot_process`` said)."""
    return _one_shot


@contextlib.contextmanager
def importing():
    """Import heavy modules inside this block. In a one-shot process the cyclic garbage collector is
    paused meanwhile, then every object alive is frozen (``gc.freeze``): torch, onnxslim (sympy) and
    matplotlib leave hundreds of thousands of long-lived objects each later full collection would walk
    again (the demo's figures: docs/measured.md). Frozen objects are still freed when unreferenced; only
    a cycle among them waits for exit. In a library caller's process the block changes nothing. Blocks
    may nest and run on several threads: the collector resumes when the last one ends."""
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
