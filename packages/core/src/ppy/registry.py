"""Installed plugins and runtimes, loaded through their entry points with stevedore.

``ppy.plugins`` holds build-time stagers, ``ppy.runtimes`` loaders keyed by
the entry kind they run. Anything installed that registers there is used;
one that fails to import, was written for another version of its contract
(``ppy.plugin.CONTRACT``, ``ppy.runtime.CONTRACT``) or fails to instantiate
is reported and skipped, so a broken third-party distribution never stops a
build or a run.

stevedore loads them (``ExtensionManager``, or ``NamedExtensionManager`` for
the names a run needs: the kinds its artifact holds, the plugins it
records), and its load-failure callback reports and skips. The entry points
it is given are listed by ``importlib.metadata`` as the interpreter has
them now, not read from stevedore's own cache: that cache is a file written
under the user's home (``~/.cache/python-entrypoints``), outside the folder
ppy keeps private, whose contents stevedore imports without a check of who
wrote them; it goes stale for up to two minutes after a distribution is
reinstalled in place (it keys on modification times rounded to a 32-bit
float); and its entry points no longer know their distribution, which ``ppy
plugins`` and a failure's warning name. Listing costs a run about the same.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from stevedore import ExtensionManager, NamedExtensionManager

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
    with ``describe=True`` or the entry point was skipped.
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


class _AssertionFailed(Exception):
    """An entry point's import failed an ``assert``: carried past stevedore,
    which lets AssertionError through, to its load-failure callback."""


class _Guarded(EntryPoint):
    """An entry point whose import failing an ``assert`` (a plugin written for
    another Python, say) is reported and skipped like any other failure."""

    def load(self) -> Any:
        try:
            return super().load()
        except AssertionError as error:
            raise _AssertionFailed() from error


def _guarded(entry_point: EntryPoint) -> EntryPoint:
    guarded = _Guarded(entry_point.name, entry_point.value, entry_point.group)
    # As importlib.metadata sets it: EntryPoint refuses attribute assignment.
    vars(guarded).update(dist=entry_point.dist)
    return guarded


class _Listing:
    """The entry points stevedore is given: the group's, as ``importlib.metadata``
    lists them now, in name order; listed once per manager."""

    namespace: str
    _listing: list[EntryPoint] | None = None

    def list_entry_points(self) -> list[EntryPoint]:
        if self._listing is None:
            listed = sorted(entry_points(group=self.namespace), key=lambda ep: ep.name)
            self._listing = [_guarded(entry_point) for entry_point in listed]
        return self._listing


class _All(_Listing, ExtensionManager[Any]):
    """Every entry point of a group."""


class _Named(_Listing, NamedExtensionManager[Any]):
    """The named entry points of a group."""


def _incompatible(declared: object, supported: tuple[int, int], group: str) -> str | None:
    """Why a plugin or runtime written for contract ``declared`` cannot be
    used with this core's ``supported``, or None: the same major version,
    and a minor one no newer than this core's."""
    speaks = f"this ppy-core speaks {supported[0]}.{supported[1]}"
    if declared is None:
        return (
            f"its class declares no `contract`, the version of the {group} contract it was "
            f"written for, as `contract = (major, minor)`; {speaks}"
        )
    if not (
        isinstance(declared, tuple)
        and len(declared) == 2
        and all(type(part) is int for part in declared)
    ):
        return f"its `contract` is {declared!r}, not a (major, minor) pair of ints; {speaks}"
    major, minor = declared
    if major != supported[0] or minor > supported[1]:
        return f"it was written for the {group} contract {major}.{minor}; {speaks}"
    return None


