"""The per-user cache of compiled executables.

A compiled executable is native code for one machine, one jaxlib and one set
of concrete input shapes, so it never goes in an artifact: it is compiled on
first use and kept here. Each file carries a small header with the sha256 of
its body; a file that does not match (a torn write from another tool, a full
disk, bit rot) is deleted and logged as ``cache.corrupt``, and the caller
compiles again. Writes go to a temporary file in the same directory and are
moved in place with ``os.replace``, so a reader never sees half a file.

The directory is ``$PPY_CACHE_DIR``, else ``$XDG_CACHE_HOME/ppy``, else
``~/.cache/ppy``; it and every folder ppy creates on the way to it are made
0700, whatever the umask, because what it holds is loaded as code. For the
same reason nothing is trusted that another user could have written: a
directory or an entry that is not the user's, is group- or world-writable,
or is a symbolic link is ignored and logged as ``cache.untrusted`` (the
executable is compiled in memory instead), never loaded. The ``unstaged/``
folder inside trusts its parent first: when the root is refused, so is
everything under it.

Core never imports jax: the runtime supplies the facts that make up a key
(``executable_key``).
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "CACHE_ENV",
    "UNSTAGED",
    "ExecutableCache",
    "cache_dir",
    "executable_key",
    "human_size",
    "render_cache_summary",
]

CACHE_ENV = "PPY_CACHE_DIR"
#: The subdirectory for computations a program compiles that were not staged
#: (eager ops, fallbacks), kept apart so that counts of staged executables
#: stay what they say.
UNSTAGED = "unstaged"

#: First line of every cache file; the format version is in it, so a later
#: layout never misreads an older file (it reads as corrupt and is rebuilt).
_MAGIC = b"ppy-executable 1\n"
_DIGEST_LEN = 64
_SUFFIX = ".exe"
_KEY = re.compile(r"[0-9a-f]{64}")
#: What ``tempfile.mkstemp(prefix=".tmp-", suffix=_SUFFIX)`` names a file.
_TEMPORARY = re.compile(r"\.tmp-[a-z0-9_]+" + re.escape(_SUFFIX))
#: Opening an entry: never through a link, never waiting on a FIFO.
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def cache_dir() -> Path:
    """Where executables are cached for this user (not created here)."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg).expanduser() / "ppy"
    return Path.home() / ".cache" / "ppy"


