"""Writing the artifact: canonical bytes, put in place atomically.

The same ``Artifact`` always gives the same bytes: members in sorted order,
timestamps fixed at 1980-01-01 00:00:00, fixed attributes, canonical JSON and
deflate at a fixed level. That keeps builds reproducible and lets a rebuild
that changed nothing leave the file identical. A build replaces only a file
ppy wrote, never a link, a folder or a file of the user's.
"""

from __future__ import annotations

import io
import json
import os
import secrets
import stat
import zipfile
import zlib
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

from ppy.artifact.entry import Entry
from ppy.artifact.model import (
    CHUNK,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    MANIFEST_DEPTH_LIMIT,
    MANIFEST_SIZE_LIMIT,
    NOFOLLOW,
    SHORT_NAME,
    Artifact,
    depth,
    member_name,
)
from ppy.artifact.payload import described
from ppy.decision import Decision
from ppy.errors import ArtifactError
from ppy.spec import TensorSpec

__all__ = ["dumps", "manifest", "write_artifact"]

#: 1980-01-01 is the earliest time a zip header can hold.
_EPOCH = (1980, 1, 1, 0, 0, 0)
#: A regular file, rw-r--r--, recorded as written on Unix.
_EXTERNAL_ATTR = (0o100644 & 0xFFFF) << 16
_CREATE_SYSTEM = 3
_COMPRESSLEVEL = 6


def _check_writable(entry: Entry) -> None:
    where = f"entry {entry.module}:{entry.qualname}"
    for part, value in (("module", entry.module), ("qualname", entry.qualname)):
        if not value or "/" in value or "\\" in value or ".." in value.split("."):
            raise ValueError(f"{where}: {part} {value!r} cannot name an archive folder")
    if depth(entry.metadata) > MANIFEST_DEPTH_LIMIT // 2:
        raise ValueError(f"{where}: metadata nests deeper than {MANIFEST_DEPTH_LIMIT // 2} levels")
    for short in entry.payload:
        if not SHORT_NAME.fullmatch(short):
            raise ValueError(
                f"{where}: payload name {short!r} must be one segment of letters, "
                "digits, '_', '-' and '.', not starting with '.' or '-'"
            )


def _decision_json(decision: Decision) -> dict[str, Any]:
    return {
        "module": decision.module,
        "qualname": decision.qualname,
        "location": decision.location,
        "outcome": decision.outcome.value,
        "rule": decision.rule,
        "reason": decision.reason,
        "remedy": decision.remedy,
        "plugin": decision.plugin,
        "kind": decision.kind,
        "signature": decision.signature,
        "trail": [
            {"rule": c.rule, "passed": c.passed, "detail": c.detail, "remedy": c.remedy}
            for c in decision.trail
        ],
        "output": decision.output,
    }


def _manifest_spec(spec: TensorSpec) -> dict[str, Any]:
    """A spec as format 1 writes it: dims and dtype. How a sharded export's
    leaves are laid out, and which are weakly typed, is its payload's (the
    contract's variants and mesh); the build line and the decision's
    signature show it."""
    return replace(spec, sharding=None, weak=False).to_json()


def _entry_json(entry: Entry) -> dict[str, Any]:
    return {
        "module": entry.module,
        "qualname": entry.qualname,
        "kind": entry.kind,
        "inputs": [_manifest_spec(s) for s in entry.inputs],
        "outputs": [_manifest_spec(s) for s in entry.outputs],
        "platforms": list(entry.platforms),
        "members": [
            {
                "name": short,
                "member": member_name(entry.module, entry.qualname, short),
                "size": size,
                "sha256": sha256,
            }
            for short, size, sha256 in described(entry.payload)
        ],
        "metadata": dict(entry.metadata),
        "decision": None if entry.decision is None else _decision_json(entry.decision),
    }


def manifest(artifact: Artifact) -> dict[str, Any]:
    """The manifest as a JSON-able dict, in the canonical order ``dumps`` writes.

    Modules are sorted by name and entries by (module, qualname), so the build's
    iteration order never shows in the file; decisions keep their order, which
    is the order of the functions in the sources.
    """
    keys = [e.key for e in artifact.entries]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise ValueError(f"entries appear more than once: {duplicates}")
    for entry in artifact.entries:
        _check_writable(entry)
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "written_by": dict(sorted(artifact.written_by.items())),
        "project": artifact.project,
        "config_digest": artifact.config_digest,
        "modules": [
            {
                "name": m.name,
                "path": m.path,
                "sha256": m.sha256,
                "stage_keys": dict(sorted(m.stage_keys.items())),
            }
            for m in sorted(artifact.modules, key=lambda m: m.name)
        ],
        "entries": [_entry_json(e) for e in sorted(artifact.entries, key=lambda e: e.key)],
        "decisions": [_decision_json(d) for d in artifact.decisions],
    }


