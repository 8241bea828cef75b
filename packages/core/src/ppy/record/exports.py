"""Exports the recorded process made, kept beside the signatures for ``ppy build``.

``.ppy/exports/live.ppyz`` is an artifact (``ppy.artifact``: the same
format, read with the same checks) holding the entries ``ppy record``
exported from the live run (``ppy.record.live``), with the sha256 of each
module's source as it was recorded. ``.ppy/exports/live.json`` ties it to
the signatures file it was recorded with::

    {"format": "ppy-live-exports", "version": 1,
     "signatures": "sha256:...", "archive": "sha256:...",
     "notes": {"module:qualname": "in the recorded run, at 1 signature (48 calls)"}}

(``notes``: how each was exported, for the build's line.)

The build puts an entry into its artifact as it is, never exporting the
function again, and only while it is fresh: the signatures file is the one
it was recorded with (``signatures``), the archive is the one written
(``archive``), and its module's source is the one recorded. Anything else is
ignored, with the reason (``stale``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from ppy.artifact.entry import Entry
from ppy.artifact.model import Artifact, ModuleRecord
from ppy.artifact.read import ArtifactError, read_artifact
from ppy.artifact.write import write_artifact
from ppy.record.signatures import signatures_path

__all__ = ["FORMAT", "VERSION", "LiveExports", "exports_folder", "read_exports", "write_exports"]

FORMAT: Final = "ppy-live-exports"
VERSION: Final = 1
_INDEX: Final = "live.json"
_ARCHIVE: Final = "live.ppyz"
#: The index is a few lines; anything larger is not one.
_INDEX_LIMIT: Final = 4096


def exports_folder(root: Path) -> Path:
    """``.ppy/exports`` beside the signatures file."""
    return signatures_path(root).parent / "exports"


def digest(path: Path) -> str | None:
    """``sha256:HEX`` of a file's bytes, or None where there is none."""
    try:
        return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


@dataclass(frozen=True)
class LiveExports:
    """What the build may use, by (module, qualname), and what it may not, with why."""

    entries: Mapping[tuple[str, str], Entry] = field(default_factory=dict)
    stale: tuple[tuple[str, str], ...] = ()
    #: The module records they were exported with.
    modules: Mapping[str, ModuleRecord] = field(default_factory=dict)


def write_exports(
    root: Path,
    project: str,
    config_digest: str,
    entries: Sequence[Entry],
    modules: Mapping[str, tuple[str, str]],
    written_by: Mapping[str, str],
) -> None:
    """Write ``entries`` (each module's ``(path, sha256)`` in ``modules``),
    with the entries of the last recording that are still fresh and were not
    exported again, tied to the signatures file as it is now."""
    folder = exports_folder(root)
    signatures = digest(signatures_path(root))
    if signatures is None:
        return
    kept = {e.key: e for e in entries}
    try:
        previous = _read(folder, None)
    except _Stale:
        previous = None
    records = {name: ModuleRecord(name, path, sha) for name, (path, sha) in modules.items()}
    if previous is not None:
        for entry in previous.entries:
            record = previous.module(entry.module)
            now = modules.get(entry.module)
            if entry.key not in kept and record is not None and now and now[1] == record.sha256:
                kept[entry.key] = entry
    used = {key[0] for key in kept}
    artifact = Artifact(
        project=project,
        config_digest=config_digest,
        written_by=dict(written_by),
        modules=tuple(records[name] for name in sorted(used) if name in records),
        entries=tuple(kept[key] for key in sorted(kept)),
        decisions=(),
    )
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / _ARCHIVE
    write_artifact(artifact, archive)
    index = {
        "format": FORMAT,
        "version": VERSION,
        "signatures": signatures,
        "archive": digest(archive),
        "notes": {f"{e.module}:{e.qualname}": e.note for e in artifact.entries if e.note},
    }
    temporary = folder / f".{_INDEX}.tmp"
    temporary.write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    temporary.replace(folder / _INDEX)


def _read(folder: Path, signatures: str | None) -> Artifact | None:
    """The archive, where the index says it is whole (and, given
    ``signatures``, recorded with that file); else None."""
    try:
        raw = (folder / _INDEX).read_bytes()[: _INDEX_LIMIT + 1]
        index: Any = json.loads(raw) if len(raw) <= _INDEX_LIMIT else None
    except (OSError, ValueError):
        return None
    if not (isinstance(index, dict) and index.get("format") == FORMAT):
        return None
    if index.get("version") != VERSION:
        return None
    if signatures is not None and index.get("signatures") != signatures:
        raise _Stale("the signatures file changed since they were exported")
    archive = folder / _ARCHIVE
    if digest(archive) != index.get("archive"):
        raise _Stale(f"{_ARCHIVE} is not the file the recording wrote")
    try:
        artifact = read_artifact(archive)
    except ArtifactError as error:
        raise _Stale(f"{_ARCHIVE} does not read: {error}") from None
    notes = index.get("notes")
    notes = notes if isinstance(notes, dict) else {}
    entries = tuple(
        replace(e, note=note)
        if isinstance(note := notes.get(f"{e.module}:{e.qualname}"), str)
        else e
        for e in artifact.entries
    )
    return replace(artifact, entries=entries)


class _Stale(Exception):
    """Why none of the exports can be used."""


def read_exports(root: Path, sources: Mapping[str, str], signatures: str | None) -> LiveExports:
    """The recorded exports the build may use, given each module's sha256 now
    (``sources``) and the signatures file's (``signatures``, as the command
    read it: ``ppy.snapshot``, its bare hex digest); the rest, each with why not."""
    if signatures is None:
        return LiveExports()
    signatures = f"sha256:{signatures}"
    try:
        artifact = _read(exports_folder(root), signatures)
    except _Stale as why:
        previous = _read_anyway(exports_folder(root))
        names = [f"{e.module}.{e.qualname}" for e in previous.entries] if previous else ["*"]
        return LiveExports(stale=tuple((name, str(why)) for name in names))
    if artifact is None:
        return LiveExports()
    fresh: dict[tuple[str, str], Entry] = {}
    changed = []
    for entry in artifact.entries:
        record = artifact.module(entry.module)
        if record is None or sources.get(entry.module) != record.sha256:
            name = f"{entry.module}.{entry.qualname}"
            changed.append((name, "its source changed since the recording"))
            continue
        fresh[entry.key] = entry
    return LiveExports(fresh, tuple(changed), {m.name: m for m in artifact.modules})


def _read_anyway(folder: Path) -> Artifact | None:
    """The archive whatever the index says, for naming what is stale."""
    try:
        return read_artifact(folder / _ARCHIVE)
    except (ArtifactError, OSError):
        return None
