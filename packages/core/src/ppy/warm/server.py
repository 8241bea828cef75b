"""The warm server: imports jax once, then forks a child for every run.

``python -c ENTRY FOLDER NAME DIGEST ROOT IDLE [PRELOAD...]`` is started by
the first warm run of a key (``ppy.warm.client``), in a session of its own.
It imports jax, ``jax.numpy``, what ``ppy run`` and the
installed runtimes import, and the project's ``preload`` modules, and never
starts jax's backend: no device is opened and nothing is compiled here, so
there is no backend state for a fork to share. Then it listens.

One thread, one ``selectors`` loop, like multiprocessing's forkserver: a
run request is checked, the server forks, and the child returns out of
``Server.serve`` to the top of ``ENTRY``, becomes the run
(``ppy.warm.child``) and ends through the interpreter's own exit, so
``atexit`` handlers, the flush of stdout and its errors happen as in a
direct run. The server relays the client's signals to the child, tells the
client how the child ended, and kills the child's process group when its
client goes away. It exits after ``IDLE`` seconds without a run, on
``ppy server stop``, or when its socket is taken away.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import selectors
import signal
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ppy.warm.place import Place, close_folder_fds
from ppy.warm.protocol import FORWARDED, ProtocolError, Request, parse_request, receive, send

__all__ = ["ENTRY", "MAX_RUNS", "Job", "Server", "main"]

#: Runs served at once; one more is answered "full" and goes cold.
MAX_RUNS: Final = 32
#: How long a client may take to send its request once connected.
_REQUEST_TIMEOUT: Final = 5.0
_PEERCRED: Final = struct.Struct("3i")


@dataclass
class Job:
    """What a forked child is to do: the request, and the client's stdio."""

    request: Request
    fds: list[int]
    server_path: list[str]


@dataclass
class _Run:
    pid: int
    conn: socket.socket
    client_gone: bool = False