def _zipinfo(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_EPOCH)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.create_system = _CREATE_SYSTEM
    info.external_attr = _EXTERNAL_ATTR
    return info


def dumps(artifact: Artifact) -> bytes:
    """The artifact as zip bytes; equal artifacts give equal bytes."""
    text = json.dumps(
        manifest(artifact), sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False
    )
    # Each payload member is read as it is written: a payload still in the
    # artifact it came from (a reused entry) is inflated one member at a time.
    payloads = {
        member_name(entry.module, entry.qualname, short): (entry.payload, short)
        for entry in artifact.entries
        for short in entry.payload
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compresslevel=_COMPRESSLEVEL) as archive:
        for name in sorted([MANIFEST, *payloads]):
            if name == MANIFEST:
                data = (text + "\n").encode("utf-8")
            else:
                payload, short = payloads[name]
                data = bytes(payload[short])
            archive.writestr(_zipinfo(name), data)
    return buffer.getvalue()


def write_artifact(artifact: Artifact, path: Path) -> None:
    """Write ``artifact`` to ``path`` atomically.

    The bytes go to a temporary file in the same folder, are flushed to disk,
    then renamed over ``path``: a reader (a concurrent ``ppy run``) sees the
    old artifact or the new one, never half of one.
    """
    data = dumps(artifact)
    path = Path(path)
    _check_replaceable(path)
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # 0o666 before the umask, as for any file the user writes; the
        # artifact is meant to be copied to and run on other machines.
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o666)
        try:
            with os.fdopen(fd, "wb") as stream:
                stream.write(data)
                stream.flush()
                os.fsync(stream.fileno())
            os.replace(temp, path)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
    except OSError as error:
        raise ArtifactError(
            f"cannot write the artifact: {error.strerror or error}",
            path=str(path),
            remedy="check that the folder exists and is writable, then run `ppy build` again",
        ) from error


#: What an artifact's manifest says of itself; a file without it is not replaced.
_FORMAT_MARK = f'"format": "{FORMAT}"'.encode()


def _check_replaceable(path: Path) -> None:
    """Refuse to write over anything at ``path`` but a file ppy wrote.

    A build replaces the previous artifact, damaged or not, but never a
    link, a folder or a file of the user's that happens to have the name:
    it must be a zip that holds a manifest saying it is a ppy artifact. The
    manifest is searched, not parsed, so a damaged one (the reason to
    rebuild) does not stop the build.
    """

    def refuse(what: str) -> NoReturn:
        raise ArtifactError(
            f"{what}; ppy replaces only an artifact it wrote",
            path=str(path),
            remedy="move it away, or set [tool.ppy] artifact to another path",
        )

    try:
        status = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return  # nothing there to lose; the write says why it cannot happen, if it cannot
    except OSError as error:
        refuse(f"cannot be examined ({error.strerror or error})")
    if stat.S_ISLNK(status.st_mode):
        refuse("is a symbolic link")
    if not stat.S_ISREG(status.st_mode):
        refuse("is not a regular file")
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            refuse("is not a regular file")
        with os.fdopen(fd, "rb") as stream, zipfile.ZipFile(stream) as archive:
            marked = _says_format(archive)
    except (KeyError, zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError):
        # KeyError: no manifest; the rest: not a zip, or a damaged one.
        refuse("is not a ppy artifact (not a zip archive with a manifest)")
    except (NotImplementedError, RuntimeError):
        refuse("is not a ppy artifact (an encrypted or unknown kind of zip)")
    if not marked:
        refuse(f"is not a ppy artifact (its manifest does not say format {FORMAT!r})")


def _says_format(archive: zipfile.ZipFile) -> bool:
    """Whether the first ``MANIFEST_SIZE_LIMIT`` bytes of the manifest name ppy's format.

    Read a chunk at a time, keeping only a mark's length of the previous
    chunk, so even a huge manifest costs a megabyte of memory.
    """
    tail = b""
    seen = 0
    with archive.open(MANIFEST) as member:
        while seen < MANIFEST_SIZE_LIMIT and (chunk := member.read(CHUNK)):
            if _FORMAT_MARK in tail + chunk:
                return True
            tail = chunk[-len(_FORMAT_MARK) :]
            seen += len(chunk)
    return False
