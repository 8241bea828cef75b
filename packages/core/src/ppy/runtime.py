"""The contract between core and a runtime (entry-point group ``ppy.runtimes``).

A runtime is registered under the entry kind it loads (``jax.export``,
``xla.scalar``) and instantiated with no arguments by ``ppy run``. For each
entry whose function has just been defined, ``ppy run`` calls ``bind`` with
the entry and the original (decorated) callable; what it returns is bound in
the original's place. The returned callable must fall back to ``original``
for any call it cannot serve, and never change what the caller observes.

A runtime that sets up or undoes something for the whole process is also a
``ManagedRuntime``: ``ppy run`` calls its ``start(run)`` before the program
runs (whether or not any entry of its kind will be bound: the artifact's
candidates of that kind may all have stayed) and its ``close()`` once the
program has ended. ``run`` is a ``RunContext``: the run's own services, such
as the hook that waits for the program's import of a module. Neither may
import what the program has not imported yet, nor change what it observes.

This module and the kinds contracts (``ppy.kinds``) are the whole surface a
runtime reaches core through; docs/plugins.md documents it, and an import
contract (``nox -s lint``) holds ppy's own runtime to it. A runtime declares
the ``CONTRACT`` it was written for as its ``contract``; the registry skips,
with a line, one written for another major version. What a runtime uses
outside a started run (the entry's records, the logger, the executable
cache) is re-exported from where it lives and loaded on first use, since
``ppy run`` imports this module at every start.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ppy.artifact.entry import Entry
    from ppy.cache import ExecutableCache, executable_key
    from ppy.log import Held, get_logger, holding, show, verbose
    from ppy.spec import WEAK_SCALARS, WIDE_SCALARS, Axis, MeshSpec, TensorSpec

__all__ = [
    "CONTRACT",
    "ORIGINAL",
    "WEAK_SCALARS",
    "WIDE_SCALARS",
    "Axis",
    "Entry",
    "ExecutableCache",
    "Held",
    "ManagedRuntime",
    "MeshSpec",
    "NotBound",
    "RunContext",
    "Runtime",
    "TensorSpec",
    "executable_key",
    "get_logger",
    "holding",
    "show",
    "verbose",
]

#: The version of this contract: (major, minor). A minor version adds to it
#: and breaks no runtime written for an earlier one of the same major; a
#: major version changes what a runtime is given or must do. A runtime sets
#: ``contract`` to the version it was written for (a literal, not this name).
CONTRACT: tuple[int, int] = (1, 1)

#: Where each re-exported name lives; imported when the name is first used.
_REEXPORTED: Mapping[str, str] = {
    "Axis": "ppy.spec",
    "Entry": "ppy.artifact.entry",
    "ExecutableCache": "ppy.cache",
    "Held": "ppy.log",
    "MeshSpec": "ppy.spec",
    "TensorSpec": "ppy.spec",
    "WEAK_SCALARS": "ppy.spec",
    "WIDE_SCALARS": "ppy.spec",
    "executable_key": "ppy.cache",
    "get_logger": "ppy.log",
    "holding": "ppy.log",
    "show": "ppy.log",
    "verbose": "ppy.log",
}


def __getattr__(name: str) -> object:
    if name in _REEXPORTED:
        # __import__, not importlib.import_module: an import through the
        # import statement's path shows in ``python -X importtime`` and in
        # ``ppy doctor``'s import report, where the run's cost is read.
        return getattr(__import__(_REEXPORTED[name], fromlist=[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: The attribute a runtime sets on each callable it binds, holding the
#: original: what the program reaches under that name stands in for it
#: (``ppy.kinds.fingerprint`` follows it to the code the build traced).
ORIGINAL = "__ppy_original__"


class NotBound(Exception):
    """The entry cannot serve this process (platform, versions, damage); the
    original stays in place and the reason is logged as ``run.unbound``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class RunContext:
    """What ``ppy run`` gives ``ManagedRuntime.start``: the services of this run.

    They belong to the run, not to core's modules: a runtime reaches them
    here rather than by importing how ``ppy run`` is put together.
    """

    #: ``after_import(name, callback)``: call ``callback`` once the program
    #: has imported module ``name`` (at once if it is imported already),
    #: right after the module has executed. ppy imports no module of the
    #: program's ahead of it: jax reads ``JAX_ENABLE_X64`` and ``XLA_FLAGS``
    #: as it loads, and a program may set them before its own import.
    after_import: Callable[[str, Callable[[], None]], None]


@runtime_checkable
class Runtime(Protocol):
    #: The ``CONTRACT`` this runtime was written for: ``(1, 0)``.
    contract: tuple[int, int]

    def bind(self, entry: Entry, original: Callable[..., Any]) -> Callable[..., Any]:
        """A callable to put in place of ``original``, or raise ``NotBound``."""
        ...


@runtime_checkable
class ManagedRuntime(Runtime, Protocol):
    """A runtime with process-wide set-up: ``ppy run`` calls ``start`` before
    the program and ``close`` after it, however it ended."""

    def start(self, run: RunContext) -> None:
        """The program is about to run; import nothing it has not imported."""
        ...

    def close(self) -> None:
        """The program has ended; undo what ``start`` and binding set up."""
        ...
