"""An entry's payload as the archive holds it: a member is inflated when it is asked for.

A member may decompress to a gigabyte (``MEMBER_SIZE_LIMIT``), from a few
kilobytes of zeros. The reader checks each member's size and sha256 while
streaming through it a chunk at a time, and keeps nothing of it; what it
hands out is an ``ArchivedPayload``, which knows each member's checked size
and digest without its bytes. So ``ppy inspect`` and ``ppy doctor`` never
hold a member, and ``ppy run`` holds only the members a runtime reads, one
buffer of the declared size each. The archive's bytes are immutable and were
checked whole, so a member inflated again is the member that was hashed.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from ppy.artifact.model import CHUNK
from ppy.errors import ArtifactError

__all__ = ["ArchivedPayload", "StoredMember", "chunks", "described", "inflate"]


@dataclass(frozen=True)
class StoredMember:
    """A payload member in its archive, with the size and sha256 the reader checked."""

    info: zipfile.ZipInfo
    size: int
    sha256: str


def chunks(archive: zipfile.ZipFile, info: zipfile.ZipInfo, path: str) -> Iterator[bytes]:
    """The member's bytes, inflated ``CHUNK`` bytes at a time.

    ``ZipFile.read`` asks zlib for everything at once and only then cuts the
    result to the header's size, so a member whose header understates it
    would be inflated whole first; reading in chunks keeps the memory to one
    chunk, ``zipfile`` stops at the header's size, and its CRC check at the
    end refuses a member that holds more. Every failure is an ``ArtifactError``
    naming the member.
    """
    try:
        with archive.open(info) as stream:
            while chunk := stream.read(CHUNK):
                yield chunk
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, OSError) as error:
        raise ArtifactError(
            f"the archive member is damaged ({_describe(error)})", path=path, member=info.filename
        ) from None
    except (NotImplementedError, RuntimeError) as error:
        # An unknown compression method or an encrypted member: not written by ppy.
        raise ArtifactError(
            f"the archive member cannot be read ({_describe(error)})",
            path=path,
            member=info.filename,
        ) from None


def inflate(archive: zipfile.ZipFile, info: zipfile.ZipInfo, path: str) -> bytes:
    """The member's bytes, in one buffer that grows to the header's size and no further.

    Joining a list of chunks would hold the member twice at the end; a
    ``BytesIO`` hands its buffer over as the result.
    """
    buffer = io.BytesIO()
    for chunk in chunks(archive, info, path):
        buffer.write(chunk)
    return buffer.getvalue()


class ArchivedPayload(Mapping[str, bytes]):
    """An entry's payload members by short name, each inflated from the archive when read.

    Nothing is cached: a runtime reads a member once, at bind, and a member
    kept here would stay for the whole run whether or not anything needs it.
    """

    def __init__(
        self, archive: zipfile.ZipFile, path: str, members: Mapping[str, StoredMember]
    ) -> None:
        self._archive = archive
        self._path = path
        self._members = dict(members)

    def __getitem__(self, short: str) -> bytes:
        return inflate(self._archive, self._members[short].info, self._path)

    def __iter__(self) -> Iterator[str]:
        return iter(self._members)

    def __len__(self) -> int:
        return len(self._members)

    def __repr__(self) -> str:
        sizes = {short: f"{m.size} bytes" for short, m in self._members.items()}
        return f"ArchivedPayload({sizes})"

    def stored(self, short: str) -> StoredMember:
        """The member's checked size and sha256, without inflating it."""
        return self._members[short]


def described(payload: Mapping[str, bytes]) -> Iterator[tuple[str, int, str]]:
    """Each member's name, size and sha256, in name order.

    A payload still in its archive answers from the reader's checks, so
    writing its manifest again (``ppy inspect --json``) inflates nothing;
    bytes in memory (a build's) are measured and hashed.
    """
    for short in sorted(payload):
        if isinstance(payload, ArchivedPayload):
            member = payload.stored(short)
            yield short, member.size, member.sha256
        else:
            data = payload[short]
            yield short, len(data), hashlib.sha256(data).hexdigest()


def _describe(error: Exception) -> str:
    return str(error) or type(error).__name__
