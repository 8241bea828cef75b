"""Installed plugins and runtimes, found through entry points with stevedore.

``ppy.plugins`` holds build-time stagers, ``ppy.runtimes`` loaders keyed by
the entry kind they run. Anything installed that registers there is used; one
that fails to import or to instantiate is reported and skipped, so a broken
third-party distribution never stops a build.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from ppy.plugin import Plugin
from ppy.runtime import Runtime

__all__ = [
    "PLUGIN_GROUP",
    "RUNTIME_GROUP",
    "Installed",
    "Registry",
    "load_plugins",
    "load_runtimes",
]

PLUGIN_GROUP = "ppy.plugins"
RUNTIME_GROUP = "ppy.runtimes"


@dataclass(frozen=True)
class Installed:
    """One registered entry point, loaded or not."""

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


def _describe(entry_point: Any) -> tuple[str | None, str | None]:
    dist = getattr(entry_point, "dist", None)
    if dist is None:
        return None, None
    return dist.metadata["Name"], dist.version


def _load(group: str, check: type, names: Collection[str] | None = None) -> Registry:
    from stevedore import NamedExtensionManager

    failed: dict[str, str] = {}

    def on_failure(_manager: Any, entry_point: Any, error: BaseException) -> None:
        failed[entry_point.name] = f"{type(error).__name__}: {error}"

    wanted = {ep.name for ep in entry_points(group=group)} if names is None else set(names)
    manager = NamedExtensionManager(
        namespace=group,
        names=sorted(wanted),
        invoke_on_load=True,
        on_load_failure_callback=on_failure,
    )
    loaded = {ext.name: ext for ext in manager.extensions}
    installed: list[Installed] = []
    by_name: dict[str, Any] = {}
    for entry_point in sorted(entry_points(group=group), key=lambda ep: ep.name):
        if entry_point.name not in wanted:
            continue
        dist, version = _describe(entry_point)
        ext = loaded.get(entry_point.name)
        error = failed.get(entry_point.name)
        if ext is not None and error is None and not isinstance(ext.obj, check):
            error = f"{type(ext.obj).__name__} does not implement the {check.__name__} contract"
        if ext is None and error is None:
            error = "not loaded"
        obj = ext.obj if ext is not None and error is None else None
        installed.append(
            Installed(group, entry_point.name, entry_point.value, dist, version, obj, error)
        )
        if obj is not None:
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


def load_plugins() -> Registry:
    """Build-time plugins by entry-point name; ``by_name`` values are ``Plugin``s."""
    return _load(PLUGIN_GROUP, Plugin)


def load_runtimes(kinds: Collection[str] | None = None) -> Registry:
    """Runtimes by the entry kind they load; ``by_name`` values are ``Runtime``s.

    ``ppy run`` names the kinds its artifact holds, so a broken runtime for a
    kind it does not need is neither imported nor reported.
    """
    return _load(RUNTIME_GROUP, Runtime, kinds)


def by_decorator(plugins: Registry) -> dict[str, Plugin]:
    """Decorator name -> the plugin that stages it; the first registered wins."""
    table: dict[str, Plugin] = {}
    for plugin in plugins.by_name.values():
        for decorator in sorted(plugin.decorators):
            table.setdefault(decorator, plugin)
    return table
