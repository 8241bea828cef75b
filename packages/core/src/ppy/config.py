"""``[tool.ppy]``: the project's configuration, read once into a frozen record.

Everything that lets ``ppy build`` run project code is off until the project
says otherwise here, so the reader is strict: an unknown key, a wrong type or
a wrong value is an error naming the file and the key, never a silent default
that would leave an opt-in unnoticed. Plugins validate their own tables with
``validate_table`` so every table of the file reports errors the same way.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, NoReturn

from ppy.errors import ConfigError
from ppy.snapshot import Snapshot, take

__all__ = [
    "ALLOWED_KEYS",
    "ARTIFACT_SUFFIX",
    "DEFAULT_ARTIFACT",
    "Config",
    "Setting",
    "changed_part",
    "config_of",
    "load_config",
    "remedy_for",
    "toml_type",
    "validate_table",
]

#: Where the artifact goes when ``artifact`` is not set, relative to the root.
DEFAULT_ARTIFACT: Final = ".ppy/artifact.ppyz"


@dataclass(frozen=True)
class Setting:
    """One key of a table: what types it takes, its default, and what it means.

    ``bounds`` is the inclusive range a number must fall in, with the unit it
    is counted in for messages (``(1, 86400, "seconds")``). A float setting
    is always finite: ``inf`` and ``nan`` are TOML floats, but no limit or
    duration ppy reads means anything at either.
    """

    types: tuple[type, ...]
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    bounds: tuple[float, float, str] | None = None


_CORE_SCHEMA: Final[Mapping[str, Setting]] = {
    "build-execution": Setting(
        (str,),
        "deny",
        "whether ppy build may import and run project code to stage it",
        ("allow", "deny"),
    ),
    "artifact": Setting(
        (str,), DEFAULT_ARTIFACT, "where the artifact is written, relative to the project root"
    ),
    "plugins": Setting((dict,), {}, "one table per plugin, [tool.ppy.plugins.<name>]"),
    "run": Setting((dict,), {}, "how ppy run starts, [tool.ppy.run]"),
}

#: ``[tool.ppy.run]``: warm start (docs/warm-start.md). None of it changes
#: what is staged, so none of it is in the artifact's configuration digest.
_RUN_SCHEMA: Final[Mapping[str, Setting]] = {
    "warm": Setting((bool,), False, "whether ppy run starts from a warm server"),
    "preload": Setting(
        (list,), [], "modules the warm server imports besides jax, such as flax.linen"
    ),
    "idle-timeout": Setting(
        (int, float),
        900,
        "how long a warm server waits for a run before it exits",
        bounds=(1, 7 * 86400, "seconds"),
    ),
}

#: A module name as ``import`` takes it: dotted identifiers.
_MODULE_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True)
class RunSettings:
    """``[tool.ppy.run]``, validated."""

    warm: bool = False
    preload: tuple[str, ...] = ()
    idle_timeout: float = 900.0


#: The keys ``[tool.ppy]`` accepts.
ALLOWED_KEYS: Final[tuple[str, ...]] = tuple(_CORE_SCHEMA)


@dataclass(frozen=True)
class Config:
    #: Directory of the pyproject.toml found, or the target's directory if none.
    root: Path
    pyproject: Path | None
    #: ``[project].name``, else the root directory's name.
    project: str
    #: ``build-execution = "allow"``; off by default.
    build_execution: bool
    #: Absolute path of the artifact file.
    artifact: Path
    #: Raw ``[tool.ppy.plugins.<name>]`` tables; each plugin validates its own.
    plugins: Mapping[str, Mapping[str, Any]]
    #: sha256 of the canonical JSON of the ``[tool.ppy]`` table (less
    #: ``run``), so an artifact built under another configuration is seen to
    #: be stale.
    digest: str
    #: ``[tool.ppy.run]``.
    run: RunSettings = RunSettings()
    #: The project's files as read for this configuration; None for a
    #: configuration made by hand, whose readers then take their own.
    snapshot: Snapshot | None = field(default=None, compare=False, repr=False)

    def files(self) -> Snapshot:
        """The snapshot the configuration was read from (a fresh one where it
        was made by hand): what reads the project after it reads this."""
        return self.snapshot if self.snapshot is not None else take(self.root)

    @property
    def config_path(self) -> Path:
        """The pyproject.toml that holds, or would hold, the configuration."""
        return self.pyproject if self.pyproject is not None else self.root / "pyproject.toml"


_TOML_TYPES: Final[Mapping[type, str]] = {
    bool: "boolean",
    int: "integer",
    float: "float",
    str: "string",
    list: "array",
    dict: "table",
}


def toml_type(value: object) -> str:
    """The TOML word for a value's type (``true`` is a boolean, not an integer)."""
    for python_type, word in _TOML_TYPES.items():
        if type(value) is python_type:
            return word
    if isinstance(value, Mapping):
        return "table"
    return type(value).__name__


