"""Whether an artifact still describes its project: sources, configuration, tools.

``ppy build`` reuses a module's entries, and ``ppy run`` skips the build,
by the same rule: the ``[tool.ppy]`` digest and every module's bytes are as
recorded, and each plugin that staged a module computes the same stage key,
which covers its own version and the tool versions it fingerprints (for
jax: jax, jaxlib and the backend plugins). A plugin recorded in the artifact
but not installed here (a runtime-only deployment) is not asked.

``ppy run`` asks this at every start, so the cheap part comes first and the
plugins are loaded only when the sources and configuration are current.
Loading them (a plugin module, its records, its tool versions) is most of
the check's cost, and its answer depends only on the artifact's stage keys
and on what is installed, so a passed check is remembered beside the
artifact (``<artifact>.checked``) under a stamp of both: the names and
versions of the distributions on ``sys.path`` and the interpreter. While the
stamp holds, no plugin is loaded; any install, upgrade or removal changes it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ppy.config import changed_part
from ppy.snapshot import SIGNATURES, read_file

if TYPE_CHECKING:
    from ppy.artifact.model import Artifact
    from ppy.config import Config
    from ppy.plugin import Plugin

__all__ = [
    "plugin_names",
    "stage_key",
    "staleness",
    "stale_sources",
    "stale_tools",
    "tools_stamp",
    "unreadable_entries",
]


def stage_key(
    module_sha256: str, config: Config, plugin: Plugin, settings: Mapping[str, Any]
) -> str:
    """What a module's staged entries depend on; equal keys mean reuse."""
    parts = (
        plugin.name,
        plugin.version,
        plugin.fingerprint(settings),
        config.digest,
        module_sha256,
    )
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def stale_sources(config: Config, artifact: Artifact | None) -> str | None:
    """Why the artifact no longer matches the project's files, or None when it
    does; the files as the configuration's snapshot read them (``ppy.snapshot``)."""
    if artifact is None:
        return "no artifact has been built"
    if artifact.config_digest != config.digest:
        return _configuration(changed_part(artifact.config_digest, config.digest))
    files = config.files()
    recorded = {m.path: m for m in artifact.modules}
    current = {p.relative_to(config.root).as_posix(): p for p in files.sources()}
    if set(recorded) != set(current):
        return "the set of .ppy modules changed"
    for rel, path in current.items():
        if hashlib.sha256(files.source(path)).hexdigest() != recorded[rel].sha256:
            return f"{rel} changed since the build"
    return None


def _configuration(part: str) -> str:
    """Why the configuration digest differs, in the words of what changed."""
    return {
        "table": "the [tool.ppy] configuration changed",
        "recording": f"the recorded signatures ({SIGNATURES}) changed",
        "both": f"the [tool.ppy] configuration and the recorded signatures ({SIGNATURES}) changed",
    }[part]


def stale_tools(config: Config, artifact: Artifact, plugins: Mapping[str, Plugin]) -> str | None:
    """Which installed plugin would stage a module differently now, or None.

    ``plugins`` are the installed plugins by name; settings are validated
    here, so a bad ``[tool.ppy.plugins.NAME]`` table raises ``ConfigError``.
    """
    settings: dict[str, Mapping[str, Any]] = {}
    for record in artifact.modules:
        for name, key in sorted(record.stage_keys.items()):
            plugin = plugins.get(name)
            if plugin is None:
                continue
            if name not in settings:
                table = config.plugins.get(name, {})
                settings[name] = plugin.validate_settings(table, str(config.config_path))
            if stage_key(record.sha256, config, plugin, settings[name]) != key:
                return f"plugin {name!r} or its tools changed since the build"
    return unreadable_entries(artifact)


def unreadable_entries(artifact: Artifact) -> str | None:
    """Why an entry cannot be read by the jax installed here (``ppy.kinds.jax_compat``),
    or None: a stage key covers the jax that staged, not the one that runs."""
    from ppy.kinds.jax_compat import entry_outside_window, installed_jaxlib

    exports = [e for e in artifact.entries if e.kind == "jax.export"]
    running = installed_jaxlib() if exports else None
    for entry in exports:
        reason = entry_outside_window(entry, running)
        if reason is not None:
            return f"{entry.module}.{entry.qualname}: {reason}"
    return None


def plugin_names(artifact: Artifact) -> frozenset[str]:
    """The plugins whose stage keys the artifact records."""
    return frozenset(name for record in artifact.modules for name in record.stage_keys)


def staleness(
    config: Config,
    artifact: Artifact | None,
    plugins: Callable[[frozenset[str]], Mapping[str, Plugin]],
) -> str | None:
    """Why the artifact no longer describes the project, or None when it does.

    ``plugins`` gives the installed plugins by name among those asked for; it
    is called only when the sources and configuration are current and the
    artifact records a plugin, so a run that will build anyway loads none.
    """
    reason = stale_sources(config, artifact)
    if reason is not None or artifact is None:
        return reason
    names = plugin_names(artifact)
    if not names:
        return None
    memo = _memo_path(config)
    stamp = tools_stamp(artifact)
    if _read(memo) == stamp:
        return None
    reason = stale_tools(config, artifact, plugins(names))
    if reason is None:
        _write(memo, stamp)
    return reason


def tools_stamp(artifact: Artifact) -> str:
    """What a passed tool check depends on: the artifact's stage keys, the
    interpreter, and the distributions installed on ``sys.path``.

    A distribution's metadata folder is named for its name and version
    (``jax-0.10.2.dist-info``), so listing the folders of ``sys.path`` sees
    every install, upgrade and removal without reading any metadata.
    """
    digest = hashlib.sha256()
    digest.update(f"{sys.executable}\0{sys.version}\0".encode())
    for record in artifact.modules:
        for name, key in sorted(record.stage_keys.items()):
            digest.update(f"{record.name}\0{name}\0{key}\0".encode())
    for entry in sys.path:
        try:
            names = sorted(
                n for n in os.listdir(entry or ".") if n.endswith((".dist-info", ".egg-info"))
            )
        except OSError:  # a zip, a missing folder: nothing installed there
            continue
        digest.update(f"{entry}\0{'/'.join(names)}\0".encode())
    return digest.hexdigest()


#: The most bytes of a stamp read: a sha256 in hex and a newline, with room.
_STAMP_LIMIT = 256


def _memo_path(config: Config) -> Path:
    return config.artifact.with_name(config.artifact.name + ".checked")


def _read(path: Path) -> str | None:
    """The stamp written there; None where there is none, or it is not one (a
    FIFO put there is not waited on: ``read_file``)."""
    try:
        return read_file(path, _STAMP_LIMIT).decode().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _write(path: Path, stamp: str) -> None:
    # Only a shortcut: where it cannot be written (a read-only deployment),
    # the next run checks the tools again.
    with contextlib.suppress(OSError):
        temp = path.with_name(f".{path.name}.{os.getpid()}")
        temp.write_text(stamp + "\n")
        os.replace(temp, path)
