"""``pip install ARGS`` into the environment of the Python that runs this, through uv where uv
installs: the same packages, from where pip's own configuration says, in about a fifth of the time.

    .venv/bin/python scripts/pip_install.py -c constraints.txt torch==2.14.1 -e ".[dev,zoo]"

Why: `make setup` writes three environments of 6 to 8 GB each (.ci/run's first stage). pip unpacks
and byte-compiles each on one core; uv unpacks once into its cache, links the files into each
environment and compiles on every core (measured 2026-12-03: a Python 3.13 environment in 24 s
against about 2 minutes; docs/measured.md). The packages are the same: both resolve the same pins
(constraints*.txt), and uv reads pip's configuration from here (``pip config list``: the index,
extra indexes, find-links folders and constraints, from files or ``PIP_*`` variables) and takes
the best version across every index, as pip does.

uv (``UV`` below, pinned) is installed into the environment with pip first. Where it cannot be
(a platform without its wheel) or ``EDGEPORT_SETUP_PIP=1`` is set, pip itself installs, as before.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

UV = "uv==0.13.9"
# pip's setting -> uv's flag; each may hold several values, separated by white space
FLAGS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
         "constraint": "--constraint"}


def pip_settings() -> dict[str, list[str]]:
    """pip's configuration as ``pip config list`` prints it (``global.find-links='/opt/wheels'``,
    ``:env:.extra-index-url='...'``): the values of the settings uv also takes."""
    said = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    found: dict[str, list[str]] = {}
    for line in said.splitlines():
        key, _, value = line.partition("=")
        name = key.rpartition(".")[2]
        if name in FLAGS and value:
            for item in (part for token in shlex.split(value) for part in token.split()):
                if item not in found.setdefault(name, []):
                    found[name].append(item)
    return found


def uv_flags(settings: dict[str, list[str]]) -> list[str]:
    flags = []
    for name, values in settings.items():
        for value in values:
            flags += [FLAGS[name], value]
    return flags


def main(args: list[str]) -> int:
    pip = [sys.executable, "-m", "pip", "install", "-qq", *args]
    uv = Path(sys.executable).with_name("uv")
    if os.environ.get("EDGEPORT_SETUP_PIP") != "1" and (uv.is_file() or subprocess.run(
            [sys.executable, "-m", "pip", "install", "-qq", UV], capture_output=True).returncode == 0):
        # -p: this environment; --index-strategy: the best version across every index (pip's way);
        # --compile-bytecode: pip compiles at install, and where PYTHONDONTWRITEBYTECODE is set nothing compiles later
        command = [str(uv), "pip", "install", "-q", "-p", sys.executable, "--index-strategy", "unsafe-best-match",
                   "--compile-bytecode", *uv_flags(pip_settings()), *args]
    else:
        command = pip
    return subprocess.run(command).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
