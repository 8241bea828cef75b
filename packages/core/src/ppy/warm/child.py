"""A forked child becomes the client's run: its stdio, environment, folder and
signals, then ``ppy run`` as a direct run does it.

What a fresh ``python`` sets up at start-up is set up again here from the
request, in the order the interpreter does it: the standard streams as
CPython's ``create_stdio`` makes them (the encoding the locale gives, line
buffering on a terminal, stderr line-buffered and ``backslashreplace``; a
stream the client had closed is closed here too, and ``None``), the working
folder (the client's own, by descriptor: it may have been deleted), the
signal dispositions python starts with (SIGINT raising KeyboardInterrupt,
SIGPIPE and SIGXFSZ ignored, and those the client's parent had ignored,
such as ``nohup``'s SIGHUP, still ignored), and the per-process randomness a
fresh interpreter draws (``random``, which reseeds itself at fork, and
numpy's global ``RandomState`` if it was imported). Then the watch on the
program's imports is installed (``ppy.warm.watch``). docs/warm-start.md
lists what stays the server's (the hash seed, the controlling terminal).
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

from ppy.warm.protocol import FORWARDED

if TYPE_CHECKING:
    from ppy.request import RunRequest
    from ppy.warm.server import Job

__all__ = ["become"]

_PR_SET_PDEATHSIG = 1


def become(job: Job) -> RunRequest:
    """Take the request as this process's own; the run it asks for. The
    server's entry hands it to ``ppy.commands.run.run``, so the program's
    frame is as near the top of the stack as under the ``ppy`` script
    (``ppy.warm.server.ENTRY``)."""
    from ppy.warm.watch import Watch

    request = job.request
    assert request.run is not None  # a run request has one (``parse_request``)
    parent = os.getppid()
    _die_with(parent)
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)  # its own group, which the server kills if the client dies
    _signals(request.ignored)
    *streams, folder = job.fds
    opened = dict(zip(request.stdio, streams, strict=True))
    for target in (0, 1, 2):
        if target in opened:
            os.dup2(opened[target], target, inheritable=True)
        else:
            with contextlib.suppress(OSError):
                os.close(target)  # closed in the client: closed here, as python has it
    os.fchdir(folder)
    for fd in job.fds:
        if fd > 2:  # what the server received never landed on 0, 1 or 2: they are its own
            os.close(fd)
    os.environ.clear()
    os.environ.update(request.env or {})
    os.umask(request.umask)
    import time

    time.tzset()
    watch = Watch(job.groups, job.libraries, job.verdict)
    _stdio(watched=watch.active)
    sys.path[:] = job.server_path
    sys.orig_argv[:] = list(request.orig_argv)
    _fresh_randomness()
    watch.install()
    return request.run


def _die_with(parent: int) -> None:
    """SIGKILL this child when the server goes: no run outlives its server."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the server went before prctl took hold
        os._exit(1)


def _signals(ignored: tuple[int, ...]) -> None:
    """The dispositions python starts with, given what the client inherited.

    Every signal a client passes on starts at its default, but for those
    whose handler is not Python's (``-X faulthandler``'s, as in a fresh
    interpreter with the same options); the faults (SIGSEGV...) keep the
    server's, which are a fresh interpreter's too."""
    for default in (*FORWARDED, signal.SIGCHLD):
        with contextlib.suppress(OSError, ValueError):
            if signal.getsignal(default) is not None:
                signal.signal(default, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for ignore in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(ignore, signal.SIG_IGN)
    for number in ignored:
        with contextlib.suppress(OSError, ValueError):
            signal.signal(number, signal.SIG_IGN)


def _stdio(*, watched: bool) -> None:
    """sys.stdin, sys.stdout and sys.stderr as CPython's ``create_stdio`` makes
    them for fds 0, 1 and 2. The encoding and the stdin/stdout error handler
    are the server's: the locale and ``PYTHONIOENCODING`` they come from are
    part of the key. ``watched``: stdin notes a read (``ppy.warm.watch.Stream``)."""
    from ppy.warm.watch import Stream, buffer_size

    server = sys.__stdout__
    encoding = server.encoding if server is not None else "utf-8"
    errors = server.errors if server is not None else "strict"
    # -u and PYTHONUNBUFFERED, which the server was started with too.
    buffered = not (server is not None and server.write_through)
    streams: list[Any] = []
    for fd, mode, name in ((0, "r", "<stdin>"), (1, "w", "<stdout>"), (2, "w", "<stderr>")):
        try:
            os.fstat(fd)
        except OSError:
            streams.append(None)
            continue
        write = mode == "w"
        raw = (Stream if watched and not write else io.FileIO)(fd, mode, closefd=False)
        raw.name = name  # as CPython names its stdio
        raw_or_buffer: Any = raw
        if buffered or not write:
            size = buffer_size(fd)
            raw_or_buffer = (io.BufferedWriter if write else io.BufferedReader)(raw, size)
        line_buffering = buffered and (raw.isatty() or fd == 2)
        text = io.TextIOWrapper(
            raw_or_buffer,
            encoding=encoding,
            errors="backslashreplace" if fd == 2 else errors,
            newline="\n",
            line_buffering=line_buffering,
            write_through=not buffered,
        )
        text.mode = mode  # type: ignore[misc]  # CPython sets it on its stdio too
        streams.append(text)
    sys.stdin, sys.stdout, sys.stderr = streams
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = streams  # type: ignore[misc]


def _fresh_randomness() -> None:
    """What a fresh interpreter seeds from the OS, seeded again.

    ``random`` reseeds itself in a forked child (``os.register_at_fork``);
    numpy's global RandomState does not.
    """
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()
