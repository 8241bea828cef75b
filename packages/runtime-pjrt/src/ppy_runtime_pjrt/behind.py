"""Cache writes off the program's path: one writer thread, drained at the end.

A cold run compiles every computation once, as python's does, and then
keeps it: the executable is serialized, pickled with what jax needs to call
it, checksummed and written. That is a millisecond or two per computation
that python never spends, and a training program has dozens (every eager op
is one). Here those writes go to one daemon thread, which does them while
the program goes on, mostly while it waits in XLA's compiler, which lets go
of the GIL. What a write logs is held and shown when the queue is drained,
so that no event of ppy's is printed into the middle of a line the program
writes to stderr.

Nothing the program sees depends on a write: it already holds the
executable it compiled, and the bytes only serve a later process. So the
program's end waits for the queue (``drain``, called when the runtime
closes, or at exit where nothing closes it), and every entry is on disk
before the process exits, as it was when the writes were inline. A fork
waits for the queue first, so a child never inherits a write half done, and
starts a writer of its own if it writes. A write that fails is logged and
dropped: the next run compiles that computation again.
"""

from __future__ import annotations

import atexit
import os
import queue
import threading
from collections.abc import Callable

from ppy.runtime import Held

__all__ = ["drain", "later"]

_lock = threading.Lock()
#: The queue of this process's writer, and that writer's process id; a
#: forked child finds another pid here and starts its own.
_queue: queue.Queue[Callable[[], None]] | None = None
_owner = -1
#: What the writer logged, held until ``drain`` shows it from the thread
#: that runs the program (``ppy.log.holding``).
_said: list[Held] = []


def later(write: Callable[[], None]) -> None:
    """Run ``write`` on the writer thread, after those queued before it."""
    global _queue, _owner
    with _lock:
        if _queue is None or _owner != os.getpid():
            _queue, _owner = queue.Queue(), os.getpid()
            threading.Thread(
                target=_work, args=(_queue,), name="ppy-cache-writer", daemon=True
            ).start()
        _queue.put(write)


def drain() -> None:
    """Wait until every queued write is done (the program has ended, or is
    forking), and show what the writes logged."""
    pending = _queue
    if pending is None or _owner != os.getpid():
        return
    pending.join()
    with _lock:
        said = _said[:]
        del _said[:]
    if said:
        from ppy.runtime import show

        show(said)


def _work(pending: queue.Queue[Callable[[], None]]) -> None:
    from ppy.runtime import get_logger, holding

    held: list[Held] = []
    holding(held)
    while True:
        write = pending.get()
        try:
            write()
        except Exception as error:  # a cache entry is only a shortcut for a later run
            get_logger().debug("cache.write_failed", error=f"{type(error).__name__}: {error}")
        finally:
            with _lock:
                _said.extend(held)
            del held[:]
            pending.task_done()


os.register_at_fork(before=drain)
atexit.register(drain)  # where no runtime closes: ppy used as a library
