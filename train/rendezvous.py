"""The process group's rendezvous: every rank finds the others within a bound, and a signal ends the wait.

torch's own rendezvous (``init_process_group(init_method=...)``) waits inside C++ for the whole
process-group timeout: Ctrl-C and SIGTERM go unseen until it returns, a file store in a missing
folder waits as long, and it ends in a DistStoreError that names nothing the user gave. Here no
call into the store blocks: rank 0's TCP server starts without waiting for the others, any other
rank connects only once the port answers, a file store's folder is checked first. Then every rank
counts itself in and reads the count from Python, so a signal ends the wait within a poll, and a
rank that never comes is named after ``RENDEZVOUS_TIMEOUT_S`` (exit 2). ``launch.worker_main``
makes the process group on the store this returns. ``--dist-url`` is checked where it is parsed (``dist_url``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from edgeport.errors import BadInputError, first_line
from edgeport.text import shown

SCHEMES = ("env", "tcp", "file")
PORTS = (1, 65535)
POLL_S = 0.1
# a TCP client's handshake once the port answers: the store behind it replies at once
CONNECT_S = 10.0
FORMS = "env://, tcp://HOST:PORT (port 1-65535) or file:///path/to/a/new/file"


def env_seconds(name: str, default: float) -> float:
    """A positive number of seconds from the environment variable ``name``, else ``default``."""
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    return value if 0 < value < float("inf") else default


# only a wrong launch waits this out: torchrun meets its nodes before starting workers, `--world-size N` starts all ranks at once
RENDEZVOUS_TIMEOUT_S = env_seconds("EDGEPORT_RENDEZVOUS_TIMEOUT_S", 300.0)


class RendezvousError(BadInputError):
    """The ranks did not all meet at the address: each rank that waited says so, not only rank 0."""


def url_problem(url: str) -> str | None:
    """What is wrong with ``--dist-url`` as written, or None."""
    try:
        parts = urlparse(url)
    except ValueError as exc:  # an unclosed [IPv6 address
        return f"it is not a URL ({exc})"
    if parts.scheme not in SCHEMES:
        return "it is none of env://, tcp://, file://"
    if parts.query or parts.fragment or parts.params:
        return "it takes no ?query or #fragment"
    if parts.scheme == "env":
        return None if not (parts.netloc or parts.path) else "env:// takes nothing after it (MASTER_ADDR and MASTER_PORT name the address)"
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            return f"it names the host {shown(parts.netloc)}; a file store is a path on this machine: file:///path (three slashes)"
        if not parts.path or parts.path.endswith("/"):
            return "it names no file: file:///path/to/a/new/file"
        return None
    try:
        port = parts.port
    except ValueError:
        port = -1
    if not parts.hostname:
        return "it names no host"
    if port is None:
        return "it names no port"
    if not PORTS[0] <= port <= PORTS[1]:
        return f"its port {shown(parts.netloc.rpartition(':')[2])} is not a whole number in {PORTS[0]}-{PORTS[1]}"
    if parts.path not in ("", "/"):
        return "tcp:// takes no path"
    return None


def dist_url(text: str) -> str:
    """``--dist-url``, checked where it is parsed: a port out of range is exit 2 before any process starts."""
    problem = url_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(f"{shown(text)}: {problem}; pass {FORMS}")
    return text


@dataclass(frozen=True)
class Address:
    """Where the ranks meet: a TCP store (``host``, ``port``) or a file store (``path``)."""

    url: str  # as given (--dist-url)
    host: str | None = None
    port: int | None = None
    path: Path | None = None

    @property
    def shown(self) -> str:
        if self.path is not None:
            return shown(f"file://{self.path}", 120)
        where = f"tcp://{self.host}:{self.port}"
        return shown(f"{where} (env://: MASTER_ADDR, MASTER_PORT)" if self.url.startswith("env:") else where, 120)


def address(url: str) -> Address:
    """The store ``url`` names; env:// reads MASTER_ADDR and MASTER_PORT (bad input where unset or no port)."""
    problem = url_problem(url)
    if problem:
        raise BadInputError(f"--dist-url {shown(url)}: {problem}; pass {FORMS}")
    parts = urlparse(url)
    if parts.scheme == "file":
        return Address(url, path=Path(parts.path))
    if parts.scheme == "tcp":
        return Address(url, host=parts.hostname, port=parts.port)
    host, port = os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")
    if not host or not port:
        raise BadInputError(f"--dist-url env:// but {'MASTER_ADDR' if not host else 'MASTER_PORT'} is not set; launch with "
                            f"torchrun, export MASTER_ADDR and MASTER_PORT to every rank, or pass --dist-url tcp://HOST:PORT")
    if not (port.isdigit() and PORTS[0] <= int(port) <= PORTS[1]):
        raise BadInputError(f"MASTER_PORT={shown(port)} is not a port ({PORTS[0]}-{PORTS[1]}); export a free port to every rank")
    return Address(url, host=host, port=int(port))


