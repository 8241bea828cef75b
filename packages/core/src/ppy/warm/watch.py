"""What a warm child checks when the program first imports what the server imported.

In a direct run, jax reads its ``JAX_*`` variables when the program's
``import jax`` runs, after whatever the program did before it: set
``os.environ["JAX_ENABLE_X64"]`` through an alias, ``os.environ |= {...}``,
a settings module it imported first. In a warm child jax was imported by
the server, so no reading of the program's source can see every way of
setting the variable. The child watches the program's imports instead:
until the program has imported numpy, jax and each preloaded package, every
``import`` statement (``builtins.__import__``) and ``importlib.import_module``
call that names a package the server imported is checked:

- the variables that package's import read (``ppy.warm.environment``) must
  still hold the values the server's import read; the ones the import set
  are then set here, as the import would have set them;
- the file the program's ``sys.path`` finds for it must be the one the
  server imported (a project module named like a preloaded one wins in a
  direct run).

Otherwise the run cannot be served faithfully. If the program has done
nothing yet that running it again would repeat (``Activity``: written a
byte anywhere, read from stdin, started a process), the child ends without
a trace and the client runs the program cold; if it has, the child stops
with one error line (``run.warm_refused``) rather than go on with values
python would not have. Imports made by ppy's own modules and by the
packages the server imported (a library's lazy imports of itself) are not
the program's and are not checked. Once every package has had its turn,
the import functions are put back: what is left costs nothing.

What the program wrote is the kernel's count of the bytes this process
wrote (``/proc/self/io``) since the program's code started, less what
Python wrote as bytecode caches and ppy as its own log lines in that time:
no Python frame is put in the way of the program's writes, where a
traceback would show it. The import functions' own frame is taken off the
traceback of an error raised while a module is imported (``_unseen``), as
python takes off its import machinery's.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib
import importlib.machinery
import io
import mmap
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any, Final

from ppy.run.program import PROGRAM_STARTS
from ppy.warm.environment import Group, differences

__all__ = [
    "ACTIVITY",
    "OWN_PACKAGES",
    "Activity",
    "Stream",
    "Watch",
    "buffer_size",
    "refuse",
    "written",
]

#: ppy's own top-level packages: their imports are ppy's, not the program's.
OWN_PACKAGES: Final = frozenset({"ppy", "ppy_plugin_jax", "ppy_plugin_xla", "ppy_runtime_pjrt"})
#: The groups whose import imports numpy; the group whose import imports jax.
_NUMPY: Final = "numpy"
_JAX: Final = "jax"
#: Audit events of a program acting outside itself in a way a second run repeats.
_ACTS: Final = frozenset(
    {
        "os.system",
        "os.fork",
        "os.forkpty",
        "os.posix_spawn",
        "os.spawn",
        "os.exec",
        "subprocess.Popen",
        "socket.connect",
        "socket.sendto",
        "socket.sendmsg",
    }
)


def written() -> int | None:
    """The bytes this process has written, by the kernel's count; None where
    the kernel does not keep it."""
    try:
        fd = os.open("/proc/self/io", os.O_RDONLY | os.O_CLOEXEC)
        try:
            data = os.read(fd, 1024)
        finally:
            os.close(fd)
        for line in data.splitlines():
            if line.startswith(b"wchar:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


@dataclass
class Activity:
    """What the run has done that running it again would repeat, while the
    watch is on: bytes written (``start``: the kernel's count when the
    program's code began; ``own``: what Python and ppy wrote since, not the
    program), stdin read, a process started or a socket used."""

    watching: bool = False
    start: int | None = None
    own: int = 0
    read: bool = False
    acted: bool = False

    def did_something(self) -> bool:
        if self.read or self.acted:
            return True
        now = written()
        if now is None or self.start is None:
            return True  # cannot tell: do not risk doing it twice
        return now - self.start - self.own > 0


ACTIVITY: Final = Activity()


class Stream(io.FileIO):
    """The file under ``sys.stdin`` of a warm child while the watch is on: a
    ``FileIO`` that notes the first time the run reads through it (what was
    read is gone from a pipe: the run cannot be run again). It is put back
    by a plain one once the watch is done, if nothing was read."""

    def readinto(self, buffer: Any, /) -> int:
        if ACTIVITY.watching:
            ACTIVITY.read = True
        return super().readinto(buffer)

    def read(self, size: int | None = -1, /) -> bytes:
        if ACTIVITY.watching:
            ACTIVITY.read = True
        return super().read(size)

    def readall(self) -> bytes:
        if ACTIVITY.watching:
            ACTIVITY.read = True
        return super().readall()


def _counted(write: Callable[..., Any]) -> Callable[..., Any]:
    """``write``, whose bytes are Python's or ppy's own, not the program's."""

    def counted(*args: Any, **kwargs: Any) -> Any:
        before = written()
        try:
            return write(*args, **kwargs)
        finally:
            after = written()
            if before is not None and after is not None:
                ACTIVITY.own += after - before

    return counted


