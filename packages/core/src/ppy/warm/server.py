"""The warm server: imports jax once, then forks a child for every run.

``python -c ENTRY FOLDER NAME DIGEST ROOT IDLE [PRELOAD...]`` is started by
the first warm run of a key (``ppy.warm.client``), in a session of its own.
It imports numpy, jax, ``jax.numpy``, what ``ppy run`` and the installed
runtimes import, and the project's ``preload`` modules, noting what each
read and set of the environment (``ppy.warm.environment``), and never starts
jax's backend: no device is opened and nothing is compiled here, so there is
no backend state for a fork to share. Then it listens.

One thread, one ``selectors`` loop, like multiprocessing's forkserver. A
request is read as its bytes arrive, each connection with its own buffer
and a deadline for the whole request, so a client that sends slowly or not
at all holds only its own connection. A run request is checked, the server
forks, and the child returns out of ``Server.serve`` to the top of
``ENTRY``, becomes the run (``ppy.warm.child``) and ends through the
interpreter's own exit, so ``atexit`` handlers, the flush of stdout and its
errors happen as in a direct run. The server relays the client's signals to
the child, tells the client how the child ended (or that the child found it
could not serve the run, and the client is to run it cold), and kills the
child's process group when its client goes away. It exits after ``IDLE``
seconds without a run, on ``ppy server stop``, when its socket is taken
away, or when a file it imported from outside the installed distributions
has changed. Nothing a client sends ends it.
"""

from __future__ import annotations

import contextlib
import gc
import json
import mmap
import os
import selectors
import signal
import socket
import struct
import sys
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ppy.warm.environment import Group
from ppy.warm.place import Place, close_folder_fds
from ppy.warm.protocol import (
    FORWARDED,
    FrameReader,
    ProtocolError,
    Request,
    close_all,
    parse_request,
    send,
)

__all__ = ["ENTRY", "MAX_RUNS", "REQUEST_TIMEOUT", "Job", "Server", "imports", "main"]

#: Runs served at once; one more is answered "full" and goes cold.
MAX_RUNS: Final = 32
#: How long a client may take to send its whole request once connected.
REQUEST_TIMEOUT: Final = 5.0
#: Connections whose request has not arrived yet; more are refused at once.
_MAX_PENDING: Final = 64
#: The largest reason a child can leave for its client (``ppy.warm.watch``).
_VERDICT_SIZE: Final = 4096
_PEERCRED: Final = struct.Struct("3i")
#: Signals a terminal or a shell sends to a whole process group: passed on to
#: the run's group, so its own children get them too, as in a direct run.
_TO_GROUP: Final = frozenset(
    {int(signal.SIGINT), int(signal.SIGQUIT), int(signal.SIGWINCH), int(signal.SIGCONT)}
)


@dataclass
class Job:
    """What a forked child is to do: the request, the client's open standard
    streams and working folder (``fds``), and what the child checks as the
    program first imports what the server imported."""

    request: Request
    fds: list[int]
    server_path: list[str]
    groups: Sequence[Group]
    libraries: frozenset[str]
    verdict: mmap.mmap


@dataclass
class _Pending:
    """A connection whose request is arriving."""

    reader: FrameReader
    deadline: float


@dataclass
class _Run:
    pid: int
    reader: FrameReader
    verdict: mmap.mmap
    client_gone: bool = False


