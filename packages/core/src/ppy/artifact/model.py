"""The artifact's records and the facts of its format that writer and reader share.

An artifact is one zip file per project that ``ppy build`` writes
(``ppy.artifact.write``) and ``ppy run`` reads (``ppy.artifact.read``). It
holds ``manifest.json`` and the payload of every staged entry, at
``entries/<module>/<qualname>/<name>``. Nothing in it is ever executed: the
reader parses JSON and hands out bytes; a payload is interpreted only by the
runtime registered for its entry's ``kind`` (StableHLO text, jax's own export
serialization). There is no pickle and no marshalled code, and compiled
executables never go in (they are native code for one machine and live in the
per-user cache).

The format is versioned explicitly (``FORMAT_VERSION``). A reader refuses a
version it does not know, and any change to the manifest, additions included,
bumps the version; so a file that reads is a file this ppy understands
completely. docs/artifact.md is the reference for the layout and every field.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ppy.artifact.entry import Entry
from ppy.decision import Decision

__all__ = [
    "ARCHIVE_SIZE_LIMIT",
    "CHUNK",
    "FORMAT",
    "FORMAT_VERSION",
    "MANIFEST",
    "MANIFEST_DEPTH_LIMIT",
    "MANIFEST_SIZE_LIMIT",
    "MEMBER_SIZE_LIMIT",
    "NOFOLLOW",
    "READABLE_VERSIONS",
    "SHORT_NAME",
    "Artifact",
    "ModuleRecord",
    "depth",
    "member_name",
]

FORMAT = "ppy-artifact"
FORMAT_VERSION = 1
#: The versions this reader understands; anything else is refused.
READABLE_VERSIONS: tuple[int, ...] = (1,)
MANIFEST = "manifest.json"
#: The most bytes one member may hold once decompressed, and the most all of
#: them together may, checked against the archive's headers before anything
#: is decompressed: a zip bomb is refused, not inflated. An export of a
#: function with large constants is still far below them.
MEMBER_SIZE_LIMIT = 1 << 30
ARCHIVE_SIZE_LIMIT = 4 << 30
#: The most bytes the manifest may hold, and how deep its JSON may nest. A
#: project of thousands of entries needs a few megabytes and a dozen levels;
#: the bounds keep a hostile manifest from costing gigabytes of memory or
#: exhausting the parser's recursion before it is refused.
MANIFEST_SIZE_LIMIT = 64 << 20
MANIFEST_DEPTH_LIMIT = 128
#: A payload's short name: one path segment, nothing a file system reads specially.
SHORT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
#: Members are inflated this many bytes at a time.
CHUNK = 1 << 20


#: Opens the final path component itself, never what a link there points to,
#: and without waiting on a FIFO put there after the check that it was a file.
NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


@dataclass(frozen=True)
class ModuleRecord:
    """One ``.ppy`` module the artifact was built from."""

    #: Dotted module name (``pkg.model``).
    name: str
    #: Source path relative to the project root, with ``/`` separators.
    path: str
    #: sha256 of the source bytes, so staleness is one hash per module.
    sha256: str
    #: Plugin name -> the key this module's entries were staged under; an
    #: equal key on the next build means the entries are reused unchanged.
    stage_keys: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Artifact:
    """Everything one build produced, as written to and read from the file."""

    project: str
    config_digest: str
    #: Versions of the tools that wrote it: ``{"ppy": ..., "jax": ..., "jaxlib": ...}``.
    written_by: Mapping[str, str]
    modules: tuple[ModuleRecord, ...]
    entries: tuple[Entry, ...]
    #: Every candidate's decision, staged or not, so ``ppy explain`` can read
    #: the trail from the artifact without rerunning the policy.
    decisions: tuple[Decision, ...]

    @cached_property
    def _entries_by_key(self) -> dict[tuple[str, str], Entry]:
        return {e.key: e for e in self.entries}

    @cached_property
    def _modules_by_name(self) -> dict[str, ModuleRecord]:
        return {m.name: m for m in self.modules}

    def entry(self, module: str, qualname: str) -> Entry | None:
        return self._entries_by_key.get((module, qualname))

    def module(self, name: str) -> ModuleRecord | None:
        return self._modules_by_name.get(name)

    def decision(self, module: str, qualname: str) -> Decision | None:
        return next(
            (d for d in self.decisions if (d.module, d.qualname) == (module, qualname)), None
        )


def member_name(module: str, qualname: str, name: str) -> str:
    """Where an entry's payload ``name`` lives in the archive."""
    return f"entries/{module}/{qualname}/{name}"


def depth(document: Any) -> int:
    """How deep ``document`` nests, counted without recursion (so any depth is safe to ask)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            deepest = max(deepest, depth)
            if depth > MANIFEST_DEPTH_LIMIT:
                break
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)
    return deepest