class Watch:
    """The checks of one run, installed in the import functions until done."""

    def __init__(
        self,
        groups: Sequence[Group],
        libraries: frozenset[str],
        verdict: mmap.mmap,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._pending = {g.name: g for g in groups if g.name in libraries}
        self._libraries = libraries
        self._verdict = verdict
        self._environ = os.environ if environ is None else environ
        self._import: Callable[..., Any] = builtins.__import__
        self._import_module: Callable[..., Any] = importlib.import_module
        self._checked: set[str] = set()
        self._restore: list[tuple[Any, str, Any]] = []
        self._started = False

    @property
    def active(self) -> bool:
        """Whether there is anything to watch (the server imported numpy or jax)."""
        return bool(self._pending)

    def install(self) -> None:
        if not self._pending:
            return
        builtins.__import__ = self._watched_import
        importlib.import_module = self._watched_import_module
        import ppy.log

        bootstrap = sys.modules.get("_frozen_importlib_external")
        for owner, name in ((bootstrap, "_write_atomic"), (ppy.log, "_write")):
            original = getattr(owner, name, None)
            if original is not None:
                self._restore.append((owner, name, original))
                setattr(owner, name, _counted(original))
        ACTIVITY.start = written()  # until the program's code starts (``_audit``)
        ACTIVITY.watching = True
        sys.addaudithook(self._audit)

    def _audit(self, event: str, args: tuple[Any, ...]) -> None:
        """The program's code starting (``PROGRAM_STARTS``, raised by
        ``ppy.run.program`` once the program's module is in place); what it
        starts or connects to. An audit hook stays for the process's life: once the
        watch is done it returns at once. It never raises into what it audits."""
        if not ACTIVITY.watching:
            return
        if event in _ACTS:
            if self._started:  # not ppy's own start-up (a build's export worker)
                ACTIVITY.acted = True
        elif event == PROGRAM_STARTS and not self._started:
            self._started = True
            ACTIVITY.start, ACTIVITY.own = written(), 0

    def _uninstall(self) -> None:
        ACTIVITY.watching = False
        if builtins.__import__ == self._watched_import:
            builtins.__import__ = self._import
        if importlib.import_module == self._watched_import_module:
            importlib.import_module = self._import_module
        for owner, name, original in self._restore:
            setattr(owner, name, original)
        if not ACTIVITY.read:
            _plain_stdin()

    def _watched_import(
        self,
        name: str,
        globals: Mapping[str, Any] | None = None,  # __import__'s own names
        locals: Mapping[str, Any] | None = None,
        fromlist: Sequence[str] | None = (),
        level: int = 0,
    ) -> Any:
        if level == 0 and self._pending:
            top = name.partition(".")[0]
            if top in self._libraries:
                importer = globals if isinstance(globals, Mapping) else None
                self._reached(top, importer, sys._getframe(1))
        try:
            return self._import(name, globals, locals, fromlist, level)
        except BaseException as error:  # the module's own error, passed on as python's
            _unseen(error)
            raise

    def _watched_import_module(self, name: str, package: str | None = None) -> Any:
        if self._pending and not name.startswith("."):
            top = name.partition(".")[0]
            if top in self._libraries:
                self._reached(top, None, sys._getframe(1))
        try:
            return self._import_module(name, package)
        except BaseException as error:  # the module's own error, passed on as python's
            _unseen(error)
            raise

    def _reached(self, top: str, importer: Mapping[str, Any] | None, frame: FrameType) -> None:
        """The program imports ``top``: check the groups its import would bring."""
        scope = importer if importer is not None else frame.f_globals
        name = scope.get("__name__")
        if isinstance(name, str):
            owner = name.partition(".")[0]
            if owner in OWN_PACKAGES or owner in self._libraries:
                return  # ppy's machinery, or a lazy import inside a library
        if top == _NUMPY:
            names = [_NUMPY]
        elif top == _JAX:
            names = [_NUMPY, _JAX]
        else:
            names = list(self._pending)  # what another package's import brings is not known
        groups = [self._pending[n] for n in names if n in self._pending]
        where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
        for group in groups:
            changed = differences(group, self._environ)
            if changed:
                self._unservable(
                    f"the program set {', '.join(changed)} before its first import of "
                    f"{group.name} ({where}), and the server imported {group.name} "
                    "with another value",
                    changed,
                )
        if top not in self._checked:
            self._checked.add(top)
            shadow = _shadowed(top)
            if shadow is not None:
                self._unservable(
                    f"the program's path finds {top} at {shadow} ({where}), not the "
                    "module the server imported",
                    [],
                )
        done = {_NUMPY, _JAX} if top == _JAX else {top}
        for group in groups:
            if group.name in done:
                del self._pending[group.name]
                _set(group.wrote, self._environ)
        if not self._pending:
            self._uninstall()

    def _unservable(self, reason: str, names: Sequence[str]) -> None:
        """End this child: cold where the run did nothing yet, else refused."""
        if not ACTIVITY.did_something():
            data = reason.encode("utf-8", "backslashreplace")[: len(self._verdict) - 1]
            self._verdict[: len(data)] = data
            os._exit(0)
        refuse(reason, names)


def _unseen(error: BaseException) -> None:
    """Take the frame of the watch's import function that ``error`` passed
    through off its traceback.

    python shows no frame of its import machinery in the traceback of an
    error a module raises as it is imported; the watch's function stands in
    python's ``__import__``'s place, so its frame goes too (docs/limitations.md).
    The bare ``raise`` that follows passes the error on without adding it back.
    """
    traceback = error.__traceback__
    if traceback is not None and traceback.tb_frame is sys._getframe(1):
        error.__traceback__ = traceback.tb_next


def refuse(reason: str, names: Sequence[str]) -> None:
    """Stop the run with one error line: it wrote or read already, so it
    cannot be run again cold without doing that twice."""
    from ppy.log import get_logger

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            if stream is not None:
                stream.flush()
    set_it = f"set {' and '.join(names)} in the environment ppy runs in, or " if names else ""
    get_logger().error(
        "run.warm_refused",
        reason=f"{reason}; the run had written, read its input or started a process "
        "already, so it was stopped rather than run again cold",
        remedy=f"{set_it}run it with --no-warm",
    )
    with contextlib.suppress(Exception):
        if sys.stderr is not None:
            sys.stderr.flush()
    os._exit(1)


def _set(wrote: Mapping[str, str | None], environ: Any) -> None:
    """Set what the group's import set, as it would have set it here."""
    for name, value in wrote.items():
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = value


def _plain_stdin() -> None:
    """sys.stdin over a plain ``FileIO``, as python has it, once nothing is watched."""
    stdin = sys.stdin
    if stdin is None or stdin is not sys.__stdin__ or not isinstance(stdin, io.TextIOWrapper):
        return
    buffer = stdin.buffer
    if not isinstance(buffer, io.BufferedReader) or not isinstance(buffer.raw, Stream):
        return
    raw = io.FileIO(0, "r", closefd=False)
    raw.name = buffer.raw.name
    plain = io.TextIOWrapper(
        io.BufferedReader(raw, buffer_size(0)),
        encoding=stdin.encoding,
        errors=stdin.errors,
        newline="\n",
        line_buffering=stdin.line_buffering,
    )
    plain.mode = "r"  # type: ignore[misc]
    sys.stdin = sys.__stdin__ = plain  # type: ignore[misc]


def buffer_size(fd: int) -> int:
    """The buffer ``open`` gives a file: its block size, where it has one."""
    try:
        size = os.fstat(fd).st_blksize
    except OSError:
        return io.DEFAULT_BUFFER_SIZE
    return size if size > 1 else io.DEFAULT_BUFFER_SIZE


def _shadowed(top: str) -> str | None:
    """Where the program's ``sys.path`` finds ``top``, if not the imported module."""
    module = sys.modules.get(top)
    loaded = getattr(module, "__file__", None)
    if not isinstance(loaded, str):
        return None
    try:
        spec = importlib.machinery.PathFinder.find_spec(top, sys.path)
    except (ImportError, ValueError):
        return None
    found = spec.origin if spec is not None else None
    if found is None or os.path.realpath(found) == os.path.realpath(loaded):
        return None  # the same file, or one the path alone does not find (an editable finder)
    return found
