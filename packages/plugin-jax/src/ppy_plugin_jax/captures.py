"""What a jitted function's trace reads besides its arguments, found in its bytecode.

A trace reads module globals: directly (``W``), through a project module
(``helper.K``), and through the project functions it calls, which read their
own. Each is baked into the export as the value it had at build time, so
each is recorded here as a ``ppy.kinds.jax_export.Captured``: the path from the staged
function to the value, and the value's fingerprint (``ppy.kinds.fingerprint``). The runtime
follows the same path in the running program and compares.

The paths come from the bytecode: every global a function loads
(``LOAD_GLOBAL``), with the attributes read from it right after
(``LOAD_ATTR``), in the function and in the code it nests (comprehensions,
inner functions). What is followed, and what is recorded:

- a project module (a file under the project root): the attributes read from
  it, each as a global of its own;
- a project function, jitted or not: followed into, its globals read in turn
  (its defaults and closure are recorded);
- a library module (``jnp``, ``math``, ``os``): the attributes read from
  it, data (``math.pi``, ``sys.argv``) and functions alike (``jnp.tanh``,
  which a program may replace with ``jnp.tanh = jnp.sin``), except that a
  call into ``IMPURE`` (``time.time()``, ``random.random()``) refuses the
  export;
- anything else: recorded whole.

The variables a function made inside another reads of that one (its
closure) are followed as its globals are.

A global with no fingerprint (an open file, an object of an unknown class)
refuses the export: ``Refused`` names it.
"""

from __future__ import annotations

import dis
import os
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

from ppy.kinds.fingerprint import (
    BOUND,
    CLOSURE,
    DEFAULTS,
    Unreadable,
    bound_values,
    closure,
    defaults,
    fingerprint,
    python_function,
    traced_function,
)
from ppy.kinds.jax_export import Captured

__all__ = ["Refused", "captures"]

#: Library modules whose functions answer anew in each process (the clock,
#: randomness): a trace that calls one froze the build's answer.
#: ``numpy.random`` by its full name.
IMPURE = frozenset({"time", "random", "datetime", "uuid", "secrets", "numpy.random"})
#: Library functions that read the process's environment: a trace that calls
#: one read ``os.environ``, which is compared as a value of its own.
_ENVIRONMENT_READERS: tuple[Any, ...] = tuple(
    f for f in (getattr(os, "getenv", None), getattr(os, "getenvb", None)) if f is not None
)
_LOADS = ("LOAD_GLOBAL", "LOAD_NAME")


def _reads_environment(value: Any) -> bool:
    """By identity: ``==`` of an array is an array."""
    return any(value is reader for reader in _ENVIRONMENT_READERS)


_ATTRS = ("LOAD_ATTR", "LOAD_METHOD")


