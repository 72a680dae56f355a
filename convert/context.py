"""What one run starts in the background, and ends with it.

A conversion overlaps work with the graph's export: a converter's child is started before its job so
that its imports run meanwhile (``WarmChild``), and a converter begins what needs no graph (a thread
writing calibration files, a child handed its job); parity's runs start while the converter's child
works (``validate/parity/early.EarlyRuns``). Each belongs to the run that started it: the pass that
starts one registers its end with the run's ``RunContext`` (``own``), the pass that takes it over
ends it itself, and ``convert/base.run_pipeline`` closes the context however the run ends.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
from typing import Callable


class WarmChild:
    """One child process: started at once (perhaps before its job: module docstring), told its job on standard input, ended."""

    def __init__(self, argv: list[str], env: dict[str, str]):
        self.argv = tuple(argv)
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     text=True)

    def tell(self, line: str | None, *, last: bool = True) -> bool:
        """Write ``line`` (unless None) to the child, closing its input when ``last``; False where it has gone."""
        try:
            if line is not None:
                self.proc.stdin.write(line + "\n")
                self.proc.stdin.flush()
            if last:
                self.proc.stdin.close()
            return True
        except (OSError, ValueError):  # a closed pipe, or one closed here already
            return False

    def running(self) -> bool:
        return self.proc.poll() is None

    def end(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


class RunContext:
    """The background work of one run: children waiting for their job, and how to end what a pass
    began for a later one (a child, a thread, early runs); ``close`` ends it all, once."""

    def __init__(self, *, warm: bool | None = None):
        """``warm``: whether ``warm`` starts children; None: only in a one-shot process (the
        ``edgeport`` command, ``_lazy.one_shot_process``), so edgeport used as a library starts no
        process it was not asked for."""
        from edgeport._lazy import is_one_shot

        self.starts_children = is_one_shot() if warm is None else warm
        self._waiting: list[WarmChild] = []
        self._ends: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._closed = False

    def warm(self, argv: list[str], env: dict[str, str]) -> None:
        """Start ``argv`` now, to import until ``child`` hands it its job; ended with the run where nothing takes it."""
        if self.starts_children:
            child = WarmChild(argv, env)
            self.own(child.end)
            self._waiting.append(child)

    def take(self, argv: list[str], job: str, *, more: bool = False) -> WarmChild | None:
        """The child ``warm`` started as ``argv``, told ``job``; None where none waits, or it ended
        while importing. ``more``: its standard input stays open, for the lines the job asks for
        later (``WarmChild.tell``). The caller ends it; the context ends it where the caller never does."""
        for waiting in [c for c in self._waiting if c.argv == tuple(argv)][:1]:
            self._waiting.remove(waiting)
            if waiting.running() and waiting.tell(job, last=not more):
                return waiting
            waiting.end()
        return None

    def child(self, argv: list[str], env: dict[str, str], job: str, *, more: bool = False) -> WarmChild:
        """``take``, else a fresh child told ``job`` (returned even where it ends before it takes the
        job: its log says why)."""
        taken = self.take(argv, job, more=more)
        if taken is not None:
            return taken
        fresh = WarmChild(argv, env)
        self.own(fresh.end)
        fresh.tell(job, last=not more)
        return fresh

    def own(self, end: Callable[[], None]) -> None:
        """``end`` ends something a pass started (kills a child, waits for a thread, stops runs): it is
        called when the run ends, unless already closed -- then at once."""
        with self._lock:
            if not self._closed:
                self._ends.append(end)
                return
        end()

    def close(self) -> None:
        """End everything still registered, the latest first; every end is called, whatever one raised."""
        with self._lock:
            self._closed = True
            ends, self._ends, self._waiting = self._ends[::-1], [], []
        failed = None
        for end in ends:
            try:
                end()
            except BaseException as exc:  # noqa: BLE001 -- the rest still end; the first is raised after
                failed = failed or exc
        if failed is not None:
            raise failed

    def __enter__(self) -> "RunContext":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