@dataclass
class Server:
    """The listening side. ``serve`` returns only in a forked child."""

    place: Place
    digest: str
    idle_timeout: float
    key_parts: dict[str, Any]
    started: float = field(default_factory=time.time)
    served: int = 0
    runs: dict[int, _Run] = field(default_factory=dict)
    stopping: bool = False

    def __post_init__(self) -> None:
        self._threads = _native_threads()
        self._path = list(sys.path)
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        os.set_blocking(self._wake_r, False)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._inode = 0

    # -- start and stop ---------------------------------------------------------------

    def listen(self) -> None:
        """Bind under a temporary name, then take the key's name in one rename,
        so a client never reaches a server that is not ready."""
        temporary = self.place.folder / f".{self.place.name}.{os.getpid()}.sock"
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        self._listener.bind(self.place.address(temporary.name))
        os.chmod(temporary, 0o600)
        self._listener.listen(64)
        self._listener.setblocking(False)
        os.rename(temporary, self.place.socket)
        self._inode = os.stat(self.place.socket).st_ino
        note = {
            "pid": os.getpid(),
            "digest": self.digest,
            "started": self.started,
            "idle_timeout": self.idle_timeout,
            "key": self.key_parts,
        }
        written = self.place.note.with_suffix(f".{os.getpid()}.tmp")
        written.write_text(json.dumps(note, sort_keys=True))
        os.rename(written, self.place.note)
        signal.set_wakeup_fd(self._wake_w)
        signal.signal(signal.SIGCHLD, _nothing)
        signal.signal(signal.SIGTERM, _nothing)
        self._selector.register(self._listener, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")

    def _owns_socket(self) -> bool:
        try:
            return os.stat(self.place.socket).st_ino == self._inode
        except OSError:
            return False

    def _stop_listening(self) -> None:
        if self.stopping:
            return
        self.stopping = True
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(self._listener)
        if self._owns_socket():
            self.place.remove()
        self._listener.close()

    # -- the loop ---------------------------------------------------------------------

    def serve(self) -> Job | None:
        """Serve until idle or stopped (None); in a forked child, its Job."""
        last = time.monotonic()
        while True:
            if self.runs:
                last = time.monotonic()
            elif self.stopping:
                return None
            elif time.monotonic() - last > self.idle_timeout or not self._owns_socket():
                self._stop_listening()
                return None
            timeout = 1.0 if self.runs else max(0.0, min(5.0, self.idle_timeout))
            for key, _ in self._selector.select(timeout):
                if key.data == "accept":
                    job = self._accept()
                    if job is not None:
                        return job
                elif key.data == "wake":
                    self._wake()
                else:
                    self._from_client(key.data)

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_r, 512):
                pass
        if signal.SIGTERM in _received:
            _received.discard(signal.SIGTERM)
            self._stop_listening()
        self._reap()

    def _reap(self) -> None:
        while self.runs:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            run = self.runs.pop(pid, None)
            if run is None:
                continue
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(run.conn)
            if not run.client_gone:
                with contextlib.suppress(OSError):
                    run.conn.setblocking(True)
                    send(run.conn, {"exit": status})
            run.conn.close()

    def _from_client(self, run: _Run) -> None:
        """A signal to pass on, or the end of the client: then the run is killed."""
        try:
            message, _ = receive(run.conn)
        except (OSError, ProtocolError):
            message = None
        if message is None:
            run.client_gone = True
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(run.conn)
            _kill_group(run.pid, signal.SIGKILL)
            return
        number = message.get("signal")
        if type(number) is int and number in FORWARDED:
            # Keys at a terminal signal its whole foreground group; the rest, one process.
            if number in (signal.SIGINT, signal.SIGQUIT):
                _kill_group(run.pid, number)
            else:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(run.pid, number)

    def _accept(self) -> Job | None:
        try:
            conn, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return None
        conn.setblocking(True)
        conn.settimeout(_REQUEST_TIMEOUT)
        fds: list[int] = []
        try:
            _pid, uid, _gid = _PEERCRED.unpack(
                conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
            )
            if uid != os.geteuid():
                send(conn, {"refused": f"uid {uid} is not this server's user"})
                conn.close()
                return None
            message, fds = receive(conn, fds=3)
            if message is None:
                conn.close()
                return None
            request = parse_request(message)
            if request.op == "status":
                send(conn, self.status())
                conn.close()
                return None
            if request.op == "stop":
                send(conn, {"stopping": os.getpid()})
                conn.close()
                self._stop_listening()
                return None
            cold = self._cold_reason(request, fds)
            if cold is not None:
                _close(fds)
                send(conn, {"cold": cold})
                conn.close()
                return None
            return self._fork(request, fds, conn)
        except (OSError, ProtocolError) as error:
            _close(fds)
            with contextlib.suppress(OSError):
                send(conn, {"error": str(error)})
            conn.close()
            return None

    def _cold_reason(self, request: Request, fds: list[int]) -> str | None:
        if request.key != self.digest:
            return "the server was started for another key"
        if len(fds) != 3:
            return f"the request brought {len(fds)} file descriptors, not stdin, stdout, stderr"
        if self.stopping:
            return "the server is stopping"
        if len(self.runs) >= MAX_RUNS:
            return f"the server is full ({MAX_RUNS} runs at once)"
        threads = threading.active_count()
        if threads > 1:
            return f"the server runs {threads - 1} Python threads, which a fork would break"
        native = _native_threads()
        if native > self._threads:
            return (
                f"the server holds {native - self._threads} threads started after its imports, "
                "which a fork would break"
            )
        return None

    def _fork(self, request: Request, fds: list[int], conn: socket.socket) -> Job | None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        pid = os.fork()
        if pid == 0:
            self._become_child(conn)
            return Job(request, fds, self._path)
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)  # also done by the child: whichever runs first
        _close(fds)
        self.served += 1
        run = _Run(pid, conn)
        self.runs[pid] = run
        try:
            send(conn, {"started": pid})
        except OSError:
            run.client_gone = True
            _kill_group(pid, signal.SIGKILL)
            return None
        conn.setblocking(False)
        self._selector.register(conn, selectors.EVENT_READ, run)
        return None

    def _become_child(self, conn: socket.socket) -> None:
        """Drop everything of the server's in a forked child."""
        signal.set_wakeup_fd(-1)
        for number in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(number, signal.SIG_DFL)
        self._selector.close()
        for run in self.runs.values():
            run.conn.close()
        self.runs.clear()
        self._listener.close()
        conn.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
        close_folder_fds()

    def status(self) -> dict[str, Any]:
        """What ``ppy server status`` shows."""
        return {
            "pid": os.getpid(),
            "digest": self.digest,
            "started": self.started,
            "served": self.served,
            "running": len(self.runs),
            "rss": _rss(),
            "fds": len(os.listdir("/proc/self/fd")),
            "threads": _native_threads(),
            "idle_timeout": self.idle_timeout,
            "key": self.key_parts,
        }


