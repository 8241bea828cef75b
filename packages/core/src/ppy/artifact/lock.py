"""One build at a time per artifact: an advisory lock beside the artifact file.

Two ``ppy build`` (or a build and the rebuild a ``ppy run`` starts) on one
project would otherwise both stage everything and race to rename their
artifact into place. With the lock the second waits for the first, then
reads the artifact the first wrote and reuses its entries. The lock is
``fcntl.flock`` on ``<artifact>.lock``: the kernel drops it when the holder
exits, however it exits, so a killed build never leaves a stale lock behind.
The lock file itself stays; it is empty and harmless.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from ppy.errors import PpyError, UsageError

__all__ = ["DEFAULT_TIMEOUT", "LOCK_TIMEOUT_ENV", "LockTimeout", "build_lock", "lock_path"]

#: Seconds a build waits for another build of the same project to finish.
DEFAULT_TIMEOUT: Final = 600.0
#: Overrides ``DEFAULT_TIMEOUT`` (seconds).
LOCK_TIMEOUT_ENV: Final = "PPY_LOCK_TIMEOUT"
#: The longest wait ``LOCK_TIMEOUT_ENV`` may ask for: a day (``inf`` and ``nan`` are refused).
MAX_TIMEOUT: Final = 86400.0
_POLL: Final = 0.1


class LockTimeout(PpyError):
    """Another build of the same project held the lock for longer than the timeout."""


def lock_path(artifact: Path) -> Path:
    """The lock file of ``artifact``: beside it, so one lock guards one artifact."""
    return artifact.with_name(f"{artifact.name}.lock")


def _timeout() -> float:
    raw = os.environ.get(LOCK_TIMEOUT_ENV)
    if raw is None:
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= MAX_TIMEOUT:
        raise UsageError(
            f"{LOCK_TIMEOUT_ENV}={raw!r} is not a number of seconds",
            remedy=f"set {LOCK_TIMEOUT_ENV} to a number from 0 to {MAX_TIMEOUT}, or unset it",
        )
    return value


def _open(path: Path) -> int:
    """The lock file, opened without following a link: a project that ships
    the lock as a symbolic link cannot make ppy create or lock a file elsewhere."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o666)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise PpyError(
                f"{path}: the build lock is a symbolic link; ppy does not follow one",
                remedy="remove the link; ppy creates the lock file itself",
            ) from error
        raise PpyError(
            f"{path}: cannot open the build lock: {error.strerror or error}",
            remedy="check that the artifact's folder is writable",
        ) from error
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise PpyError(
            f"{path}: the build lock is not a regular file",
            remedy="remove it; ppy creates the lock file itself",
        )
    return fd


@contextlib.contextmanager
def build_lock(artifact: Path, *, timeout: float | None = None) -> Iterator[None]:
    """Hold the build lock of ``artifact`` for the ``with`` block.

    Waits up to ``timeout`` seconds (``$PPY_LOCK_TIMEOUT``, else
    ``DEFAULT_TIMEOUT``) while another process holds it, then raises
    ``LockTimeout`` naming the lock file.
    """
    from ppy.log import get_logger

    limit = _timeout() if timeout is None else timeout
    path = lock_path(artifact)
    fd = _open(path)
    try:
        deadline = time.monotonic() + limit
        waited = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as error:
                if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
            if not waited:
                get_logger().info("build.waiting", lock=str(path), timeout=limit)
                waited = True
            if time.monotonic() >= deadline:
                raise LockTimeout(
                    f"{path}: another ppy build of this project has held the lock for {limit:g} s",
                    remedy=f"wait for it to finish, or raise {LOCK_TIMEOUT_ENV}",
                )
            time.sleep(_POLL)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