def _a(word: str) -> str:
    return f"an {word}" if word[:1] in "aeiou" else f"a {word}"


def _type_words(types: tuple[type, ...]) -> str:
    return _a(" or ".join(_TOML_TYPES.get(t, t.__name__) for t in types))


def _found(value: object) -> str:
    """``is a boolean (true)``: what a message says was found."""
    return f"is {_a(toml_type(value))} ({_render(value)})"


def _matches(value: object, types: tuple[type, ...]) -> bool:
    # bool is a subclass of int: true is not an integer and 1 is not a boolean.
    if isinstance(value, bool):
        return bool in types
    if isinstance(value, int) and float in types:
        return True
    if isinstance(value, Mapping) and dict in types:
        return True
    return any(t is not bool and isinstance(value, t) for t in types)


def _render(value: object) -> str:
    """A value as TOML would spell it, for messages."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, list, dict)):
        return json.dumps(value, default=str)
    return repr(value)


def validate_table(
    table: Mapping[str, Any], schema: Mapping[str, Setting], *, path: str, prefix: str
) -> dict[str, Any]:
    """Check ``table`` against ``schema`` and return it with defaults filled in.

    ``prefix`` is the table's dotted name (``tool.ppy.plugins.jax``), so each
    error names the full key. An integer is accepted for a float setting and
    returned as a float; nothing else is converted.
    """
    allowed = ", ".join(schema) if schema else "(none)"
    for key in table:
        if key not in schema:
            raise ConfigError(
                f"unknown key {key!r}; allowed keys: {allowed}",
                path=path,
                key=f"{prefix}.{key}",
                remedy=f"remove it, or use one of: {allowed}",
            )
    result: dict[str, Any] = {}
    for key, setting in schema.items():
        if key not in table:
            result[key] = setting.default
            continue
        value = table[key]
        if not _matches(value, setting.types):
            raise ConfigError(
                f"{_found(value)}; wanted {_type_words(setting.types)}: {setting.help}",
                path=path,
                key=f"{prefix}.{key}",
                remedy=f"give {key} {_type_words(setting.types)}, or remove it for the default",
            )
        if type(value) is int and float in setting.types and int not in setting.types:
            value = float(value)
        _check_number(value, setting, key=f"{prefix}.{key}", path=path)
        if setting.choices is not None and value not in setting.choices:
            allowed_values = ", ".join(_render(c) for c in setting.choices)
            raise ConfigError(
                f"{_render(value)} is not allowed; use one of: {allowed_values}",
                path=path,
                key=f"{prefix}.{key}",
                remedy=f"write {key} = {_render(setting.choices[0])} (or another of: "
                f"{allowed_values})",
            )
        result[key] = value
    return result


def _check_number(value: object, setting: Setting, *, key: str, path: str) -> None:
    """Refuse a float that is not finite, or a number outside ``setting.bounds``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    name = key.rsplit(".", 1)[-1]
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(
            f"is {_render(value)}; wanted a finite number: {setting.help}",
            path=path,
            key=key,
            remedy=f"give {name} a finite number, or remove it for {_render(setting.default)}",
        )
    if setting.bounds is None:
        return
    low, high, unit = setting.bounds
    if not low <= value <= high:
        raise ConfigError(
            f"is {_render(value)}; wanted {_number(low)} to {_number(high)} {unit}: {setting.help}",
            path=path,
            key=key,
            remedy=f"give {name} a number of {unit} from {_number(low)} to {_number(high)}, "
            f"or remove it for {_render(setting.default)}",
        )


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def remedy_for(
    config: Config, *, table: str, line: str, also: Sequence[tuple[str, str]] = ()
) -> str:
    """Where a missing setting goes: ``add X under [tool.ppy] in /abs/pyproject.toml``;
    ``also``, more ``(table, line)`` missing with it, named in the same remedy
    so that one round of edits is enough."""
    what = " and ".join(f"{each} under [{where}]" for where, each in ((table, line), *also))
    if config.pyproject is None:
        return f"create {config.root / 'pyproject.toml'} with {what}"
    return f"add {what} in {config.pyproject}"


