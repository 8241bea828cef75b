"""Whether the running jax may read an export that another jax wrote.

jax promises that a serialized export is read back by a jaxlib released up
to 6 months after the one that wrote it (backward compatibility) and, for
3 weeks, by an older one (forward); recent jax refuses an expired export
outright. The manifest records the jax and jaxlib that wrote each
``jax.export`` entry, so ppy decides before jax is asked:

- an export written by a newer jaxlib than the running one is refused: the
  forward window is too short to count on, and an older jax cannot know
  what a newer one changed;
- an export whose jaxlib was released more than ``BACKWARD_DAYS`` before
  the running one is outside the window;
- where a release date is unknown (a jaxlib newer than this table), what
  the table does know decides, and otherwise jax's own reader does.

``ppy run`` rebuilds an artifact holding such an entry where the jax plugin
is installed, and with ``--no-build`` leaves the entry unbound, saying why.
Core never imports jax: versions are strings, the running one read from
the installed distribution's metadata.
"""

from __future__ import annotations

import datetime
import re
from functools import cache
from importlib import metadata
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ppy.artifact.entry import Entry

__all__ = [
    "BACKWARD_DAYS",
    "RELEASES",
    "entry_outside_window",
    "installed_jaxlib",
    "outside_window",
]

#: jax's backward-compatibility window for serialized exports (6 months).
BACKWARD_DAYS = 183

#: jaxlib's release dates (first upload to PyPI), oldest first. An export
#: older than the first of these is older than any supported jax's window.
RELEASES: tuple[tuple[str, str], ...] = (
    ("0.6.0", "2025-04-17"),
    ("0.6.1", "2025-05-21"),
    ("0.6.2", "2025-06-17"),
    ("0.7.0", "2025-07-22"),
    ("0.7.1", "2025-08-20"),
    ("0.7.2", "2025-09-16"),
    ("0.8.0", "2025-10-15"),
    ("0.8.1", "2025-11-18"),
    ("0.8.2", "2025-12-18"),
    ("0.8.3", "2026-01-29"),
    ("0.9.0", "2026-01-20"),
    ("0.9.0.1", "2026-02-05"),
    ("0.9.1", "2026-03-02"),
    ("0.9.2", "2026-03-18"),
    ("0.10.0", "2026-04-16"),
    ("0.10.1", "2026-05-20"),
    ("0.10.2", "2026-06-17"),
    ("0.11.0", "2026-07-16"),
    ("0.11.1", "2026-08-17"),
    ("0.11.2", "2026-09-17"),
    ("0.12.0", "2026-10-19"),
    ("0.12.0.1", "2026-10-21"),
)

_Version = tuple[int, ...]


def _parse(version: str) -> _Version | None:
    """The release numbers of a version string (``0.12.0.1``, ``0.13.0.dev20261201``
    reads as 0.13.0); None where it has none."""
    match = re.match(r"\d+(?:\.\d+)*", version.strip())
    if match is None:
        return None
    return tuple(int(part) for part in match.group().split("."))


@cache
def _dates() -> dict[_Version, datetime.date]:
    return {_parse(v) or (): datetime.date.fromisoformat(d) for v, d in RELEASES}


def _date(version: _Version) -> datetime.date | None:
    """The release date of ``version``; for a build between releases
    (``0.12.0.dev``), that of the last release at or below it."""
    dates = _dates()
    if version in dates:
        return dates[version]
    below = [v for v in dates if v <= version]
    if not below or version > max(dates):
        return None
    return dates[max(below)]


def outside_window(exported_by: str, running: str) -> str | None:
    """Why jaxlib ``running`` must not read an export written by jaxlib
    ``exported_by``, as a sentence; None when it may, or when only jax can tell."""
    written, here = _parse(exported_by), _parse(running)
    if written is None or here is None:
        return None
    if written > here:
        return (
            f"it was exported by jaxlib {exported_by}, newer than this process's jaxlib "
            f"{running}, and jax reads exports only from its own release or older"
        )
    oldest = min(_dates())
    if written < oldest:
        return (
            f"it was exported by jaxlib {exported_by}, older than {BACKWARD_DAYS // 30} months "
            f"before jaxlib {running}: outside jax.export's backward-compatibility window"
        )
    then = _date(written)
    # An unknown running release is at least as new as the newest known.
    now = _date(here) or max(_dates().values())
    if then is None or (now - then).days <= BACKWARD_DAYS:
        return None
    return (
        f"it was exported by jaxlib {exported_by} ({then}), more than {BACKWARD_DAYS // 30} "
        f"months before jaxlib {running} ({now}): outside jax.export's backward-compatibility "
        "window"
    )


def installed_jaxlib() -> str | None:
    """The installed jaxlib's version, from its metadata (jax is not imported)."""
    try:
        return metadata.version("jaxlib")
    except metadata.PackageNotFoundError:
        return None


def entry_outside_window(entry: Entry, running: str | None) -> str | None:
    """``outside_window`` for a ``jax.export`` entry read by jaxlib ``running``
    (None: not installed); None for any other kind."""
    written = entry.metadata.get("jaxlib_version")
    if entry.kind != "jax.export" or running is None or not isinstance(written, str):
        return None
    return outside_window(written, running)
