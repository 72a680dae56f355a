"""Import heavy back ends where they are used, and say what to install when one is missing."""

from __future__ import annotations

import importlib
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


def require(module: str, *, package: str | None = None, purpose: str = "") -> ModuleType:
    """Import ``module`` or raise a one-line error naming the pip package to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - exercised only on broken installs
        pkg = package or module.split(".")[0]
        why = f" (needed for {purpose})" if purpose else ""
        raise MissingDependencyError(
            f"cannot import {module!r}{why}: {exc}; install it with `pip install {pkg}` "
            f"or run `make setup`"
        ) from exc