def executable_key(
    entry_digest: str,
    signature: Iterable[tuple[tuple[int, ...], str]],
    *,
    platform: str,
    device_kind: str,
    versions: Iterable[tuple[str, str]],
    placement: str = "",
) -> str:
    """The cache key of one executable: sha256 over everything it depends on.

    ``entry_digest`` is the hash of the export payload, ``signature`` the
    concrete (shape, dtype name) of each input, ``versions`` pairs such as
    ``("jax", "0.10.2")``, ``placement`` the devices a sharded executable runs
    on, in order (empty for one device). The ``XLA_FLAGS`` environment variable is part of
    it too: XLA compiles differently under other flags. A change in any of
    them is a different key, so a stale executable is never found rather than
    found and rejected.
    """
    parts = [f"entry={entry_digest}", f"platform={platform}", f"device_kind={device_kind}"]
    parts += [f"in={','.join(str(d) for d in shape)}:{dtype}" for shape, dtype in signature]
    parts += [f"{name}={version}" for name, version in sorted(versions)]
    if placement:
        parts.append(f"placement={placement}")
    parts.append(f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _log() -> Any:
    from ppy.log import get_logger

    return get_logger()


#: The cache directories found unwritable in this process, warned of once.
_UNWRITABLE: set[str] = set()


class ExecutableCache:
    """Executables by key, one file each, checked on every read."""

    def __init__(self, directory: Path | None = None, *, parent: Path | None = None) -> None:
        """``parent``: the cache folder this one lives in, which must be trusted first."""
        self.directory = directory if directory is not None else cache_dir()
        self.parent = parent

    def _path(self, key: str) -> Path:
        if not _KEY.fullmatch(key):
            raise ValueError(f"cache key must be 64 hex digits, got {key!r}")
        return self.directory / f"{key}{_SUFFIX}"

    def _files(self, *, temporary: bool = False) -> Iterator[Path]:
        """The entries (and ``temporary`` files) by name: other files are not ppy's."""
        if self.directory.is_dir():
            for path in sorted(self.directory.glob(f"*{_SUFFIX}")):
                if _KEY.fullmatch(path.stem) or (temporary and _TEMPORARY.fullmatch(path.name)):
                    yield path

    def get(self, key: str) -> bytes | None:
        """The executable's bytes, or None when absent or damaged (then deleted)."""
        path = self._path(key)
        log = _log()
        why = self.untrusted()
        if why is not None:
            log.warning("cache.untrusted", path=str(self.directory), reason=why, remedy=_REMEDY)
            return None
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except FileNotFoundError:
            log.debug("cache.miss", key=key)
            return None
        except OSError as error:
            if error.errno != errno.ELOOP:
                raise
            log.warning(
                "cache.untrusted", key=key, path=str(path), reason=_LINK, remedy=_ENTRY_REMEDY
            )
            return None
        with os.fdopen(fd, "rb") as file:
            why = _untrusted(os.fstat(file.fileno()))
            if why is not None:
                log.warning(
                    "cache.untrusted", key=key, path=str(path), reason=why, remedy=_ENTRY_REMEDY
                )
                return None
            raw = file.read()
        body = _check(raw)
        if body is None:
            log.warning("cache.corrupt", key=key, path=str(path), remedy="it is compiled again")
            path.unlink(missing_ok=True)
            return None
        log.debug("cache.hit", key=key, bytes=len(body))
        return body

    def put(self, key: str, data: bytes) -> Path:
        """Store ``data`` under ``key`` atomically; the last writer wins."""
        path = self._path(key)
        if self.parent is not None and (why := _untrusted_directory(self.parent)) is not None:
            raise PermissionError(errno.EPERM, f"the cache directory {why}", str(self.parent))
        _make_private(self.directory)
        why = self.untrusted()
        if why is not None:
            raise PermissionError(errno.EPERM, f"the cache directory {why}", str(self.directory))
        digest = hashlib.sha256(data).hexdigest().encode()
        fd, temp = tempfile.mkstemp(prefix=".tmp-", suffix=_SUFFIX, dir=self.directory)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(_MAGIC + digest + b"\n" + data)
            os.replace(temp, path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise
        _log().debug("cache.write", key=key, bytes=len(data))
        return path

    def keep(self, key: str, data: bytes, **context: Any) -> bool:
        """``put``, for a runtime that can go on without the entry: a failure
        to write is the warning ``cache.unwritable``; whether it was written."""
        try:
            self.put(key, data)
        except OSError as error:
            # Once per directory and process: every later entry fails alike.
            warned = str(self.directory) in _UNWRITABLE
            _UNWRITABLE.add(str(self.directory))
            (_log().debug if warned else _log().warning)(
                "cache.unwritable",
                path=str(self.directory),
                error=str(error),
                remedy=f"set {CACHE_ENV} to a writable directory",
                **context,
            )
            return False
        return True

    def discard(self, key: str, error: BaseException, **context: Any) -> None:
        """Forget an entry that passed its checksum but does not load here
        (written by another build of jaxlib under the same version string, or
        for another device): the warning ``cache.unloadable``, and the file
        goes, so the caller's compile replaces it."""
        _log().warning(
            "cache.unloadable",
            key=key,
            error=f"{type(error).__name__}: {error}",
            remedy="it is compiled again",
            **context,
        )
        self._path(key).unlink(missing_ok=True)

    def untrusted(self) -> str | None:
        """Why the directory, or the one it lives in, cannot be trusted with
        executables, or None (absent is fine)."""
        if self.parent is not None:
            why = _untrusted_directory(self.parent)
            if why is not None:
                return f"is inside {self.parent}, which {why}"
        return _untrusted_directory(self.directory)

    def stats(self) -> tuple[int, int]:
        """(number of executables, their total size in bytes)."""
        entries = total = 0
        for path in self._files():
            try:
                status = path.lstat()
            except FileNotFoundError:
                continue
            if stat.S_ISREG(status.st_mode):
                entries += 1
                total += status.st_size
        return entries, total

    def unstaged(self) -> ExecutableCache:
        """The cache of unstaged computations beside this one."""
        return ExecutableCache(self.directory / UNSTAGED, parent=self.directory)

    def clear(self) -> int:
        """Delete every cached executable, unstaged ones included (and stray
        temporary files); how many.

        Only what ppy wrote goes: a regular file of this user's, named by a
        key (or as ppy names its temporary files), that starts with the entry
        header. Anything else in the folder (``mytool.exe``) is left.
        """
        removed = self.unstaged().clear() if self.parent is None else 0
        for path in self._files(temporary=True):
            if not _written_by_ppy(path):
                continue
            try:
                path.unlink()
            except FileNotFoundError:
                continue
            if not path.name.startswith(".tmp-"):
                removed += 1
        return removed


_LINK = "is a symbolic link"
_REMEDY = "executables are compiled in memory; make the directory the user's own, mode 0700"
_ENTRY_REMEDY = "it is ignored and compiled again; `ppy cache clear` removes it"


def _untrusted(status: os.stat_result) -> str | None:
    """Why a file or directory with ``status`` could hold someone else's code, or None."""
    if status.st_uid != os.geteuid():
        return f"belongs to uid {status.st_uid}, not to this user ({os.geteuid()})"
    if status.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by other users (mode {stat.S_IMODE(status.st_mode):04o})"
    if not (stat.S_ISREG(status.st_mode) or stat.S_ISDIR(status.st_mode)):
        return "is not a regular file"
    return None


def _untrusted_directory(directory: Path) -> str | None:
    """Why ``directory`` cannot be trusted with executables, or None (absent is fine)."""
    try:
        status = os.lstat(directory)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(status.st_mode):
        # A link the user made (to another disk, say) is theirs to make;
        # what it points to is checked like any directory.
        try:
            status = os.stat(directory)
        except FileNotFoundError:
            return None
    if not stat.S_ISDIR(status.st_mode):
        return "is not a directory"
    return _untrusted(status)


def _make_private(directory: Path) -> None:
    """Create ``directory`` and the folders missing on the way to it, each 0700.

    ``mkdir``'s mode is masked by the umask, and ``parents=True`` gives the
    parents the default mode, so each folder ppy creates is chmod-ed after.
    A folder that already exists is left as it is (it is checked, not changed).
    """
    missing = []
    for folder in (directory, *directory.parents):
        if folder.exists():
            break
        missing.append(folder)
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            continue  # made meanwhile by another run of this user's, or not: checked next
        os.chmod(folder, 0o700)


def _written_by_ppy(path: Path) -> bool:
    """Whether ``path`` is a regular file of this user's that starts as ppy's entries do
    (a temporary file may still be empty)."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as file:
        status = os.fstat(file.fileno())
        if not stat.S_ISREG(status.st_mode) or status.st_uid != os.geteuid():
            return False
        head = file.read(len(_MAGIC))
    return head == _MAGIC or (path.name.startswith(".tmp-") and _MAGIC.startswith(head))


def _check(raw: bytes) -> bytes | None:
    header = len(_MAGIC) + _DIGEST_LEN + 1
    if len(raw) < header or not raw.startswith(_MAGIC) or raw[header - 1 : header] != b"\n":
        return None
    body = raw[header:]
    if hashlib.sha256(body).hexdigest().encode() != raw[len(_MAGIC) : header - 1]:
        return None
    return body


def human_size(count: int) -> str:
    """``1.2 MiB``: a byte count as ``ppy cache`` and ``ppy doctor`` write it."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def render_cache_summary(cache: ExecutableCache | None = None) -> str:
    """What ``ppy cache`` prints: where the cache is and how much it holds."""
    cache = cache if cache is not None else ExecutableCache()
    entries, total = cache.stats()
    noun = "executable" if entries == 1 else "executables"
    unstaged, unstaged_total = cache.unstaged().stats()
    other = "computation" if unstaged == 1 else "computations"
    summary = (
        f"executable cache: {cache.directory}\n  {entries} staged {noun}, {human_size(total)}\n"
        f"  {unstaged} unstaged {other} (eager ops, fallbacks), {human_size(unstaged_total)}"
    )
    why = cache.untrusted()
    if why is not None:
        summary += f"\n  not used: it {why}, so every run compiles in memory"
    return summary
