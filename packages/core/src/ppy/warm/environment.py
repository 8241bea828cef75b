"""What the server's imports read and set of the environment.

jax reads its configuration (``JAX_ENABLE_X64``, ``EAGER_CONSTANT_FOLDING``...)
from the environment when it is imported, numpy its CPU features, a preloaded
library its own flags; what they read then, they keep. A warm child's modules
were imported by the server, so a run may be served only where the values
its modules would have read are the ones the server's imports read.

The server imports in groups (numpy, jax, ppy's own run path, each preloaded
package) and records, per group, every variable read through ``os.environ``
(``os.getenv`` included) and every one the import set (jax sets
``TF_CPP_MIN_LOG_LEVEL``). Three checks use the record:

- the key (``ppy.warm.key``) holds the names jax and numpy read, so another
  value gets another server; ``tests/warm/test_environment.py`` checks that it
  holds every name the installed versions read;
- the server sends a run cold where its environment differs from the
  server's in any recorded name the key does not hold (a preload's own flag);
- the child, when the program first imports a group (``ppy.warm.watch``),
  compares what the program has set by then, and sets what the import set.

What C code reads with ``getenv`` at import cannot be recorded from Python;
those names are listed (``C_READS``, ``C_PREFIXES``).
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["C_PREFIXES", "C_READS", "Group", "differences", "recorded"]

#: Variables the C code of a group reads with ``getenv`` when it is loaded:
#: numpy's CPU dispatch and memory policy, jaxlib's logging.
C_READS: Final[Mapping[str, tuple[str, ...]]] = {
    "numpy": ("NPY_DISABLE_CPU_FEATURES", "NPY_ENABLE_CPU_FEATURES", "NUMPY_WARN_IF_NO_MEM_POLICY"),
    "jax": ("TF_CPP_MIN_LOG_LEVEL", "TF_CPP_MAX_VLOG_LEVEL", "TF_CPP_VMODULE"),
}
#: And the families a BLAS reads as numpy loads it (thread counts, core types).
C_PREFIXES: Final[Mapping[str, tuple[str, ...]]] = {
    "numpy": ("OPENBLAS_", "GOTO_", "OMP_", "MKL_"),
}


@dataclass(frozen=True)
class Group:
    """One group of the server's imports and what it read and set.

    ``before`` holds, for every name the group read or set (and those of
    ``C_READS``/``C_PREFIXES``), its value when the server started (None:
    unset); ``wrote``, the value the import left in a name it changed."""

    name: str
    modules: tuple[str, ...]
    read: frozenset[str]
    before: Mapping[str, str | None]
    wrote: Mapping[str, str | None]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "modules": list(self.modules),
            "read": sorted(self.read),
            "wrote": dict(self.wrote),
        }


def recorded(plan: Sequence[tuple[str, Sequence[str]]], start: Mapping[str, str]) -> list[Group]:
    """Import each group of ``plan`` (a name and its modules) in order, and
    record what each read and set of ``os.environ``; ``start`` is the
    environment before any of them."""
    groups = []
    for name, modules in plan:
        seen: set[str] = set()
        ahead = dict(os.environ)
        with _reading(seen):
            for module in modules:
                importlib.import_module(module)
        after = dict(os.environ)
        wrote = {n: after.get(n) for n in set(ahead) | set(after) if ahead.get(n) != after.get(n)}
        names = seen | set(wrote) | set(C_READS.get(name, ()))
        prefixes = C_PREFIXES.get(name, ())
        if prefixes:
            names |= {n for n in start if n.startswith(prefixes)}
        before = {n: start.get(n) for n in sorted(names)}
        groups.append(Group(name, tuple(modules), frozenset(seen), before, wrote))
    return _merged(groups)


def _merged(groups: list[Group]) -> list[Group]:
    """One group per name: a preload inside jax (``jax.experimental.sparse``)
    joins jax's group."""
    by_name: dict[str, Group] = {}
    for group in groups:
        found = by_name.get(group.name)
        if found is not None:
            group = Group(
                group.name,
                found.modules + group.modules,
                found.read | group.read,
                {**found.before, **group.before},
                {**found.wrote, **group.wrote},
            )
        by_name[group.name] = group
    return list(by_name.values())


def differences(group: Group, environ: Mapping[str, str]) -> list[str]:
    """The names whose value in ``environ`` is not what ``group``'s import saw."""
    changed = [n for n, value in group.before.items() if environ.get(n) != value]
    prefixes = C_PREFIXES.get(group.name, ())
    if prefixes:
        changed += [n for n in environ if n.startswith(prefixes) and n not in group.before]
    return sorted(changed)


@contextlib.contextmanager
def _reading(into: set[str]) -> Iterator[None]:
    """Note in ``into`` every name read from ``os.environ`` (or ``os.environb``)
    while inside; going through the whole mapping reads every name."""
    cls: Any = os._Environ
    getitem, iterate = cls.__getitem__, cls.__iter__

    def note(key: object) -> None:
        into.add(os.fsdecode(key) if isinstance(key, bytes) else str(key))

    def read(self: Any, key: Any) -> Any:
        note(key)
        return getitem(self, key)

    def every(self: Any) -> Iterator[Any]:
        for key in iterate(self):
            note(key)
            yield key

    cls.__getitem__, cls.__iter__ = read, every
    try:
        yield
    finally:
        cls.__getitem__, cls.__iter__ = getitem, iterate