_received: set[int] = set()


def _nothing(number: int, _frame: object) -> None:
    """A handler, so that the signal reaches the wakeup pipe and the loop."""
    _received.add(number)


def _kill_group(pid: int, number: int) -> None:
    try:
        os.killpg(pid, number)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, number)


def _close(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _native_threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _rss() -> int:
    """Resident memory in bytes."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


#: What every ``ppy run`` imports before the program starts (the runtimes
#: come from their entry points, which ``ppy.registry`` loads with stevedore).
_RUN_PATH = (
    "jax",
    "jax.numpy",
    "ppy.cli.main",
    "ppy.run.startup",
    "ppy.run.program",
    "ppy.run.binding",
    "ppy.build.freshness",
    "ppy.log",
    "ppy.registry",
)


def _preload(preload: list[str]) -> None:
    """Import what every run imports, and ``preload``; start no backend."""
    import importlib
    from importlib.metadata import entry_points

    from ppy.registry import RUNTIME_GROUP

    runtimes = [entry.module for entry in entry_points(group=RUNTIME_GROUP)]
    for name in (*_RUN_PATH, *runtimes, *preload):
        importlib.import_module(name)


def _backend_started() -> bool:
    """Whether jax has created a backend (a client, its threads, devices)."""
    bridge = sys.modules.get("jax._src.xla_bridge")
    return bool(getattr(bridge, "_backends", None))


def main(argv: list[str]) -> Job | None:
    """Start, serve; a Job in a forked child, None when the server is done."""
    from ppy.warm.key import make_key

    folder, name, digest, root, idle = argv[:5]
    preload = argv[5:]
    key = make_key(Path(root), preload, os.environ)
    if key.digest != digest:
        print("ppy warm server: this environment gives another key; not serving", file=sys.stderr)
        return None
    _preload(preload)
    if _backend_started():
        print(
            "ppy warm server: a preloaded module started jax's backend, which a fork "
            f"cannot share; not serving (preload: {', '.join(preload)})",
            file=sys.stderr,
        )
        return None
    gc.collect()
    gc.freeze()  # what every child inherits is never traversed again, nor copied
    server = Server(Place(Path(folder), name), digest, float(idle), dict(key.parts))
    server.listen()
    print(f"ppy warm server {os.getpid()}: serving {name}", file=sys.stderr, flush=True)
    return server.serve()


#: What the server's interpreter runs, as ``python -c ENTRY FOLDER NAME DIGEST
#: ROOT IDLE [PRELOAD...]``. In a forked child ``ppy.cli.main.main``, which
#: runs the program in its own frame, is called from this module frame: the
#: frames a program sees above its own are these two, as under the ``ppy``
#: script (``-m`` would add runpy's two and this module's). ``-c`` puts ""
#: first on ``sys.path``, where the child puts the script's folder.
ENTRY = """\
import sys
from ppy.warm.server import main as serve
job = serve(sys.argv[1:])
if job is not None:
    from ppy.cli.main import main
    from ppy.warm.child import become
    sys.exit(main(become(job), warm=False))
"""