class Refused(Exception):
    """A captured global has no fingerprint; ``name`` is the global, the message why."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(f"{name}: {why}")
        self.name = name
        self.why = why


def _chains(code: types.CodeType) -> Iterator[tuple[str, ...]]:
    """Each global the code loads, with the attributes read from it right after."""
    chain: list[str] = []
    for instruction in dis.get_instructions(code):
        if instruction.opname in _LOADS:
            if chain:
                yield tuple(chain)
            chain = [str(instruction.argval)]
        elif instruction.opname in _ATTRS and chain:
            chain.append(str(instruction.argval))
        elif chain:
            yield tuple(chain)
            chain = []
    if chain:
        yield tuple(chain)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _chains(constant)


class _Scan:
    def __init__(
        self, root: str, limit: int, flatten: Callable[[Any], Any], main: str | None
    ) -> None:
        self.root = os.path.join(os.path.abspath(root), "")
        self.main = main
        self.limit = limit
        self.flatten = flatten
        self.found: dict[tuple[str, ...], Captured] = {}
        self.followed: set[types.CodeType] = set()

    def in_project(self, filename: str | None) -> bool:
        return bool(filename) and os.path.abspath(str(filename)).startswith(self.root)

    def _project_module(self, value: Any) -> bool:
        return isinstance(value, types.ModuleType) and self.in_project(
            getattr(value, "__file__", None)
        )

    def record(self, path: tuple[str, ...], name: str, value: Any, *, strict: bool = True) -> None:
        """Fingerprint one value; one that has none refuses the export, or,
        where a library holds it (``strict`` off: ``jax.config``), is not compared."""
        try:
            digest = fingerprint(value, limit=self.limit, flatten=self.flatten, main=self.main)
        except Unreadable as error:
            if strict:
                raise Refused(name, str(error)) from None
            return
        self.found[path] = Captured(path, name, digest)

    def function(self, fn: types.FunctionType, path: tuple[str, ...]) -> None:
        # Not ``__name__``: the program's is traced as ``__main__``.
        owner = str(fn.__module__ or fn.__globals__.get("__name__", "?"))
        if path:  # a function it calls: its code, defaults and closure count too
            # At every name it is reached by (``scale`` and ``helper.scale``):
            # a program may rebind one and not the other.
            self.record((*path, DEFAULTS), f"{owner}.{fn.__qualname__}", defaults(fn))
        if fn.__code__ in self.followed:
            return  # what it reads is recorded under the first name
        self.followed.add(fn.__code__)
        for chain in sorted(set(_chains(fn.__code__))):
            head = chain[0]
            if head not in fn.__globals__:
                continue  # a builtin, or a name defined later (then the trace fails)
            self.value(fn.__globals__[head], (*path, head), f"{owner}.{head}", chain[1:])

    def value(
        self,
        value: Any,
        path: tuple[str, ...],
        name: str,
        attrs: tuple[str, ...],
        *,
        strict: bool = True,
    ) -> None:
        """Record ``value`` (or follow it: a project module, function or
        class); ``strict`` off, a value with no fingerprint is not compared."""
        if isinstance(value, types.ModuleType):
            if not attrs:
                self.record(path, name, value)
                return
            try:
                inner = getattr(value, attrs[0])
            except AttributeError:
                return  # the trace would fail on it
            if self._project_module(value) or isinstance(inner, types.ModuleType):
                self.value(inner, (*path, attrs[0]), f"{name}.{attrs[0]}", attrs[1:])
            elif _reads_environment(inner):  # os.getenv(...): what it reads is os.environ
                self.record((*path, "environ"), f"{name}.environ", os.environ, strict=False)
            elif not callable(inner):  # a library's data: math.pi, sys.argv
                self.record((*path, attrs[0]), f"{name}.{attrs[0]}", inner, strict=False)
            elif value.__name__.partition(".")[0] in IMPURE or value.__name__ in IMPURE:
                raise Refused(
                    f"{name}.{attrs[0]}",
                    "it is called while tracing and answers anew in each process (the "
                    "clock, randomness); the export would keep the build's answer",
                )
            else:  # a library's function, compared by what it is: a program may patch it
                self.record((*path, attrs[0]), f"{name}.{attrs[0]}", inner, strict=False)
            return
        if _reads_environment(value):  # from os import getenv: its globals hold environ
            self.record((*path, "environ"), "os.environ", os.environ, strict=False)
            return
        fn = python_function(value)
        if fn is not None and self.in_project(fn.__code__.co_filename):
            self.function(fn, path)
            return
        if (
            isinstance(value, type)
            and self.in_project(getattr(sys.modules.get(value.__module__), "__file__", None))
            and attrs
        ):
            inner = getattr(value, attrs[0], None)
            self.value(inner, (*path, attrs[0]), f"{name}.{attrs[0]}", attrs[1:])
            return
        self.record(path, name, value, strict=strict)


def captures(
    fn: Any,
    *,
    root: str,
    limit: int,
    flatten: Callable[[Any], Any],
    main: str | None = None,
) -> tuple[Captured, ...]:
    """Every value ``fn``'s trace can read from globals, fingerprinted; ``Refused``
    names the first that cannot be. ``main``: the program's module name where
    it runs as ``__main__`` (the recorded process), as the run fingerprints it."""
    function = traced_function(fn)
    if function is None:
        return ()
    scan = _Scan(root, limit, flatten, main)
    scan.function(function, ())
    # A function made inside another reads that one's variables: each is
    # traced as a constant, so it is compared like a global. A library's
    # wrapper (jaxtyping's, around the program's function) holds the
    # function it wraps there, which is followed, and data of its own made
    # from that function (its signature), compared where it can be.
    own = scan.in_project(function.__code__.co_filename)
    for name, value in sorted(closure(function).items()):
        where = f"{name} of the function around {function.__name__}"
        scan.value(value, (CLOSURE, name), where, (), strict=own)
    # ``jax.jit(partial(g, k))``: what the partial binds is traced as
    # constants, so it is compared like a global, and a project function
    # among it is followed for what it reads in turn.
    for index, value in enumerate(bound_values(fn)):
        scan.value(
            value,
            (BOUND, str(index)),
            f"argument {index} that a partial binds to {function.__qualname__}",
            (),
        )
    return tuple(scan.found[path] for path in sorted(scan.found))