def _construct(
    cls: Any, check: type, supported: tuple[int, int], group: str
) -> tuple[Any, str | None, bool]:
    """The loaded class's instance, or why there is none, and whether that is
    its contract's version (read before anything of it runs)."""
    incompatible = _incompatible(getattr(cls, "contract", None), supported, group)
    if incompatible is not None:
        return None, incompatible, True
    try:
        obj = cls()
    except Exception as failure:  # a third party's constructor
        return None, f"{type(failure).__name__}: {failure}", False
    if not isinstance(obj, check):
        return None, f"{type(obj).__name__} does not implement the {check.__name__} contract", False
    return obj, None, False


def _load(
    group: str,
    check: type,
    supported: tuple[int, int],
    names: Collection[str] | None = None,
    *,
    describe: bool = False,
) -> Registry:
    failed: dict[EntryPoint, str] = {}

    def load_failed(_manager: Any, entry_point: EntryPoint, error: BaseException) -> None:
        if isinstance(error, _AssertionFailed) and error.__cause__ is not None:
            error = error.__cause__
        failed[entry_point] = f"{type(error).__name__}: {error}"

    if names is None:
        manager: ExtensionManager[Any] = _All(group, on_load_failure_callback=load_failed)
    else:
        # A name with nothing installed under it is ours to report (run.unbound).
        manager = _Named(
            group,
            sorted(names),
            on_load_failure_callback=load_failed,
            on_missing_entrypoints_callback=None,
        )
    loaded = {extension.entry_point: extension.plugin for extension in manager.extensions}
    installed: list[Installed] = []
    by_name: dict[str, Any] = {}
    for entry_point in manager.list_entry_points():
        if names is not None and entry_point.name not in names:
            continue
        obj: Any = None
        error: str | None = failed.get(entry_point, "not loaded")
        incompatible = False
        if entry_point in loaded:
            obj, error, incompatible = _construct(loaded[entry_point], check, supported, group)
        dist = entry_point.dist if describe or error is not None else None
        item = Installed(
            group,
            entry_point.name,
            entry_point.value,
            dist.name if dist is not None else None,
            dist.version if dist is not None else None,
            obj,
            error,
        )
        installed.append(item)
        if error is None:
            by_name.setdefault(entry_point.name, obj)
        else:
            _report(item, supported, incompatible=incompatible)
    return Registry(tuple(installed), by_name)


def _report(item: Installed, supported: tuple[int, int], *, incompatible: bool) -> None:
    """One warning for a plugin or runtime that is skipped, and what to do."""
    from ppy.log import get_logger

    if incompatible:
        major, minor = supported
        get_logger().warning(
            "registry.incompatible",
            group=item.group,
            name=item.name,
            distribution=item.distribution,
            reason=item.error,
            remedy=f"install a version of {item.distribution or 'that distribution'} written "
            f"for the {item.group} contract {major}.x (at most {major}.{minor}), or the ppy-core "
            "it was written for; it is skipped",
        )
        return
    get_logger().warning(
        "registry.load_failed",
        group=item.group,
        name=item.name,
        distribution=item.distribution,
        error=item.error,
        remedy="reinstall or uninstall that distribution; it is skipped",
    )


def load_plugins(names: Collection[str] | None = None, *, describe: bool = False) -> Registry:
    """Build-time plugins by entry-point name; ``by_name`` values are ``Plugin``s.

    ``ppy run`` names the plugins its artifact records, to check their
    fingerprints; a plugin's entry-point name is its ``name``.
    """
    from ppy.plugin import CONTRACT, Plugin

    return _load(PLUGIN_GROUP, Plugin, CONTRACT, names, describe=describe)


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
    from ppy.runtime import CONTRACT, Runtime

    return _load(RUNTIME_GROUP, Runtime, CONTRACT, kinds, describe=describe)


def by_decorator(plugins: Registry) -> dict[str, Plugin]:
    """Decorator name -> the plugin that stages it; the first registered wins."""
    table: dict[str, Plugin] = {}
    for plugin in plugins.by_name.values():
        for decorator in sorted(plugin.decorators):
            table.setdefault(decorator, plugin)
    return table
