"""``pip install ARGS`` into the environment of the Python that runs this, through uv where uv
installs: the same packages, from where pip's own configuration says, in less than half the time.

    .venv/bin/python scripts/pip_install.py -c constraints.txt torch==2.14.1 -e ".[dev,zoo]"

Why: `make setup` writes three environments of 6 to 8 GB each (.ci/run's first stage). pip unpacks
and byte-compiles each on one core; uv unpacks once into its cache, links the files into each
environment and compiles on every core (the figures: docs/measured.md). Both resolve the same pins
(constraints*.txt), and uv reads pip's configuration from here (``pip config list``: the index,
extra indexes, find-links folders, constraints and no-index, from files or ``PIP_*`` variables,
with pip's precedence) and takes the best version across every index, as pip does.

uv (``UV`` below, pinned) is installed into the environment with pip first. Where it cannot be
(a platform without its wheel), where pip's configuration cannot be read, where uv fails (said,
then pip tries), or where ``EDGEPORT_SETUP_PIP=1`` is set, pip itself installs.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

UV = "uv==0.13.9"
# pip's setting -> uv's flag (a flag without a value where pip's value is a switch)
FLAGS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
         "constraint": "--constraint", "no-index": "--no-index"}
# where pip reads a setting for `pip install`, the first found winning: its environment variables,
# the command's own section, then the global one (each a file's sections already merged by pip)
SECTIONS = (":env:", "install", "global")


def pip_settings() -> dict[str, list[str]] | None:
    """The settings uv also takes, as pip would use them for an install (``pip config list``:
    ``global.find-links='/opt/wheels'``, ``:env:.extra-index-url='...'``; a value of several
    lines or words is several values); None where pip cannot say."""
    said = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    if said.returncode != 0:
        return None
    seen: dict[tuple[str, str], str] = {}
    for line in said.stdout.splitlines():
        key, _, value = line.partition("=")
        section, _, name = key.rpartition(".")
        if name in FLAGS and section in SECTIONS:
            try:
                seen[section, name] = ast.literal_eval(value)  # pip prints each value as Python's repr
            except (ValueError, SyntaxError):
                return None
    found = {}
    for name in FLAGS:
        value = next((seen[s, name] for s in SECTIONS if (s, name) in seen), None)
        if value is not None:
            found[name] = value.split()
    return found


def uv_command(uv: Path, settings: dict[str, list[str]], args: list[str]) -> list[str]:
    """``uv pip install`` of ``args`` into this environment (``-p``), configured by pip's settings
    alone (``--no-config``: no uv.toml of the user's), taking the best version across every index
    (pip's way), compiling as pip does (where PYTHONDONTWRITEBYTECODE is set nothing compiles later)."""
    flags = []
    for name, values in settings.items():
        if name == "no-index":
            flags += [FLAGS[name]] if values and values[0].lower() in ("1", "true", "yes", "on") else []
        else:
            flags += [part for value in values for part in (FLAGS[name], value)]
    return [str(uv), "pip", "install", "-q", "--no-config", "-p", sys.executable, "--index-strategy", "unsafe-best-match",
            "--compile-bytecode", *flags, *args]


def main(args: list[str]) -> int:
    pip = [sys.executable, "-m", "pip", "install", "-qq", *args]
    if os.environ.get("EDGEPORT_SETUP_PIP") == "1":
        return subprocess.run(pip).returncode
    uv = Path(sys.executable).with_name("uv")
    settings = pip_settings()
    if settings is None:
        print("setup: pip's configuration could not be read for uv; installing with pip", file=sys.stderr)
        return subprocess.run(pip).returncode
    if not uv.is_file() and subprocess.run([sys.executable, "-m", "pip", "install", "-qq", UV], capture_output=True).returncode != 0:
        return subprocess.run(pip).returncode  # no uv for this platform: pip
    env = os.environ.copy()
    timeout = os.environ.get("PIP_DEFAULT_TIMEOUT")  # pip's wait for an index, where set (uv's default is 30 s)
    if timeout and "UV_HTTP_TIMEOUT" not in env:
        env["UV_HTTP_TIMEOUT"] = timeout
    done = subprocess.run(uv_command(uv, settings, args), env=env).returncode
    if done != 0:
        print(f"setup: uv failed (exit {done}, its words above); installing with pip (EDGEPORT_SETUP_PIP=1 skips uv)",
              file=sys.stderr)
        return subprocess.run(pip).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
