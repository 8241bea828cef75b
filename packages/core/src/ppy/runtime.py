"""The contract between core and a runtime (entry-point group ``ppy.runtimes``).

A runtime is registered under the entry kind it loads (``jax.export``,
``xla.scalar``) and instantiated with no arguments by ``ppy run``. For each
entry whose function has just been defined, ``ppy run`` calls ``bind`` with
the entry and the original (decorated) callable; what it returns is bound in
the original's place. The returned callable must fall back to ``original``
for any call it cannot serve, and never change what the caller observes.

A runtime that sets up or undoes something for the whole process is also a
``ManagedRuntime``: ``ppy run`` calls its ``start()`` before the program runs
(whether or not any entry of its kind will be bound: the artifact's
candidates of that kind may all have stayed) and its ``close()`` once the
program has ended. Neither may import what the program has not imported yet,
nor change what it observes.

This module is the whole surface a runtime needs; docs/plugins.md documents
it. ``Entry`` and ``TensorSpec`` are re-exported from where they live.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from ppy.artifact.entry import Entry
from ppy.spec import TensorSpec

__all__ = ["ORIGINAL", "Entry", "ManagedRuntime", "NotBound", "Runtime", "TensorSpec"]

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


@runtime_checkable
class Runtime(Protocol):
    def bind(self, entry: Entry, original: Callable[..., Any]) -> Callable[..., Any]:
        """A callable to put in place of ``original``, or raise ``NotBound``."""
        ...


@runtime_checkable
class ManagedRuntime(Runtime, Protocol):
    """A runtime with process-wide set-up: ``ppy run`` calls ``start`` before
    the program and ``close`` after it, however it ended."""

    def start(self) -> None:
        """The program is about to run; import nothing it has not imported."""
        ...

    def close(self) -> None:
        """The program has ended; undo what ``start`` and binding set up."""
        ...
