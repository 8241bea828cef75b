"""Where warm servers listen: a private folder, one socket and one note per key.

While a run starts a key's server it holds the key's lock file, and the
server's stderr goes to the key's log; a server that ends removes both,
unless a run is starting another server for the key (it holds the lock) or
another already listens. A lock file taken after it was removed is taken
again, so two runs never start two servers side by side.

The folder is ``$XDG_RUNTIME_DIR/ppy`` (a per-user tmpfs the system removes
at logout), else ``warm/`` in ppy's cache folder. Either way it is created
0700 and trusted only as the executable cache is: this user's, not a link,
writable by nobody else. A socket there is a door into a process that runs
code as this user, so a folder that fails the check is never used: the run
goes cold and says why.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

__all__ = ["SOCKET_PATH_MAX", "Place", "Untrusted", "warm_folder"]

#: sockaddr_un's sun_path holds 108 bytes on Linux, the last one a NUL; a
#: longer path is reached through a descriptor of its folder (``Place.address``).
SOCKET_PATH_MAX: Final = 107


class Untrusted(Exception):
    """The folder cannot be used; the message says why."""


def warm_folder() -> Path:
    """The folder for this user's servers (not created here)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        return Path(runtime) / "ppy"
    from ppy.cache import cache_dir

    return cache_dir() / "warm"


@dataclass(frozen=True)
class Place:
    """The files of the server for one key: ``NAME.sock`` and ``NAME.json``."""

    folder: Path
    name: str

    @property
    def socket(self) -> Path:
        return self.folder / f"{self.name}.sock"

    @property
    def note(self) -> Path:
        """What the server says about itself: pid, key, start time (JSON)."""
        return self.folder / f"{self.name}.json"

    @property
    def lock(self) -> Path:
        """Held while a server for this key starts, so two runs start one."""
        return self.folder / f"{self.name}.lock"

    @property
    def log(self) -> Path:
        """The server's stderr: what it says if it cannot start."""
        return self.folder / f"{self.name}.log"

    def address(self, name: str | None = None) -> str:
        """The path to bind or connect to for the socket (or for ``name`` in
        the folder): the socket's own path, or where that is longer than a
        socket address holds, the same file reached through an open
        descriptor of the folder (``/proc/self/fd/N/NAME``)."""
        name = name or self.socket.name
        path = str(self.folder / name)
        if len(os.fsencode(path)) <= SOCKET_PATH_MAX:
            return path
        return f"/proc/self/fd/{_folder_fd(self.folder)}/{name}"

    def read_note(self) -> dict[str, Any] | None:
        try:
            with open(self.note, "rb") as file:
                note = json.loads(file.read(1 << 20))
        except (OSError, ValueError):
            return None
        return note if isinstance(note, dict) else None

    def remove(self) -> None:
        """Take away what a server that is gone left behind."""
        for path in (self.socket, self.note):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    @contextlib.contextmanager
    def starting(self) -> Iterator[None]:
        """Hold the key's lock while a server for it starts (or is found)."""
        while True:
            fd = os.open(self.lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                if not _is(fd, self.lock):
                    continue  # removed by a server that ended while this run waited
                yield
                return
            finally:
                os.close(fd)

    def remove_start_files(self, *, held: bool = False) -> None:
        """Remove the lock and the log of a server that is done, unless a run
        is starting a server now (``held``: this process holds the lock) or
        one listens."""
        if held:
            self._unlink_start_files()
            return
        try:
            fd = os.open(self.lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError:
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # a run is starting the key's next server: the files are its
            if _is(fd, self.lock) and not os.path.lexists(self.socket):
                self._unlink_start_files()
        finally:
            os.close(fd)

    def _unlink_start_files(self) -> None:
        for path in (self.log, self.lock):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def _is(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        here, there = os.fstat(fd), os.lstat(path)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


_FOLDER_FDS: dict[Path, int] = {}


def _folder_fd(folder: Path) -> int:
    """A descriptor of ``folder`` kept open for this process's life."""
    fd = _FOLDER_FDS.get(folder)
    if fd is None:
        fd = os.open(folder, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        _FOLDER_FDS[folder] = fd
    return fd


def close_folder_fds() -> None:
    """Close them: a forked child's program must not find them open."""
    for fd in _FOLDER_FDS.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    _FOLDER_FDS.clear()


def prepare_folder(folder: Path) -> Path:
    """``folder``, created 0700 if missing and checked; ``Untrusted`` if it
    could let another user in."""
    try:
        os.makedirs(folder.parent, mode=0o700, exist_ok=True)
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    except OSError as error:
        raise Untrusted(f"{folder}: cannot create it ({error.strerror})") from None
    status = os.lstat(folder)
    if stat.S_ISLNK(status.st_mode):
        raise Untrusted(f"{folder} is a symbolic link")
    if not stat.S_ISDIR(status.st_mode):
        raise Untrusted(f"{folder} is not a folder")
    if status.st_uid != os.geteuid():
        raise Untrusted(f"{folder} belongs to uid {status.st_uid}, not to this user")
    if stat.S_IMODE(status.st_mode) & 0o077:
        raise Untrusted(
            f"{folder} is open to other users (mode {stat.S_IMODE(status.st_mode):04o})"
        )
    return folder


def places(folder: Path) -> Iterator[Place]:
    """Every server's place in ``folder`` that left a socket or a note."""
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return
    seen: set[str] = set()
    for name in names:
        stem, dot, suffix = name.rpartition(".")
        if dot and suffix in ("sock", "json") and stem not in seen:
            seen.add(stem)
            yield Place(folder, stem)
