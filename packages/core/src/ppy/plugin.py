"""The contract between core and a build-time plugin (entry-point group ``ppy.plugins``).

A plugin is a class registered under ``ppy.plugins`` and instantiated with no
arguments. Core owns discovery, policy, the artifact and the CLI; the plugin
says which decorators it stages, what permissions staging needs, any rules of
its own, and turns allowed functions into ``Entry`` records. Core never
imports a plugin's dependencies, and a plugin must not import heavy
dependencies (jax) at import time: ``ppy build`` loads every plugin.

This module and the kinds contracts (``ppy.kinds``) are the whole surface a
plugin reaches core through; docs/plugins.md documents it, and an import
contract (``nox -s lint``) holds ppy's own plugins to it. A plugin declares
the ``CONTRACT`` it was written for as its ``contract``; the registry skips,
with a line, one written for another major version. The records and helpers
it re-exports from their own modules (``Check``, ``Entry``, ``TensorSpec``,
``FunctionInfo``, ``ModuleInfo``, ``Setting``, ``validate_table``,
``ConfigError``, ...) are loaded on first use, since ``ppy run`` imports
this module at every start and needs none of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ppy.annotations import format_like_axes
    from ppy.artifact.entry import Entry
    from ppy.config import Setting, validate_table
    from ppy.decision import Check
    from ppy.discovery.module import discover_module
    from ppy.discovery.records import ClassInfo, FunctionInfo, ModuleInfo, Parameter
    from ppy.errors import ConfigError
    from ppy.spec import AXIS_TYPES, WIDE_SCALARS, Axis, MeshSpec, TensorSpec

__all__ = [
    "AXIS_TYPES",
    "WIDE_SCALARS",
    "CONTRACT",
    "KNOWN_DECORATORS",
    "Axis",
    "Check",
    "ClassInfo",
    "ConfigError",
    "Entry",
    "FunctionInfo",
    "LiveCall",
    "LiveExporter",
    "LiveRequest",
    "MeshSpec",
    "ModuleInfo",
    "Parameter",
    "Plugin",
    "Requirements",
    "Setting",
    "StageFailure",
    "StageProgress",
    "StageRequest",
    "StageTarget",
    "TensorSpec",
    "discover_module",
    "format_like_axes",
    "validate_table",
]

#: The version of this contract: (major, minor). A minor version adds to it
#: and breaks no plugin written for an earlier one of the same major; a major
#: version changes what a plugin is given or must do. A plugin sets
#: ``contract`` to the version it was written for (a literal, not this name).
#: 1.1 added ``StageRequest.progress``; 1.2 the optional ``LiveExporter``
#: capability (``export_live``), which ``ppy record`` calls in the recorded process.
CONTRACT: tuple[int, int] = (1, 2)

#: Where each re-exported name lives; imported when the name is first used.
_REEXPORTED: Mapping[str, str] = {
    "AXIS_TYPES": "ppy.spec",
    "WIDE_SCALARS": "ppy.spec",
    "Axis": "ppy.spec",
    "Check": "ppy.decision",
    "ClassInfo": "ppy.discovery.records",
    "ConfigError": "ppy.errors",
    "Entry": "ppy.artifact.entry",
    "FunctionInfo": "ppy.discovery.records",
    "MeshSpec": "ppy.spec",
    "ModuleInfo": "ppy.discovery.records",
    "Parameter": "ppy.discovery.records",
    "Setting": "ppy.config",
    "TensorSpec": "ppy.spec",
    "discover_module": "ppy.discovery.module",
    "format_like_axes": "ppy.annotations",
    "validate_table": "ppy.config",
}


def __getattr__(name: str) -> object:
    if name in _REEXPORTED:
        # __import__, not importlib.import_module: an import through the
        # import statement's path shows in ``python -X importtime`` and in
        # ``ppy doctor``'s import report, where the run's cost is read.
        return getattr(__import__(_REEXPORTED[name], fromlist=[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Decorators core recognises even when no plugin for them is installed, so a
#: runtime-only install can say which plugin is missing. Maps the resolved
#: decorator name to (plugin name, distribution to install).
KNOWN_DECORATORS: Mapping[str, tuple[str, str]] = {
    "jax.jit": ("jax", "ppy-plugin-jax"),
    "ppy.xla.jit": ("xla", "ppy-plugin-xla"),
}


@dataclass(frozen=True)
class Requirements:
    """What a plugin needs before policy lets it stage a function."""

    #: Staging runs project code, so ``[tool.ppy] build-execution = "allow"`` is needed.
    build_execution: bool
    #: A boolean key of ``[tool.ppy.plugins.<name>]`` that must be true, or None.
    permission: str | None = None
    #: Every positional parameter needs ``ppy.Shape`` and ``ppy.DType``.
    array_specs: bool = False
    #: Why a differentiated function cannot be staged, or None when it can.
    differentiation: str | None = None
    #: The transforms whose functions it stages all the same, served by a
    #: VJP of their own (``jax.grad``) or by the original where it has none:
    #: a function some other transform reaches stays, for ``differentiation``'s reason.
    differentiable: frozenset[str] = frozenset()


@dataclass(frozen=True)
class StageTarget:
    module: ModuleInfo
    functions: tuple[FunctionInfo, ...]
    #: No other module of the project imports this one: python runs it only
    #: as the program, where its ``__name__`` is ``"__main__"``, and a trace
    #: that reads ``__name__`` is staged with the value the run will see.
    program: bool = False


class StageProgress(Protocol):
    """Where a plugin says, as it stages, which function it is on and each
    result as soon as it has it, for ``ppy build``'s line on a terminal.

    Optional: a plugin that says nothing has its functions counted when
    ``stage`` returns. Both calls are cheap and never raise.
    """

    def begin(self, module: str, qualname: str) -> None:
        """The plugin starts on this function (importing its module included)."""
        ...

    def done(self, result: Entry | StageFailure) -> None:
        """This function's result, the one ``stage`` will return."""
        ...


