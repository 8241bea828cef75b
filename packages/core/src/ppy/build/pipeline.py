"""The build's steps: discovery, policy, staging and the artifact, in that order
(``ppy.commands.build`` runs them for ``ppy build``, ``ppy.commands.run`` for
a stale artifact).

This is the imperative shell around the pure parts: it reads files, loads
plugins, asks each plugin to stage what policy allowed, and writes the
artifact. Each plugin's turn has three steps: reuse (a module whose source,
configuration and plugin fingerprint are unchanged since the last build, and
whose project imports are too, keeps its entries, unless the jax installed
here can no longer read one (``ppy.kinds.jax_compat``); no plugin work starts for
it), stage (the plugin turns the
rest into entries or failures) and settle (each result becomes the function's
final decision). Every plugin's reuse comes first, so the build knows how
many functions it will stage before it stages any, and says so to its
``Progress`` (``ppy.progress``) as each is begun and done.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any

from ppy.artifact.entry import Entry
from ppy.artifact.model import Artifact, ModuleRecord
from ppy.artifact.read import ArtifactError, read_artifact
from ppy.artifact.write import write_artifact
from ppy.build.freshness import stage_key
from ppy.build.policy import decide_module
from ppy.config import Config
from ppy.decision import Check, Decision, Outcome
from ppy.discovery.module import discover_module
from ppy.discovery.records import ModuleInfo
from ppy.errors import ConfigError
from ppy.kinds.jax_compat import entry_outside_window, installed_jaxlib
from ppy.layout import shown
from ppy.log import get_logger
from ppy.plugin import KNOWN_DECORATORS, Plugin, StageFailure, StageRequest, StageTarget
from ppy.progress import SILENT, Progress
from ppy.record.apply import apply_recording, unknown_functions
from ppy.record.exports import read_exports
from ppy.record.signatures import recorded as read_recording
from ppy.registry import Registry, by_decorator, load_plugins

__all__ = ["BuildResult", "Project", "build_project", "load_project", "read_previous", "written_by"]


@dataclass(frozen=True)
class Project:
    """A project as the build sees it before anything is staged."""

    config: Config
    modules: tuple[ModuleInfo, ...]
    plugins: Registry
    settings: Mapping[str, Mapping[str, Any]]
    decisions: tuple[Decision, ...]


@dataclass(frozen=True)
class BuildResult:
    project: Project
    artifact: Artifact
    decisions: tuple[Decision, ...]
    #: Functions policy allowed that the plugin could not stage.
    failed: tuple[Decision, ...]


def _validated_settings(config: Config, plugins: Registry) -> dict[str, Mapping[str, Any]]:
    path = str(config.config_path)
    settings: dict[str, Mapping[str, Any]] = {}
    for plugin in plugins.by_name.values():
        settings[plugin.name] = plugin.validate_settings(config.plugins.get(plugin.name, {}), path)
    known = {p.name for p in plugins.by_name.values()} | {n for n, _ in KNOWN_DECORATORS.values()}
    for name in sorted(set(config.plugins) - known):
        raise ConfigError(
            f"no installed plugin is named {name!r}",
            path=path,
            key=f"tool.ppy.plugins.{name}",
            remedy="install the plugin that reads this table, or remove the table",
        )
    return settings


def load_project(config: Config, plugins: Registry | None = None) -> Project:
    """Discovery and policy for the configured project: everything but staging."""
    plugins = plugins if plugins is not None else load_plugins()
    settings = _validated_settings(config, plugins)
    log = get_logger()
    files = config.files()  # what the configuration's digest was made from
    recorded = read_recording(files.recording)
    modules: list[ModuleInfo] = []
    unnamed: list[Path] = []
    for path in files.sources(unnamed):
        module = discover_module(config.root, path, files.source(path))
        if module.syntax_error:
            log.warning("build.syntax_error", module=module.name, error=module.syntax_error)
        modules.append(apply_recording(module, recorded))
    for path in unnamed:
        log.warning(
            "build.unnamed_module",
            path=shown(path.relative_to(config.root)),
            reason="its path is not UTF-8, and the artifact names modules in UTF-8: "
            "nothing in it is staged, and it runs as an ordinary module",
            remedy="rename the file or folder with a UTF-8 name",
        )
    for name in unknown_functions(recorded, modules):
        log.warning(
            "build.recording_unknown",
            function=name,
            reason="recorded, but no module of the project defines it now; ignored",
            remedy="record again with `ppy record --replace` to drop it",
        )
    table = by_decorator(plugins)
    decisions = tuple(
        decision
        for module in modules
        for decision in decide_module(module, config, table, settings)
    )
    return Project(config, tuple(modules), plugins, settings, decisions)


def read_previous(config: Config) -> Artifact | None:
    """The artifact of the last build, or None; an unreadable one is only a warning,
    since the build is about to replace it."""
    if not config.artifact.exists():
        return None
    try:
        return read_artifact(config.artifact)
    except ArtifactError as error:
        get_logger().warning(
            "build.previous_unreadable", path=str(config.artifact), error=str(error)
        )
        return None


def written_by() -> dict[str, str]:
    versions = {}
    for name, dist in (("ppy", "ppy-core"), ("jax", "jax"), ("jaxlib", "jaxlib")):
        try:
            versions[name] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return versions


@dataclass
class _Ledger:
    """What the build has settled so far, filled in plugin by plugin.

    ``decisions`` starts as policy's and ends with every function settled;
    ``keys`` holds, per module, the stage key of each plugin whose entries for
    it are complete, which is what the next build compares to reuse them.
    """

    decisions: dict[tuple[str, str], Decision]
    entries: dict[tuple[str, str], Entry] = field(default_factory=dict)
    keys: dict[str, dict[str, str]] = field(default_factory=dict)
    #: Functions a plugin chose not to stage (``StageFailure.deliberate``):
    #: they stay, and are not failures of the build.
    declined: set[tuple[str, str]] = field(default_factory=set)
    #: Functions the recorded process exported (``ppy.record.exports``): no
    #: plugin stages them again.
    live: set[tuple[str, str]] = field(default_factory=set)

    def settle(self, decision: Decision, entry: Entry | None = None) -> None:
        self.decisions[decision.module, decision.qualname] = decision
        if entry is not None:
            self.entries[entry.key] = replace(entry, decision=decision)


def _reuse(
    project: Project, plugin: Plugin, previous: Artifact | None, ledger: _Ledger
) -> tuple[StageTarget, ...]:
    """Settle the modules whose entries the previous build already holds; the rest,
    those ``plugin`` must stage, are returned."""
    config = project.config
    settings = project.settings[plugin.name]
    log = get_logger()
    running = installed_jaxlib()
    targets: list[StageTarget] = []
    for module in project.modules:
        allowed = [
            d
            for d in project.decisions
            if d.module == module.name
            and d.plugin == plugin.name
            and d.outcome is Outcome.ALLOWED
            and (d.module, d.qualname) not in ledger.live
        ]
        if not allowed:
            continue
        key = stage_key(module.sha256, config, plugin, settings)
        ledger.keys.setdefault(module.name, {})[plugin.name] = key
        record = previous.module(module.name) if previous else None
        old = [previous.entry(d.module, d.qualname) for d in allowed] if previous else []
        if (
            record
            and record.stage_keys.get(plugin.name) == key
            and all(old)
            and not any(entry_outside_window(e, running) for e in old if e is not None)
            and not _changed_dependency(module, project.modules, previous)
        ):
            for decision, entry in zip(allowed, old, strict=True):
                assert entry is not None and previous is not None
                earlier = previous.decision(decision.module, decision.qualname)
                staged = _staging(earlier)
                how = f" ({staged.detail})" if staged else ""
                reused = replace(decision, trail=(*decision.trail, *filter(None, [staged])))
                reused = reused.settle(
                    Outcome.REUSED,
                    "reused",
                    f"unchanged since the last build; entry reused{how}",
                    # The signature the entry was staged with: it names the
                    # layout of sharded inputs, which the manifest does not.
                    signature=earlier.signature if earlier else entry.signature,
                )
                ledger.settle(reused, entry)
            log.info("build.reuse", plugin=plugin.name, module=module.name, functions=len(allowed))
            continue
        names = {d.qualname for d in allowed}
        imported = any(module.name in other.imports for other in project.modules)
        functions = tuple(f for f in module.functions if f.qualname in names)
        targets.append(StageTarget(module, functions, program=not imported))
    return tuple(targets)


def _staging(previous: Decision | None) -> Check | None:
    """The step of an earlier build that staged the entry, carried by every reuse of it,
    so ``ppy explain`` still says how the entry was made."""
    trail = previous.trail if previous else ()
    return next((c for c in reversed(trail) if c.rule == "staged"), None)


def _dependencies(module: ModuleInfo, modules: Sequence[ModuleInfo]) -> list[ModuleInfo]:
    """The project modules ``module`` imports, directly or through one another."""
    by_name = {m.name: m for m in modules}
    found: dict[str, ModuleInfo] = {}
    pending = [module]
    while pending:
        for name in sorted(pending.pop().imports):
            parts = name.split(".")
            for prefix in (".".join(parts[:n]) for n in range(1, len(parts) + 1)):
                other = by_name.get(prefix)
                if other is not None and other.name != module.name and prefix not in found:
                    found[prefix] = other
                    pending.append(other)
    return [found[name] for name in sorted(found)]


def _changed_dependency(
    module: ModuleInfo, modules: Sequence[ModuleInfo], previous: Artifact | None
) -> str | None:
    """The first project module ``module`` imports whose source is not the one
    the previous build staged it with, or None: a trace reads what it imports."""
    for dependency in _dependencies(module, modules):
        record = previous.module(dependency.name) if previous else None
        if record is None or record.sha256 != dependency.sha256:
            return dependency.name
    return None


@dataclass
class _Watch:
    """What a plugin says as it stages (``StageRequest.progress``), passed on
    to the build's ``Progress``; a plugin that says nothing has each of its
    functions counted done when its ``stage`` returns (``finish``)."""

    progress: Progress
    reported: set[tuple[str, str]] = field(default_factory=set)

    def begin(self, module: str, qualname: str) -> None:
        self.progress.begin(f"{module}.{qualname}")

    def done(self, result: Entry | StageFailure) -> None:
        key = (result.module, result.qualname)
        if key not in self.reported:
            self.reported.add(key)
            outcome = Outcome.STAGED if isinstance(result, Entry) else Outcome.STAYS
            self.progress.done(f"{key[0]}.{key[1]}", outcome.value)

    def finish(self, results: Mapping[tuple[str, str], Entry | StageFailure]) -> None:
        for result in results.values():
            self.done(result)


def _stage(
    plugin: Plugin,
    request: StageRequest,
) -> dict[tuple[str, str], Entry | StageFailure]:
    log = get_logger()
    count = sum(len(t.functions) for t in request.targets)
    log.info("build.stage", plugin=plugin.name, functions=count, modules=len(request.targets))
    try:
        results = plugin.stage(request)
    except Exception as error:  # a plugin bug must not lose the rest of the build
        log.error("build.plugin_failed", plugin=plugin.name, error=repr(error))
        return {
            (t.module.name, f.qualname): StageFailure(
                t.module.name,
                f.qualname,
                "plugin-failed",
                f"plugin {plugin.name!r} raised {type(error).__name__}: {error}",
                "report this to the plugin's authors; the function stays as it is",
            )
            for t in request.targets
            for f in t.functions
        }
    return {(r.module, r.qualname): r for r in results}


def _settle(
    plugin: Plugin,
    targets: tuple[StageTarget, ...],
    results: Mapping[tuple[str, str], Entry | StageFailure],
    ledger: _Ledger,
) -> None:
    """Turn each staged function's result into its final decision.

    A module with a failure loses its stage key, so the next build stages it
    again instead of reusing an incomplete set of entries.
    """
    log = get_logger()
    for target in targets:
        for function in target.functions:
            decision = ledger.decisions[target.module.name, function.qualname]
            result = results.get((target.module.name, function.qualname))
            if isinstance(result, Entry):
                reason = f"{plugin.verb} for {', '.join(result.platforms)}"
                if result.note:  # how: at the sizes a recording saw, say
                    reason += f" {result.note}"
                if function.recorded:  # where the description came from
                    reason += f"; {function.recorded}"
                settled = replace(decision, trail=(*decision.trail, *result.trail)).settle(
                    Outcome.STAGED, "staged", reason, signature=result.signature
                )
                ledger.settle(settled, result)
            else:
                failure = result or StageFailure(
                    target.module.name,
                    function.qualname,
                    "export-failed",
                    f"plugin {plugin.name!r} returned no result for this function",
                )
                settled = decision.settle(
                    Outcome.STAYS,
                    failure.rule,
                    failure.reason,
                    failure.remedy,
                    output=failure.output,
                )
                ledger.settle(settled)
                ledger.keys[target.module.name].pop(plugin.name, None)
                if failure.deliberate:
                    ledger.declined.add((target.module.name, function.qualname))
            log.info(
                "build.staged" if isinstance(result, Entry) else "build.failed",
                module=target.module.name,
                function=function.qualname,
                rule=settled.rule,
                reason=settled.reason,
            )


def _recorded_exports(project: Project, ledger: _Ledger) -> None:
    """Settle the functions the recorded process exported (``ppy.record.exports``)
    with its entries, as they are: where they are fresh, the build's
    configuration lets their plugin stage, and the function is still a candidate."""
    config = project.config
    log = get_logger()
    found = read_exports(
        config.root,
        {m.name: m.sha256 for m in project.modules},
        config.files().recording.digest,
    )
    for name, reason in found.stale:
        log.warning(
            "build.live_export_ignored",
            function=name,
            reason=reason,
            remedy="record again with `ppy record FILE`",
        )
    kinds = {p.kind: p for p in project.plugins.by_name.values()}
    recorded = {(m.name, f.qualname): f.recorded for m in project.modules for f in m.functions}
    for key, entry in sorted(found.entries.items()):
        decision = ledger.decisions.get(key)
        plugin = kinds.get(entry.kind)
        why = None
        if decision is None:
            why = "the function is no longer a candidate of the build"
        elif plugin is None:
            why = f"no installed plugin writes {entry.kind!r} entries"
        elif not _permitted(plugin, config, project.settings.get(plugin.name, {})):
            permission = plugin.requirements.permission
            why = (
                "the configuration does not let the build stage it: "
                f'[tool.ppy] build-execution = "allow" and [tool.ppy.plugins.{plugin.name}] '
                f"{permission} = true are needed"
            )
        if why is not None:
            log.warning(
                "build.live_export_ignored",
                function=f"{key[0]}.{key[1]}",
                reason=why,
                remedy="record again with `ppy record FILE`",
            )
            continue
        assert decision is not None and plugin is not None
        reason = f"{plugin.verb} for {', '.join(entry.platforms)} {entry.note or ''}".rstrip()
        if recorded.get(key):
            reason += f"; {recorded[key]}"
        settled = replace(decision, plugin=plugin.name, kind=entry.kind).settle(
            Outcome.STAGED, "staged", reason, signature=entry.signature
        )
        ledger.settle(settled, entry)
        ledger.live.add(key)


def _permitted(plugin: Plugin, config: Config, settings: Mapping[str, Any]) -> bool:
    requirements = plugin.requirements
    if requirements.build_execution and not config.build_execution:
        return False
    return requirements.permission is None or settings.get(requirements.permission) is True


def build_project(
    project: Project, previous: Artifact | None, progress: Progress = SILENT
) -> BuildResult:
    """Build a project the caller loaded, from a previous artifact it already read.

    ``ppy run`` has read both to decide that a build is needed; reading them
    again would cost its start-up and could see a different file. Loading
    comes first, outside the build lock, so a configuration error is found
    before anything is created in the project. ``progress`` hears of each
    function staged; it is closed before the artifact is written.
    """
    config = project.config
    ledger = _Ledger(decisions={(d.module, d.qualname): d for d in project.decisions})
    _recorded_exports(project, ledger)
    staging = [
        (plugin, targets)
        for plugin in project.plugins.by_name.values()
        if (targets := _reuse(project, plugin, previous, ledger))
    ]
    total = sum(len(t.functions) for _, targets in staging for t in targets)
    try:
        if total:
            progress.start(total)
        for plugin, targets in staging:
            watch = _Watch(progress)
            request = StageRequest(config.root, project.settings[plugin.name], targets, watch)
            results = _stage(plugin, request)
            watch.finish(results)
            _settle(plugin, targets, results, ledger)
    finally:
        progress.close()

    log = get_logger()
    ordered = tuple(ledger.decisions[d.module, d.qualname] for d in project.decisions)
    for decision in ordered:
        log.info("build.decision", **_event_fields(decision))
    artifact = Artifact(
        project=config.project,
        config_digest=config.digest,
        written_by=written_by(),
        modules=tuple(
            ModuleRecord(
                m.name, m.path, m.sha256, dict(sorted(ledger.keys.get(m.name, {}).items()))
            )
            for m in project.modules
        ),
        entries=tuple(ledger.entries[k] for k in sorted(ledger.entries)),
        decisions=ordered,
    )
    write_artifact(artifact, config.artifact)
    log.info("build.written", path=str(config.artifact), entries=len(artifact.entries))
    permitted = {(d.module, d.qualname) for d in project.decisions if d.outcome is Outcome.ALLOWED}
    failed = tuple(
        d
        for d in ordered
        if d.outcome is Outcome.STAYS
        and (d.module, d.qualname) in permitted
        and (d.module, d.qualname) not in ledger.declined
    )
    return BuildResult(project, artifact, ordered, failed)


def _event_fields(decision: Decision) -> dict[str, Any]:
    return {
        "module": decision.module,
        "function": decision.qualname,
        "outcome": decision.outcome.value,
        "rule": decision.rule,
        "kind": decision.kind,
        "signature": decision.signature,
        "reason": decision.reason,
        "remedy": decision.remedy,
        "location": decision.location,
    }