def _digest(table: Mapping[str, Any], recorded: str | None = None) -> str:
    """The table's digest; with the recorded signatures' digest after a
    ``+`` where the project has them, so a new recording makes the artifact
    stale, and the reason can say which of the two changed
    (``changed_part``)."""
    canonical = json.dumps(
        dict(table), sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str
    )
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    return digest if recorded is None else f"{digest}{RECORDED_MARK}{recorded}"


#: What separates the table's digest from the recording's in ``Config.digest``.
RECORDED_MARK: Final = "+"


def changed_part(built: str, now: str) -> str:
    """Which part of a configuration digest differs between ``built`` (an
    artifact's) and ``now``: ``"table"``, ``"recording"`` or ``"both"``."""
    table, _, recorded = built.partition(RECORDED_MARK)
    table_now, _, recorded_now = now.partition(RECORDED_MARK)
    if table != table_now:
        return "both" if recorded != recorded_now else "table"
    return "recording"


def _tool_ppy(document: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    tool = document.get("tool", {})
    if not isinstance(tool, Mapping):
        raise ConfigError(
            f"{_found(tool)}; wanted a table",
            path=path,
            key="tool",
            remedy="make tool a table: write [tool.ppy] and its keys as a table header",
        )
    table = tool.get("ppy", {})
    if not isinstance(table, Mapping):
        raise ConfigError(
            f"{_found(table)}; wanted a table, [tool.ppy]",
            path=path,
            key="tool.ppy",
            remedy="write the settings under a [tool.ppy] table header",
        )
    return table


def _plugin_tables(raw: Mapping[str, Any], path: str) -> Mapping[str, Mapping[str, Any]]:
    plugins: dict[str, Mapping[str, Any]] = {}
    for name, entry in raw.items():
        if not isinstance(entry, Mapping):
            raise ConfigError(
                f"{_found(entry)}; wanted a table, [tool.ppy.plugins.{name}]",
                path=path,
                key=f"tool.ppy.plugins.{name}",
                remedy=f"write the plugin's settings under a [tool.ppy.plugins.{name}] header",
            )
        plugins[name] = MappingProxyType(dict(entry))
    return MappingProxyType(plugins)


#: The suffix every artifact has: a name that could be a source file, a
#: configuration file or anything else the project holds is never written over.
ARTIFACT_SUFFIX: Final = ".ppyz"


def _run_settings(raw: Mapping[str, Any], path: str) -> RunSettings:
    """``[tool.ppy.run]``, a table already (``_CORE_SCHEMA`` checked it)."""
    settings = validate_table(raw, _RUN_SCHEMA, path=path, prefix="tool.ppy.run")
    preload = settings["preload"]
    for name in preload:
        if not isinstance(name, str) or not _MODULE_NAME.fullmatch(name):
            raise ConfigError(
                f'holds {_render(name)}; wanted module names such as "flax.linen"',
                path=path,
                key="tool.ppy.run.preload",
                remedy='list modules by the name import takes, e.g. preload = ["optax"]',
            )
    return RunSettings(
        warm=settings["warm"],
        preload=tuple(dict.fromkeys(preload)),
        idle_timeout=float(settings["idle-timeout"]),
    )


def _artifact_path(root: Path, value: str, path: str) -> Path:
    """Where ``artifact = value`` puts the artifact: a ``.ppyz`` file inside ``root``.

    ``ppy build`` creates folders and replaces a file there, so a path that
    leaves the project (absolute, ``..``, or through a linked folder) or that
    names a source or configuration file is a configuration error rather than
    something ppy overwrites. The folder is resolved, the name is not: a link
    in the artifact's own place is refused when it is read or written.
    """

    def refuse(what: str, remedy: str) -> NoReturn:
        raise ConfigError(what, path=path, key="tool.ppy.artifact", remedy=remedy)

    inside = f'give a path inside the project root, such as "{DEFAULT_ARTIFACT}"'
    if not value.strip():
        refuse(f'is empty; wanted a file path such as "{DEFAULT_ARTIFACT}"', inside)
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        refuse(f"{_render(value)} holds a control character", inside)
    relative = Path(value)
    if relative.is_absolute() or value.startswith("~"):
        refuse(f"{_render(value)} is not relative to the project root", inside)
    if relative.suffix != ARTIFACT_SUFFIX:
        refuse(
            f"{_render(value)} does not end in {ARTIFACT_SUFFIX}; ppy writes its artifact only "
            f"to a {ARTIFACT_SUFFIX} file, never over a source or configuration file",
            f'name the file with {ARTIFACT_SUFFIX}, such as "{DEFAULT_ARTIFACT}"',
        )
    project = root.resolve()
    target = (project / relative).parent.resolve() / relative.name
    if not target.parent.is_relative_to(project):
        refuse(f"{_render(value)} resolves to {target}, outside the project root {project}", inside)
    return target


def load_config(target: Path) -> Config:
    """The configuration for ``target`` (a file or a directory), from a
    snapshot of its project taken now (``ppy.snapshot.take``).

    The nearest pyproject.toml at or above it decides the project root; with
    none, the target's directory is the root and every setting has its default.
    """
    return config_of(take(target))


def config_of(snapshot: Snapshot) -> Config:
    """The configuration a snapshot of the project holds; the snapshot is
    kept on it (``Config.snapshot``), so what reads the project after the
    configuration reads the same files."""
    root, document, pyproject = snapshot.root, snapshot.document, snapshot.pyproject
    path = str(pyproject if pyproject is not None else root / "pyproject.toml")
    table = _tool_ppy(document, path)
    if "plugins" in table and not isinstance(table["plugins"], Mapping):
        value = table["plugins"]
        raise ConfigError(
            f"{_found(value)}; wanted a table of plugin tables, [tool.ppy.plugins.<name>]",
            path=path,
            key="tool.ppy.plugins",
            remedy="write each plugin's settings under a [tool.ppy.plugins.<name>] header",
        )
    settings = validate_table(table, _CORE_SCHEMA, path=path, prefix="tool.ppy")
    project = document.get("project", {})
    name = project.get("name") if isinstance(project, Mapping) else None
    return Config(
        root=root,
        pyproject=pyproject,
        project=name if isinstance(name, str) and name else root.name,
        build_execution=settings["build-execution"] == "allow",
        artifact=_artifact_path(root, settings["artifact"], path),
        plugins=_plugin_tables(settings["plugins"], path),
        digest=_digest({k: v for k, v in table.items() if k != "run"}, snapshot.recording.digest),
        run=_run_settings(settings["run"], path),
        snapshot=snapshot,
    )