def check_store_folder(url: str) -> None:
    """A file store's folder exists and is a folder: torch's FileStore retries a path it cannot open
    for the whole timeout, inside C++, deaf to signals."""
    where = address(url) if url.startswith("file:") else None
    if where is None or where.path is None:
        return
    folder = where.path.parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise BadInputError(f"--dist-url {where.shown}: its folder {shown(str(folder), 120)} {what}; make it first, or name "
                            f"a new file in an existing folder")


def new_store_file(url: str) -> Path | None:
    """Before any rank starts: the file store ``url`` names (None for a TCP store), which must be a
    new file. torch writes its store into the file, and an earlier run's store (or anyone's file)
    there makes the ranks wait, inside C++, on ranks long gone; the run removes it when it ends
    (``remove_store_file``)."""
    check_store_folder(url)
    if not url.startswith("file:"):
        return None
    where = address(url)
    if where.path.exists() or where.path.is_symlink():
        raise BadInputError(f"--dist-url {where.shown}: the file exists; a file store is made new by the run and removed "
                            f"when it ends: pass a path that does not exist (edgeport never writes over a file)")
    return where.path


def remove_store_file(path: Path | None) -> None:
    """Remove the file store a run made (``new_store_file`` saw nothing there before it began):
    torch removes it only when its store object is destroyed, which a process that ends without
    the interpreter's teardown never does."""
    if path is not None and path.is_file() and not path.is_symlink():
        with contextlib.suppress(OSError):
            path.unlink()


def _wait_for_port(where: Address, deadline: float, timeout_s: float) -> None:
    """Until rank 0's store answers at ``where`` (a plain connect: torch's client logs a C++ trace
    for every try that fails), within ``deadline``."""
    while True:
        try:
            socket.create_connection((where.host, where.port), timeout=1.0).close()
            return
        except socket.gaierror as exc:
            raise RendezvousError(f"the rendezvous at {where.shown}: the host is unknown ({exc.strerror}); pass the "
                                  f"address of rank 0's machine") from exc
        except OSError:
            if time.monotonic() >= deadline:
                raise RendezvousError(f"the rendezvous at {where.shown}: rank 0's store never answered within {timeout_s:g} s; "
                                      f"start rank 0 with the same address, or check that this machine can reach it") from None
            time.sleep(POLL_S)


def _store(where: Address, rank: int, world: int, deadline: float, timeout_s: float):
    import datetime as _dt

    import torch.distributed as dist

    if where.path is not None:
        check_store_folder(where.url)
        return dist.FileStore(str(where.path), world)
    # under torchrun the agent serves the store at its MASTER_ADDR:MASTER_PORT, and every rank is a client
    agent = (os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True) and os.environ.get("MASTER_ADDR") == where.host
             and os.environ.get("MASTER_PORT") == str(where.port))
    if rank == 0 and not agent:
        try:
            return dist.TCPStore(where.host, where.port, world, True, timeout=_dt.timedelta(seconds=timeout_s),
                                 wait_for_workers=False, multi_tenant=True)
        except dist.DistNetworkError as exc:
            raise RendezvousError(f"rank 0 cannot serve the rendezvous at {where.shown}: {shown(first_line(exc), 160)}; choose a free "
                                  f"port") from exc
    _wait_for_port(where, deadline, timeout_s)
    connect = max(1.0, min(CONNECT_S, deadline - time.monotonic()))
    return dist.TCPStore(where.host, where.port, world, False, timeout=_dt.timedelta(seconds=connect))


def join(url: str, rank: int, world: int, *, timeout_s: float = RENDEZVOUS_TIMEOUT_S):
    """The store every rank of ``world`` has joined, once all have; ``RendezvousError`` naming the
    address when they have not within ``timeout_s``. A signal ends the wait within ``POLL_S``."""
    import torch.distributed as dist

    where = address(url)
    deadline = time.monotonic() + timeout_s
    # a torchrun restart meets in the same agent store: each attempt counts in its own key
    key = f"edgeport/rendezvous/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    try:
        store = _store(where, rank, world, deadline, timeout_s)
        arrived = store.add(key, 1)
        try:
            while arrived < world:
                if time.monotonic() >= deadline:
                    raise RendezvousError(f"the rendezvous at {where.shown}: {arrived} of {world} ranks arrived within "
                                          f"{timeout_s:g} s; start all {world} ranks with this address (torchrun, mpirun or "
                                          f"--world-size {world} do)")
                time.sleep(POLL_S)
                arrived = store.add(key, 0)
        except BaseException:
            # counted out again (a timeout, a signal): a file store outlives this process, and the next
            # launch at the same address counts from where it was
            with contextlib.suppress(Exception):
                store.add(key, -1)
            raise
    except dist.DistError as exc:  # the store went away meanwhile: rank 0's process ended
        raise RendezvousError(f"the rendezvous at {where.shown} failed: {shown(first_line(exc), 160)}") from exc
    return store