@dataclass
class Server:
    """The listening side. ``serve`` returns only in a forked child."""

    place: Place
    digest: str
    idle_timeout: float
    key_parts: dict[str, Any]
    groups: Sequence[Group] = ()
    libraries: frozenset[str] = frozenset()
    files: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    unkeyed: Mapping[str, tuple[str, str | None]] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    served: int = 0
    runs: dict[int, _Run] = field(default_factory=dict)
    pending: list[_Pending] = field(default_factory=list)
    stopping: bool = False

    def __post_init__(self) -> None:
        self._threads = _native_threads()
        # ``-c`` put "" first, this folder; a child's ppy start-up runs from the
        # client's folder, which may be the program's or deleted.
        self._path = [entry or os.getcwd() for entry in sys.path]
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
            "imported": self._imported(),
        }
        written = self.place.note.with_suffix(f".{os.getpid()}.tmp")
        written.write_text(json.dumps(note, sort_keys=True))
        os.rename(written, self.place.note)
        signal.set_wakeup_fd(self._wake_w)
        signal.signal(signal.SIGCHLD, _nothing)
        signal.signal(signal.SIGTERM, _nothing)
        self._selector.register(self._listener, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")

    def _imported(self) -> dict[str, Any]:
        """What the server's note and status say of its imports."""
        return {
            "groups": [g.to_json() for g in self.groups],
            "files": sorted(self.files),
            "unkeyed": sorted(self.unkeyed),
        }

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
            now = time.monotonic()
            if self.runs:
                last = now
            elif self.stopping and not self.pending:
                return None
            elif now - last > self.idle_timeout or not self._owns_socket():
                self._stop_listening()
                if not self.pending:
                    return None
            timeout = 1.0 if self.runs else max(0.0, min(5.0, self.idle_timeout))
            if self.pending:
                timeout = min(timeout, max(0.0, min(p.deadline for p in self.pending) - now))
            for key, _ in self._selector.select(timeout):
                if key.data == "accept":
                    self._accept()
                elif key.data == "wake":
                    self._wake()
                elif isinstance(key.data, _Pending):
                    job = self._from_pending(key.data)
                    if job is not None:
                        return job
                else:
                    self._from_client(key.data)
            self._expire()

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
                self._selector.unregister(run.reader.sock)
            cold = bytes(run.verdict[:]).split(b"\0", 1)[0]
            run.verdict.close()
            if not run.client_gone:
                reply = {"cold": cold.decode("utf-8", "replace")} if cold else {"exit": status}
                with contextlib.suppress(OSError):
                    run.reader.sock.settimeout(1.0)
                    send(run.reader.sock, reply)
            run.reader.close()

    def _from_client(self, run: _Run) -> None:
        """Signals to pass on, or the end of the client: then the run is killed."""
        gone = False
        try:
            run.reader.fill()
            while (message := run.reader.next_frame()) is not None:
                self._pass_on(run.pid, message.get("signal"))
        except (OSError, ProtocolError):
            gone = True
        if gone or run.reader.ended:
            run.client_gone = True
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(run.reader.sock)
            _kill_group(run.pid, signal.SIGKILL)

    @staticmethod
    def _pass_on(pid: int, number: object) -> None:
        if type(number) is not int or number not in FORWARDED:
            return
        if number in _TO_GROUP:
            _kill_group(pid, number)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, number)

    def _accept(self) -> None:
        """Take every waiting connection; its request is read as it arrives."""
        while True:
            try:
                conn, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # out of descriptors: the connection waits in the backlog
            conn.setblocking(False)
            try:
                _pid, uid, _gid = _PEERCRED.unpack(
                    conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
                )
            except OSError:
                conn.close()
                continue
            if uid != os.geteuid():
                _answer(conn, {"refused": f"uid {uid} is not this server's user"})
                continue
            if len(self.pending) >= _MAX_PENDING:
                _answer(conn, {"cold": "the server has too many requests arriving"})
                continue
            pending = _Pending(FrameReader(conn, max_fds=4), time.monotonic() + REQUEST_TIMEOUT)
            self.pending.append(pending)
            self._selector.register(conn, selectors.EVENT_READ, pending)

    def _expire(self) -> None:
        now = time.monotonic()
        for pending in [p for p in self.pending if p.deadline <= now]:
            self._drop(pending, f"the request did not arrive within {REQUEST_TIMEOUT:g} s")

    def _drop(self, pending: _Pending, error: str | None = None) -> None:
        self.pending.remove(pending)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(pending.reader.sock)
        close_all(pending.reader.take_fds())
        if error is None:
            pending.reader.close()
        else:
            _answer(pending.reader.sock, {"error": error})

    def _from_pending(self, pending: _Pending) -> Job | None:
        try:
            pending.reader.fill()
            message = pending.reader.next_frame()
        except (OSError, ProtocolError) as error:
            self._drop(pending, str(error))
            return None
        if message is None:
            if pending.reader.ended:
                self._drop(pending)
            return None
        self.pending.remove(pending)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(pending.reader.sock)
        fds = pending.reader.take_fds()
        conn = pending.reader.sock
        try:
            return self._handle(conn, message, fds)
        except (OSError, ProtocolError) as error:
            close_all(fds)
            _answer(conn, {"error": str(error)})
        except Exception as error:  # nothing a client sends may end the server
            close_all(fds)
            print(f"ppy warm server: a request failed: {error!r}", file=sys.stderr, flush=True)
            traceback.print_exc(file=sys.stderr)
            _answer(conn, {"error": f"the server could not handle the request: {error!r}"})
        return None

    def _handle(
        self, conn: socket.socket, message: Mapping[str, Any], fds: list[int]
    ) -> Job | None:
        conn.settimeout(1.0)  # replies are small; a client that does not read them is dropped
        request = parse_request(message)
        if request.op == "status":
            close_all(fds)
            _answer(conn, self.status())
            return None
        if request.op == "stop":
            close_all(fds)
            _answer(conn, {"stopping": os.getpid()})
            self._stop_listening()
            return None
        changed = _changed(self.files)
        if changed is not None:
            close_all(fds)
            self._stop_listening()
            _answer(conn, {"stale": f"{changed} changed since the server imported it"})
            return None
        cold = self._cold_reason(request, fds)
        if cold is not None:
            close_all(fds)
            _answer(conn, {"cold": cold})
            return None
        return self._fork(request, fds, conn)

    def _cold_reason(self, request: Request, fds: list[int]) -> str | None:
        if request.key != self.digest:
            return "the server was started for another key"
        if len(fds) != len(request.stdio) + 1:
            return (
                f"the request brought {len(fds)} file descriptors, not its "
                f"{len(request.stdio)} open standard streams and its working folder"
            )
        if self.stopping:
            return "the server is stopping"
        if len(self.runs) >= MAX_RUNS:
            return f"the server is full ({MAX_RUNS} runs at once)"
        env = request.env or {}
        for name, (group, value) in self.unkeyed.items():
            if env.get(name) != value:
                state = "unset" if env.get(name) is None else "set to another value"
                return (
                    f"{name} is {state} here, and the server's import of {group} read "
                    "it when the server started"
                )
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
        verdict = mmap.mmap(-1, _VERDICT_SIZE)  # shared with the child: why it went cold
        pid = os.fork()
        if pid == 0:
            try:
                self._become_child(conn)
                return Job(request, fds, self._path, self.groups, self.libraries, verdict)
            except BaseException:  # never a second server loop in a child
                os._exit(70)
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)  # also done by the child: whichever runs first
        close_all(fds)
        self.served += 1
        conn.setblocking(False)
        run = _Run(pid, FrameReader(conn), verdict)
        self.runs[pid] = run
        try:
            conn.settimeout(1.0)
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
            run.reader.sock.close()
            run.verdict.close()
        self.runs.clear()
        for pending in self.pending:
            pending.reader.close()
        self.pending.clear()
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
            "imported": self._imported(),
        }


