"""A project's files as one command reads them: once, and all from one read.

A command takes a ``Snapshot`` of the project first (``take``), and every
part of it reads the project from that: the configuration
(``ppy.config.config_of``), freshness, discovery, the build and the
recording. So the configuration digest an artifact records and the
recording that the build stages are the same bytes, even when
``ppy record`` replaces the file while a build reads the project, and no
file is read twice by one command.

What is read at once: the ``pyproject.toml`` (bytes and parsed TOML) and the
recorded signatures (``.ppy/signatures.json``: its bytes, their sha256, and
what kept them from being read where something did). The ``.ppy`` sources
are found and read when first asked for (``sources``, ``source``), since a
run whose configuration says nothing changed needs them only to compare
digests, and each is then kept for the rest of the command.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ppy.errors import ConfigError
from ppy.layout import find_sources

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - only where tomllib is missing
    import tomli as tomllib  # type: ignore[no-redef,import-not-found,unused-ignore]

__all__ = [
    "SIGNATURES",
    "SIGNATURES_LIMIT",
    "NotAFile",
    "Recording",
    "Snapshot",
    "read_file",
    "take",
]

#: ``ppy record``'s file (``ppy.record.format.FILE``), relative to the root.
SIGNATURES: Final = ".ppy/signatures.json"
#: The most bytes of it that are read (``ppy.record.format.MAX_BYTES``).
SIGNATURES_LIMIT: Final = 16 << 20


class NotAFile(OSError):
    """What should be a regular file is something else (a FIFO, a device, a folder)."""


def read_file(path: Path, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of the regular file at ``path``.

    It is opened without waiting: a FIFO or a device put where the file goes
    would block a plain ``open`` (and every command with it) until something
    writes to it; here it raises ``NotAFile``, as a folder does. Any other
    failure is the ``OSError`` it is (``FileNotFoundError`` where there is none).
    """
    return _read(path, limit)[0]


def _read(path: Path, limit: int) -> tuple[bytes, os.stat_result]:
    """``read_file``, with the status of the file that was read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            kind = status.st_mode
            what = "a FIFO" if stat.S_ISFIFO(kind) else "a folder" if stat.S_ISDIR(kind) else None
            raise NotAFile(0, f"it is {what or 'not a regular file'}, not a regular file")
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks), status
    finally:
        os.close(fd)


def _identity(status: os.stat_result) -> tuple[int, ...]:
    """What changes whenever a file is replaced or written: a file of the same
    identity later holds the same bytes."""
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


@dataclass(frozen=True)
class Recording:
    """The recorded signatures as read: the bytes (None where there is no
    file), or the ``OSError`` that kept them from being read."""

    path: Path
    data: bytes | None
    error: OSError | None = None
    #: The file's identity when read (``changed_since`` compares it).
    identity: tuple[int, ...] | None = None

    @property
    def digest(self) -> str | None:
        """The sha256 of the bytes; None without them (the build then says why)."""
        return None if self.data is None else hashlib.sha256(self.data).hexdigest()

    def changed_since(self) -> bool:
        """Whether the file is another now (written, replaced, made or removed)
        than the one read: only then must it be read again."""
        try:
            now: tuple[int, ...] | None = _identity(os.stat(self.path))
        except FileNotFoundError:
            now = None
        except OSError:
            return True
        return now != self.identity


def _recording(root: Path) -> Recording:
    path = root / SIGNATURES
    try:
        data, status = _read(path, SIGNATURES_LIMIT)
    except FileNotFoundError:
        return Recording(path, None)
    except OSError as error:
        return Recording(path, None, error)
    return Recording(path, data, identity=_identity(status))


@dataclass(frozen=True)
class Snapshot:
    """A project's files as this command read them (``take``)."""

    #: What the command was given, resolved: a file or a folder.
    target: Path
    #: Directory of the pyproject.toml found, or the target's directory if none.
    root: Path
    pyproject: Path | None
    #: The ``pyproject.toml`` parsed; empty where there is none.
    document: Mapping[str, Any]
    recording: Recording
    #: The sources found and read so far: filled in by ``sources`` and
    #: ``source``, once each.
    _found: dict[str, list[Path]] = field(default_factory=dict, compare=False, repr=False)
    _read: dict[Path, bytes] = field(default_factory=dict, compare=False, repr=False)

    def sources(self, unnamed: list[Path] | None = None) -> list[Path]:
        """The project's ``.ppy`` files (``ppy.layout.find_sources``), found
        once; those whose path is not UTF-8 are added to ``unnamed``."""
        if "named" not in self._found:
            left: list[Path] = []
            self._found["named"] = find_sources(self.root, left)
            self._found["unnamed"] = left
        if unnamed is not None:
            unnamed.extend(self._found["unnamed"])
        return list(self._found["named"])

    def source(self, path: Path) -> bytes:
        """The bytes of a source, read once."""
        data = self._read.get(path)
        if data is None:
            data = self._read[path] = Path(path).read_bytes()
        return data


def take(target: Path) -> Snapshot:
    """The project at or above ``target`` (a file or a folder), read.

    The nearest pyproject.toml at or above it decides the root; with none, the
    target's directory is the root. A pyproject that cannot be read or is not
    TOML is a ``ConfigError`` naming the file (and the line).
    """
    target = Path(target).resolve()
    start = target if target.is_dir() else target.parent
    pyproject = _find_pyproject(start)
    if pyproject is None:
        root, document = start, {}
    else:
        root, document = pyproject.parent, _parse(pyproject)
    return Snapshot(target, root, pyproject, document, _recording(root))


def _find_pyproject(start: Path) -> Path | None:
    for directory in (start, *start.parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


_POSITION = re.compile(r"\(at line (\d+), column (\d+)\)$")


def _parse(pyproject: Path) -> dict[str, Any]:
    path = str(pyproject)
    try:
        data = pyproject.read_bytes()
    except OSError as error:
        raise ConfigError(
            f"cannot be read: {error.strerror or error}",
            path=path,
            remedy="make the file readable, or remove it",
        ) from error
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"is not UTF-8 text (byte {error.start}); TOML files are UTF-8",
            path=path,
            remedy="save the file as UTF-8",
        ) from error
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        message = str(error)
        match = _POSITION.search(message)
        where = f"{path}:{match.group(1)}:{match.group(2)}" if match else path
        detail = _POSITION.sub("", message).strip()
        raise ConfigError(
            f"invalid TOML: {detail}",
            path=where,
            remedy="fix the TOML at that line and column (https://toml.io)",
        ) from error
