"""Whether an artifact still describes its project's sources and configuration.

``ppy run`` asks this at every start, before it decides to build, so it reads
only what it must: the ``[tool.ppy]`` digest and the bytes of each ``.ppy``
module. It does not load plugins; ``ppy.build.staleness`` adds their
fingerprints for ``ppy build``.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from ppy.layout import find_sources

if TYPE_CHECKING:
    from ppy.artifact import Artifact
    from ppy.config import Config

__all__ = ["stale_sources"]


def stale_sources(config: Config, artifact: Artifact | None) -> str | None:
    """Why the artifact no longer matches the project's files, or None when it does."""
    if artifact is None:
        return "no artifact has been built"
    if artifact.config_digest != config.digest:
        return "the [tool.ppy] configuration changed"
    recorded = {m.path: m for m in artifact.modules}
    current = {p.relative_to(config.root).as_posix(): p for p in find_sources(config.root)}
    if set(recorded) != set(current):
        return "the set of .ppy modules changed"
    for rel, path in current.items():
        if hashlib.sha256(path.read_bytes()).hexdigest() != recorded[rel].sha256:
            return f"{rel} changed since the build"
    return None