_received: set[int] = set()


def _nothing(number: int, _frame: object) -> None:
    """A handler, so that the signal reaches the wakeup pipe and the loop."""
    _received.add(number)


def _answer(conn: socket.socket, message: Mapping[str, Any]) -> None:
    """Send one reply if the client takes it, and hang up."""
    with contextlib.suppress(OSError, ProtocolError):
        conn.settimeout(1.0)
        send(conn, message)
    conn.close()


def _changed(files: Mapping[str, tuple[int, int]]) -> str | None:
    from ppy.warm.key import changed_file

    return changed_file(files)


def _kill_group(pid: int, number: int) -> None:
    try:
        os.killpg(pid, number)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, number)


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
#: come from their entry points, which ``ppy.registry`` loads with stevedore),
#: and what ``import ppy`` loads when first named: a child imports none of it.
_RUN_PATH = (
    "ppy.annotations",
    "ppy.xla",
    "ppy.snapshot",
    "ppy.config",
    "ppy.artifact.read",
    "ppy.warm.child",
    "ppy.commands.run",
    "ppy.run.program",
    "ppy.run.binding",
    "ppy.build.freshness",
    "ppy.log",
    "ppy.registry",
)


def imports(preload: Sequence[str]) -> list[tuple[str, list[str]]]:
    """What the server imports, in groups (``ppy.warm.environment``): numpy,
    jax, what every run imports, and each preloaded package."""
    from importlib.metadata import entry_points

    from ppy.registry import RUNTIME_GROUP

    runtimes = [entry.module for entry in entry_points(group=RUNTIME_GROUP)]
    plan: list[tuple[str, list[str]]] = [
        ("numpy", ["numpy"]),
        ("jax", ["jax", "jax.numpy"]),
        ("ppy", [*_RUN_PATH, *runtimes]),
    ]
    for name in preload:
        plan.append((name.partition(".")[0], [name]))
    return plan