class _Unwatched:
    """A ``StageProgress`` nobody reads: a request made outside ``ppy build``."""

    def begin(self, module: str, qualname: str) -> None:
        pass

    def done(self, result: Entry | StageFailure) -> None:
        pass


@dataclass(frozen=True)
class StageRequest:
    #: Project root: the directory of the pyproject.toml, put on sys.path.
    root: Path
    #: The plugin's validated settings (what ``validate_settings`` returned).
    settings: Mapping[str, Any]
    targets: tuple[StageTarget, ...]
    #: Where to say what is being staged (contract 1.1); nobody listens by default.
    progress: StageProgress = field(default_factory=_Unwatched, compare=False)


@dataclass(frozen=True)
class StageFailure:
    """A function policy allowed but the plugin could not stage."""

    module: str
    qualname: str
    rule: str
    reason: str
    remedy: str | None = None
    #: What the user's code printed to stdout/stderr while it was staged.
    output: str = ""
    #: The plugin chose not to stage it, for a reason the source alone did
    #: not show (it reads a value ppy cannot compare, its trace prints): the
    #: function stays, and the build has not failed.
    deliberate: bool = False


@runtime_checkable
class Plugin(Protocol):
    #: The config table, ``[tool.ppy.plugins.<name>]``, and the entry-point name
    #: it is registered under in ``ppy.plugins``.
    name: str
    #: The entry kind it writes; a runtime registered for that kind loads it.
    kind: str
    #: The word a build line uses for a staged function: "exported", "compiled".
    verb: str
    #: The ``CONTRACT`` this plugin was written for: ``(1, 1)``.
    contract: tuple[int, int]
    decorators: frozenset[str]
    requirements: Requirements
    version: str

    def validate_settings(self, table: Mapping[str, Any], path: str) -> Mapping[str, Any]:
        """Validate the plugin's table; raise ``ppy.errors.ConfigError`` naming the key."""
        ...

    def fingerprint(self, settings: Mapping[str, Any]) -> str:
        """What, besides source and config, would change staged output (tool versions,
        platforms). Entries whose module, config and fingerprint are unchanged are
        reused without calling ``stage``. Must be cheap: no jax import. Must depend
        only on ``settings`` and the installed distributions (names, versions):
        ``ppy run`` remembers a passed check until either changes."""
        ...

    def check(
        self, function: FunctionInfo, module: ModuleInfo, settings: Mapping[str, Any]
    ) -> Sequence[Check]:
        """The plugin's own rules for one function, pure, from source facts only."""
        ...

    def stage(self, request: StageRequest) -> Sequence[Entry | StageFailure]:
        """Stage every function in the request; one result per function."""
        ...


@dataclass(frozen=True)
class LiveCall:
    """The inputs of the calls of one abstract signature, as ``ppy record`` saw them.

    ``tree`` is the tree structure of the traced parameters' values (a tuple
    of them, in the signature's order), as the jit's own library flattens it
    (for jax, a ``PyTreeDef``); core holds it without reading it. Each leaf
    is ``("array", shape, dtype, weak)`` or ``("python", "int" | "float" |
    "bool" | "complex")``.
    """

    traced: tuple[str, ...]
    static: Mapping[str, Any]
    tree: Any
    leaves: tuple[tuple[Any, ...], ...]
    #: How many calls had this signature.
    count: int
    #: Where calls of this signature but for sizes had other sizes: each
    #: leaf's dims over them all, a symbol (``"B"``) where a dim took several
    #: values, shared by dims that moved together, as the signatures file
    #: generalises them; one ``dims`` for all those calls. None where no other
    #: sizes were seen.
    dims: tuple[tuple[int | str, ...], ...] | None = None


@dataclass(frozen=True)
class LiveRequest:
    """One jitted function to export in the process that recorded it (contract 1.2).

    ``function`` is the live jitted callable the program made, with the
    closure and globals it reads as they are at the end of the run; its
    module is the program's own when ``program`` is set (it runs as
    ``__main__``, and ``module`` is the name the build gives it).
    """

    root: Path
    settings: Mapping[str, Any]
    module: str
    qualname: str
    function: Any
    #: Every parameter of the signature, in order: (name, kind), where kind
    #: is ``positional`` or ``keyword_only``.
    parameters: tuple[tuple[str, str], ...]
    #: The calls seen, most called first.
    calls: tuple[LiveCall, ...]
    program: bool = True
    #: The run differentiated it in reverse mode (a call under ``jax.grad``
    #: or ``jax.vjp``): its export should carry a VJP.
    differentiated: bool = False
    #: The parameters its jit donates (``donate_argnums``, ``donate_argnames``).
    donated: frozenset[str] = frozenset()
    #: Its calls under ``jax.grad``, as the signatures file holds them
    #: (``"gradients"``, ``ppy.record.format``): each call's leaves, perturbed
    #: leaves, static values and cotangent patterns.
    gradients: tuple[Mapping[str, Any], ...] = ()


@runtime_checkable
class LiveExporter(Protocol):
    """An optional capability of a ``Plugin`` (contract 1.2): export a function
    from the live process that recorded its calls, where the build could not
    make it again from the source (it reads names made while the program
    runs). ``ppy record`` calls it after the program's last line; it must
    neither print nor raise for the user's code: a failure is a
    ``StageFailure``. The entry's captures say what the trace read, so that
    ``ppy run`` serves it only where all of it is the same."""

    def export_live(self, request: LiveRequest) -> Entry | StageFailure:
        """Export ``request.function`` at the signatures of ``request.calls``."""
        ...
