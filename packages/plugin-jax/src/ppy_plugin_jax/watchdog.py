"""The worker's watchdog: a small process that ends the worker when the build is gone
or a module has run past its time.

The build enforces ``export-timeout`` and kills the worker's process group
when it ends normally. When the build is itself killed (SIGKILL, SIGTERM, an
OOM kill), nothing of that runs, and a worker stuck in the user's code would
go on for ever at full CPU, reparented to init. So the worker forks a watchdog
before it runs any user code. The watchdog is a separate process, not a thread:
user code that holds the GIL (a regular expression backtracking, a C
extension's loop) cannot stop it. It watches:

- the *lifeline*, the worker's stdin, whose write end only the build holds:
  it reads end-of-file the moment the build exits, however it exits;
- the worker's *news* pipe: one byte each time the worker starts a module,
  which starts that module's deadline, ``export-timeout`` plus ``GRACE`` (the
  build, while alive, stops the worker first and says why);
- its parent: when the worker is gone, so is the watchdog's job.

When the build is gone or the deadline passes, the watchdog kills the whole
process group with SIGKILL: the worker, the children the user's code
started, and itself.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from typing import Final

__all__ = ["GRACE", "Watchdog", "high_copy"]

#: Seconds past ``export-timeout`` before the watchdog kills a module the build
#: did not stop.
GRACE: Final = 2.0
#: How often the watchdog looks at its parent when nothing else wakes it.
_POLL: Final = 0.5


def high_copy(fd: int) -> int:
    """A close-on-exec copy of ``fd``, numbered far above what code opens by habit.

    User code that writes to (or closes) fd 3 or 9, whatever it thinks is
    there, must not reach the worker's own channels; children it starts do
    not inherit them at all.
    """
    import fcntl
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowest = max(10, min(soft, 1 << 16) // 2)
    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, lowest)


class Watchdog:
    """The worker's side: start the watchdog, then tell it when each module starts."""

    def __init__(self, lifeline: int, timeout: float) -> None:
        """Fork the watchdog. Call before any thread starts and before user code runs."""
        news_read, news_write = os.pipe()
        self._news = high_copy(news_write)
        os.close(news_write)
        worker = os.getpid()
        if os.fork() == 0:  # the watchdog
            try:
                os.close(self._news)
                _watch(lifeline, news_read, worker, timeout)
            finally:
                os._exit(0)
        os.close(news_read)

    def module_started(self) -> None:
        """Start a module's deadline."""
        os.write(self._news, b"m")


def _watch(lifeline: int, news: int, worker: int, timeout: float) -> None:
    # Hold nothing of the worker's but the two pipes: above all not the
    # protocol pipe, whose end-of-file tells the build that the worker died.
    _keep_only(lifeline, news)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    deadline: float | None = None
    while True:
        wait = _POLL if deadline is None else max(0.0, min(_POLL, deadline - time.monotonic()))
        ready, _, _ = select.select([lifeline, news], [], [], wait)
        if lifeline in ready and not os.read(lifeline, 1 << 16):
            _kill_group()  # the build is gone
        if news in ready:
            if not os.read(news, 1 << 16):
                return  # the worker closed its end: it is done or dead
            deadline = time.monotonic() + timeout + GRACE
        if os.getppid() != worker:
            return  # the worker is gone; the build reaps what it left
        if deadline is not None and time.monotonic() >= deadline:
            _kill_group()


def _keep_only(*fds: int) -> None:
    null = os.open(os.devnull, os.O_RDWR)
    for target in {0, 1, 2} - set(fds):
        os.dup2(null, target)
    keep = sorted({0, 1, 2, *fds})
    for low, high in zip(keep, [*keep[1:], os.sysconf("SC_OPEN_MAX")], strict=True):
        os.closerange(low + 1, high)


def _kill_group() -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(0, signal.SIGKILL)
    os._exit(0)