def _libraries() -> frozenset[str]:
    """The top-level packages imported here that a fresh interpreter does not
    have, outside the standard library and ppy's own packages."""
    from ppy.warm.watch import OWN_PACKAGES

    tops = {name.partition(".")[0] for name in list(sys.modules)}
    return frozenset(
        top
        for top in tops
        if top not in sys.stdlib_module_names and top not in OWN_PACKAGES and top != "__main__"
    )


def _backend_started() -> bool:
    """Whether jax has created a backend (a client, its threads, devices)."""
    bridge = sys.modules.get("jax._src.xla_bridge")
    return bool(getattr(bridge, "_backends", None))


def main(argv: list[str]) -> Job | None:
    """Start, serve; a Job in a forked child, None when the server is done."""
    from ppy.warm.environment import recorded
    from ppy.warm.key import keyed, make_key, module_files

    folder, name, digest, root, idle = argv[:5]
    preload = argv[5:]
    start = dict(os.environ)
    key = make_key(Path(root), preload, start)
    if key.digest != digest:
        print("ppy warm server: this environment gives another key; not serving", file=sys.stderr)
        return None
    groups = recorded(imports(preload), start)
    if _backend_started():
        print(
            "ppy warm server: a preloaded module started jax's backend, which a fork "
            f"cannot share; not serving (preload: {', '.join(preload)})",
            file=sys.stderr,
        )
        return None
    unkeyed = {
        variable: (group.name, value)
        for group in groups
        for variable, value in group.before.items()
        if not keyed(variable)
    }
    files = module_files(list(sys.modules.values()))
    gc.collect()
    gc.freeze()  # what every child inherits is never traversed again, nor copied
    place = Place(Path(folder), name)
    server = Server(
        place, digest, float(idle), dict(key.parts), groups, _libraries(), files, unkeyed
    )
    server.listen()
    print(f"ppy warm server {os.getpid()}: serving {name}", file=sys.stderr, flush=True)
    job = server.serve()
    if job is None:
        place.remove_start_files()
    return job


#: What the server's interpreter runs, as ``python -c ENTRY FOLDER NAME DIGEST
#: ROOT IDLE [PRELOAD...]``. In a forked child ``ppy.commands.run.run``, which
#: runs the program in its own frame, is called from this module frame with
#: the request the client parsed: the frames a program sees above its own are
#: these two, as under the ``ppy`` script (``-m`` would add runpy's two and
#: this module's), and the command line is not parsed again. ``-c`` puts ""
#: first on ``sys.path``, where the child puts the script's folder.
ENTRY = """\
import sys
from ppy.warm.server import main as serve
job = serve(sys.argv[1:])
if job is not None:
    from ppy.commands.run import run
    from ppy.warm.child import become
    sys.exit(run(become(job)))
"""
