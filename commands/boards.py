"""``edgeport boards [check|install|probe]``: the board profiles, a file against one, a board's runtime."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from edgeport.commands.output import fail_with_list
from edgeport.errors import BadInputError
from edgeport.text import for_terminal


def board(name: str, runner: str | None = None):
    """The board profile ``name`` (or a .toml path), with ``runner`` in place of its own [runner]."""
    from edgeport.validate.board.profiles import RunnerSpec, load_board, parse_ssh_url

    profile = load_board(name)
    if runner:
        parse_ssh_url(runner)
        base = profile.runner or RunnerSpec(url=runner)
        # the url replaces the profile's, port included (22 unless it names one)
        profile = dataclasses.replace(profile, runner=dataclasses.replace(base, url=runner, ssh_port=None))
    return profile


def list_boards() -> int:
    from edgeport.validate.board.profiles import board_names, load_board
    from edgeport.validate.board.runtime import installed_python

    for name in board_names():
        b = load_board(name)
        real = ""
        if b.install is not None:
            real = " [real runtime installed]" if installed_python(b) else f" [emulated: `edgeport boards install {b.name}`]"
        print(f"{b.name:<14} {b.runtime:<6} {b.version:<9} {','.join(b.dtypes):<14} "
              f"RAM {b.ram_bytes / 1024:>9,.0f} KiB  flash {b.flash_bytes / 1024:>9,.0f} KiB  {b.description}{real}")
    return 0


def install(name: str, *, python: str | None) -> int:
    from edgeport.validate.board.install import install as install_runtime

    install_runtime(board(name), python=python)
    return 0


def check(model: Path, *, board_name: str) -> int:
    """Every reason the board cannot run ``model``: exit 0 runnable, 1 not."""
    from edgeport.validate.board.profiles import board_verdict

    profile = board(board_name)
    if not model.is_file():
        raise BadInputError(f"model {str(model)!r} does not exist; pass a .tflite file")
    verdict = board_verdict(model, profile)
    ops = ", ".join(f"{o.name} v{o.version}" + (f" ({', '.join(o.notes)})" if o.notes else "") for o in verdict.ops)
    print(for_terminal(f"{model}: {verdict.size_bytes:,} bytes, min_runtime_version {verdict.min_runtime_version}, ops: {ops}"))
    if not verdict.reasons:
        print(for_terminal(f"runnable on {profile.name}"))
        return 0
    return fail_with_list(f"NOT runnable on {profile.name}:", verdict.reasons)


def probe(name: str, *, runner: str | None, out: Path | None) -> int:
    """Ask a board's runtime which op versions it has; print the op table or write it to a new file."""
    from edgeport.validate.board.probe import probe as run_probe
    from edgeport.validate.board.probe import table_toml
    from edgeport.validate.board.runtime import this_python, transport_for

    profile = board(name, runner)
    if profile.runtime != "tflite":
        raise BadInputError(f"{profile.name} runs {profile.runtime}; only tflite boards are probed (TFLite Micro lists its kernels)")
    if out is not None:  # before the probe runs (minutes on a board): a path it cannot write is said now
        _check_new_file(out)
    transport = transport_for(profile)
    if transport is None:
        if profile.install is not None:
            raise BadInputError(f"{profile.name}'s runtime is not installed; run `edgeport boards install {profile.name}`, "
                                f"or pass --runner ssh://user@host")
        transport = this_python()  # a board whose runtime is a current one: this environment's
    runtime, table = run_probe(transport)
    text = table_toml(profile.name, runtime, table, command=" ".join(["edgeport", "boards", "probe", name] +
                                                                    (["--runner", runner] if runner else [])))
    if out is None:
        sys.stdout.write(text)
    else:
        try:
            f = open(out, "x")  # exclusive: a file made meanwhile is not overwritten
        except FileExistsError as exc:
            raise BadInputError(f"--out {str(out)!r} was made while the probe ran; edgeport never overwrites a file: "
                                f"pass a new path") from exc
        except OSError as exc:
            raise BadInputError(f"cannot write --out {str(out)!r} ({exc.strerror or exc}); pass a path in a writable folder") from exc
        try:
            with f:
                f.write(text)
        except OSError as exc:  # a full disk: the half-written file is ours, and goes
            out.unlink(missing_ok=True)
            raise BadInputError(f"cannot write --out {str(out)!r} ({exc.strerror or exc}); free space, or pass another path") from exc
        print(for_terminal(f"{runtime['runtime']} {runtime['version']}: {sum(map(len, table.values()))} op versions of "
                           f"{len(table)} ops -> {out}"))
    return 0


def _check_new_file(out: Path) -> None:
    """``out`` can be made as a new file: it does not exist, and its folder does and is writable."""
    import os

    if out.exists() or out.is_symlink():
        raise BadInputError(f"--out {str(out)!r} exists; edgeport never overwrites a file: pass a new path")
    parent = out.parent
    if not parent.is_dir():
        raise BadInputError(f"--out {str(out)!r}: its folder {str(parent)!r} does not exist; make it first, or pass a path "
                            f"in an existing folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise BadInputError(f"--out {str(out)!r}: its folder {str(parent)!r} is not writable; pass a path in a writable folder")
