"""Installed plugins and runtimes, found through their entry points.

``ppy.plugins`` holds build-time stagers, ``ppy.runtimes`` loaders keyed by
the entry kind they run. Anything installed that registers there is used; one
that fails to import or to instantiate is reported and skipped, so a broken
third-party distribution never stops a build.

``ppy run`` loads its runtimes at every start, so only the named entry
points are loaded, straight from ``importlib.metadata`` (which jax imports
anyway: a few milliseconds, where stevedore and its cache cost a run
about 25), and the distribution behind each one is named only to describe it:
for ``ppy plugins`` and in the warning about one that failed.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ppy.plugin import Plugin

__all__ = [
    "PLUGIN_GROUP",
    "RUNTIME_GROUP",
    "Installed",
    "Registry",
    "installed_plugins",
    "load_plugins",
    "load_runtimes",
]

PLUGIN_GROUP = "ppy.plugins"
RUNTIME_GROUP = "ppy.runtimes"


@dataclass(frozen=True)
class Installed:
    """One registered entry point, loaded or not.

    ``distribution`` and ``version`` are None unless the registry was loaded
    with ``describe=True`` or the entry point failed to load.
    """

    group: str
    name: str
    target: str
    distribution: str | None
    version: str | None
    obj: Any = None
    error: str | None = None

    @property
    def loaded(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Registry:
    installed: tuple[Installed, ...] = ()
    by_name: Mapping[str, Any] = field(default_factory=dict)

    @property
    def failures(self) -> tuple[Installed, ...]:
        return tuple(i for i in self.installed if not i.loaded)


def _load(
    group: str, check: type, names: Collection[str] | None = None, *, describe: bool = False
) -> Registry:
    from importlib.metadata import entry_points

    listed = sorted(entry_points(group=group), key=lambda ep: ep.name)
    if names is not None:
        # A name with nothing installed under it is ours to report (run.unbound).
        listed = [ep for ep in listed if ep.name in names]
    installed: list[Installed] = []
    by_name: dict[str, Any] = {}
    for entry_point in listed:
        obj: Any = None
        error: str | None = None
        try:
            obj = entry_point.load()()
        except Exception as failure:  # a third party's import or constructor
            error = f"{type(failure).__name__}: {failure}"
        if error is None and not isinstance(obj, check):
            error = f"{type(obj).__name__} does not implement the {check.__name__} contract"
        dist = entry_point.dist if describe or error is not None else None
        installed.append(
            Installed(
                group,
                entry_point.name,
                entry_point.value,
                dist.name if dist is not None else None,
                dist.version if dist is not None else None,
                obj if error is None else None,
                error,
            )
        )
        if error is None:
            by_name.setdefault(entry_point.name, obj)
    for item in installed:
        if item.error is not None:
            from ppy.log import get_logger

            get_logger().warning(
                "registry.load_failed",
                group=group,
                name=item.name,
                distribution=item.distribution,
                error=item.error,
                remedy="reinstall or uninstall that distribution; it is skipped",
            )
    return Registry(tuple(installed), by_name)


def load_plugins(names: Collection[str] | None = None, *, describe: bool = False) -> Registry:
    """Build-time plugins by entry-point name; ``by_name`` values are ``Plugin``s.

    ``ppy run`` names the plugins its artifact records, to check their
    fingerprints; a plugin's entry-point name is its ``name``.
    """
    from ppy.plugin import Plugin

    return _load(PLUGIN_GROUP, Plugin, names, describe=describe)


def installed_plugins(names: frozenset[str]) -> dict[str, Plugin]:
    """The named plugins that are installed and load, by name.

    What ``ppy.build.freshness.staleness`` asks about the plugins an artifact
    records, for ``ppy run`` and ``ppy doctor`` alike.
    """
    return {p.name: p for p in load_plugins(names).by_name.values()}


def load_runtimes(kinds: Collection[str] | None = None, *, describe: bool = False) -> Registry:
    """Runtimes by the entry kind they load; ``by_name`` values are ``Runtime``s.

    ``ppy run`` names the kinds its artifact holds, so a broken runtime for a
    kind it does not need is neither imported nor reported.
    """
    from ppy.runtime import Runtime

    return _load(RUNTIME_GROUP, Runtime, kinds, describe=describe)


def by_decorator(plugins: Registry) -> dict[str, Plugin]:
    """Decorator name -> the plugin that stages it; the first registered wins."""
    table: dict[str, Plugin] = {}
    for plugin in plugins.by_name.values():
        for decorator in sorted(plugin.decorators):
            table.setdefault(decorator, plugin)
    return table
