"""What a jitted function's trace reads besides its arguments, found in its bytecode.

A trace reads module globals: directly (``W``), through a project module
(``helper.K``), and through the project functions it calls, which read their
own. Each is baked into the export as the value it had at build time, so
each is recorded here as a ``ppy.kinds.jax_export.Captured``: the path from the staged
function to the value, and the value's fingerprint (``ppy.kinds.fingerprint``). The runtime
follows the same path in the running program and compares.

The paths come from the bytecode: every name a function loads, with the
attributes read from it right after (``LOAD_ATTR``, and ``getattr(X,
"name")`` with a literal name), in the function and in the code it nests
(comprehensions, inner functions). A name is a global (``LOAD_GLOBAL``), a
variable of the function around it (``LOAD_DEREF``: its closure), or, for a
method reached through its object, its ``self`` or ``cls``, and, for a
function a partial binds a module to, that parameter (``LOAD_FAST`` and
Python 3.13's ``LOAD_FAST_LOAD_FAST``). What is followed, and what is
recorded:

- a project module (a file under the project root): the attributes read from
  it, each as a value of its own; one held whole (passed on, or read by a
  name computed as the program runs) refuses the export, since what the
  trace reads of it cannot be known;
- a project function, jitted or not: followed into, its globals read in turn
  (its defaults and closure are recorded); a project method reached through
  its class or object (``Config.scaled``, ``net.forward``) likewise, with
  what it reads of ``cls`` or ``self``;
- a project class or an instance of one: the attributes read from it, each
  followed as above (data, callables, methods); one reached with no
  attribute chain is recorded whole (its attributes compared by the
  fingerprint) and its methods followed;
- a library module (``jnp``, ``math``, ``os``): the attributes read from
  it, data (``math.pi``, ``sys.argv``) and functions alike (``jnp.tanh``,
  which a program may replace with ``jnp.tanh = jnp.sin``), except that a
  call into ``IMPURE`` (``time.time()``, ``random.random()``) refuses the
  export;
- anything else: recorded whole.

A value with no fingerprint (an open file, an object of an unknown class)
refuses the export: ``Refused`` names it.
"""

from __future__ import annotations

import dis
import functools
import importlib.util
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
    layers,
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
#: Loads of a module global, and of a variable of the function around
#: (3.11's ``LOAD_CLASSDEREF`` is 3.12's ``LOAD_FROM_DICT_OR_DEREF``).
_GLOBAL_LOADS = ("LOAD_GLOBAL", "LOAD_NAME")
_CLOSURE_LOADS = ("LOAD_DEREF", "LOAD_CLASSDEREF", "LOAD_FROM_DICT_OR_DEREF")
#: Where a name a function loads lives; ``IMPORT``: a module it imports,
#: by its name (a relative one led by its dots).
GLOBAL, CELL, LOCAL, IMPORT = "global", "cell", "local", "import"


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


def _loaded(
    instruction: dis.Instruction, nested: bool, level: Any = 0
) -> list[tuple[str, str]] | None:
    """The names one instruction loads, in the order it pushes them, each
    with where it lives; None for an instruction that loads none. A local
    (``LOAD_FAST``; 3.13's ``LOAD_FAST_LOAD_FAST`` loads two) counts only in
    the function's own code: in a nested one it is that code's own."""
    name = instruction.opname
    if name == "IMPORT_NAME":  # ``level``: the constant loaded two before it
        return [(IMPORT, "." * (level if isinstance(level, int) else 0) + instruction.argval)]
    if name in _GLOBAL_LOADS:
        return [(GLOBAL, str(instruction.argval))]
    if name in _CLOSURE_LOADS:
        return [(CELL, str(instruction.argval))]
    if name.startswith("LOAD_FAST") and name != "LOAD_FAST_AND_CLEAR":
        if nested:
            return []
        names = instruction.argval
        return [(LOCAL, str(n)) for n in (names if isinstance(names, tuple) else (names,))]
    return None


def _getattr_literal(instructions: list[dis.Instruction], at: int) -> int | None:
    """Where ``getattr(X, "name")`` calls, if ``instructions[at]`` is its
    literal name: the index of the ``CALL`` of two arguments that follows."""
    literal = instructions[at]
    if literal.opname != "LOAD_CONST" or not isinstance(literal.argval, str):
        return None
    after = at + 1
    while after < len(instructions) and instructions[after].opname in ("PRECALL", "CACHE"):
        after += 1
    if after < len(instructions):
        call = instructions[after]
        if call.opname == "CALL" and call.arg == 2:
            return after
    return None


def _chains(code: types.CodeType, nested: bool = False) -> Iterator[tuple[str, tuple[str, ...]]]:
    """Each name the code loads, with where it lives and the attributes read
    from it right after; ``getattr(X, "name")`` with a literal name counts
    as ``X.name``."""
    chain: list[str] = []
    where = GLOBAL
    of_getattr = False  # ``chain`` is the first argument of a ``getattr`` call
    folded = -1  # the last instruction of a ``getattr`` folded into ``chain``
    instructions = list(dis.get_instructions(code))
    for index, instruction in enumerate(instructions):
        if index <= folded:
            continue
        level = instructions[index - 2].argval if index >= 2 else 0
        loads = _loaded(instruction, nested, level)
        if loads is not None:
            of_getattr = len(loads) == 1 and (where, chain) == (GLOBAL, ["getattr"])
            if chain:
                yield where, tuple(chain)
            for where, name in loads[:-1]:
                yield where, (name,)
            chain = [loads[-1][1]] if loads else []
            where = loads[-1][0] if loads else where
        elif instruction.opname in _ATTRS and chain:
            chain.append(str(instruction.argval))
        elif chain and of_getattr and (end := _getattr_literal(instructions, index)) is not None:
            chain.append(str(instruction.argval))
            folded, of_getattr = end, False
        elif chain:
            yield where, tuple(chain)
            chain, of_getattr = [], False
    if chain:
        yield where, tuple(chain)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _chains(constant, nested=True)


def _dotted(name: str, attr: str) -> str:
    """``name.attr``, where a name that says whose it is (``k of the function
    around inner``) keeps saying so after the attribute."""
    head, space, whose = name.partition(" ")
    return f"{head}.{attr}{space}{whose}"


#: A name a method or a partial binds in a function: the value, its path
#: from the staged function, and its name in a refusal's words.
Bound = dict[str, tuple[Any, tuple[str, ...], str]]


class _Scan:
    def __init__(
        self, root: str, limit: int, flatten: Callable[[Any], Any], main: str | None
    ) -> None:
        self.root = os.path.join(os.path.abspath(root), "")
        self.main = main
        self.limit = limit
        self.flatten = flatten
        self.found: dict[tuple[str, ...], Captured] = {}
        self.followed: set[tuple[types.CodeType, tuple[int, ...]]] = set()
        #: Classes whose methods are followed already (by id: a class may not hash).
        self.classes: set[int] = set()

    def in_project(self, filename: str | None) -> bool:
        return bool(filename) and os.path.abspath(str(filename)).startswith(self.root)

    def project_module(self, value: Any) -> bool:
        return isinstance(value, types.ModuleType) and self.in_project(
            getattr(value, "__file__", None)
        )

    def _project_class(self, value: Any) -> bool:
        return isinstance(value, type) and self.in_project(
            getattr(sys.modules.get(value.__module__), "__file__", None)
        )

    def _project_function(self, value: Any) -> types.FunctionType | None:
        fn = python_function(value)
        return fn if fn is not None and self.in_project(fn.__code__.co_filename) else None

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

    def function(
        self, fn: types.FunctionType, path: tuple[str, ...], bound: Bound | None = None
    ) -> None:
        """Follow a function into what it reads: its globals, its closure's
        variables and, where ``bound`` names them (a method's ``self``, a
        parameter a partial binds), its parameters."""
        bound = bound or {}
        # Not ``__name__``: the program's is traced as ``__main__``.
        owner = str(fn.__module__ or fn.__globals__.get("__name__", "?"))
        if path:  # a function it calls: its code, defaults and closure count too
            # At every name it is reached by (``scale`` and ``helper.scale``):
            # a program may rebind one and not the other.
            self.record((*path, DEFAULTS), f"{owner}.{fn.__qualname__}", defaults(fn))
        key = (fn.__code__, tuple(id(value) for value, _, _ in bound.values()))
        if key in self.followed:
            return  # what it reads is recorded under the first name
        self.followed.add(key)
        cells = closure(fn)
        # A library's wrapper (jaxtyping's, around the program's function)
        # holds data of its own made from that function (its signature),
        # compared where it can be.
        own = self.in_project(fn.__code__.co_filename)
        for where, chain in sorted(set(_chains(fn.__code__))):
            head, attrs = chain[0], chain[1:]
            if where == GLOBAL:
                if head in fn.__globals__:  # else a builtin, or a name defined later
                    self.value(fn.__globals__[head], (*path, head), f"{owner}.{head}", attrs)
            elif where == CELL and head in cells:
                # A function made inside another reads that one's variables:
                # each is traced as a constant, so it is compared like a global.
                where_ = f"{head} of the function around {fn.__name__}"
                self.value(cells[head], (*path, CLOSURE, head), where_, attrs, strict=own)
            elif head in bound:  # a method's self (a cell where a lambda reads it too)
                value, at, name = bound[head]
                self.value(value, at, name, attrs)
            elif where == IMPORT and self.imports_project_module(head, fn):
                raise Refused(
                    f"{owner}.{fn.__qualname__}",
                    f"it imports {head.lstrip('.') or 'a module'} of the program while traced, "
                    "whose values a run cannot reach to compare; import it where the "
                    "function is defined, or where the jit is made",
                )

    def imports_project_module(self, name: str, fn: types.FunctionType) -> bool:
        """Whether an import a function makes is of the program's own
        modules: a relative one, or one whose file is in the project (one
        not imported yet is looked for, not imported)."""
        if name.startswith("."):
            return True
        module = sys.modules.get(name)
        if module is not None:
            return self.project_module(module)
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):  # a parent package that fails to import
            return True
        return spec is not None and self.in_project(spec.origin)

    def method(self, method: types.MethodType, path: tuple[str, ...], name: str) -> bool:
        """Follow a project method reached through its class or object
        (``Config.scaled``, ``net.forward``): its function, and what it
        reads of the ``cls`` or ``self`` it is bound to. False where it is
        no project method."""
        fn = self._project_function(method.__func__)
        if fn is None or not fn.__code__.co_argcount:
            return False
        first = fn.__code__.co_varnames[0]
        owner = (method.__self__, (*path, "__self__"), f"{first} of {name}")
        self.function(fn, (*path, "__func__"), {first: owner})
        return True

    def members(self, kind: type, path: tuple[str, ...], name: str) -> None:
        """Follow the methods of a project class reached whole (``cls(x)``,
        an instance passed on): each may run in the trace, and reads globals
        of its own. What the class holds is compared by its fingerprint."""
        if id(kind) in self.classes:
            return
        self.classes.add(id(kind))
        for base in kind.__mro__:
            if not self._project_class(base):
                continue
            for attr, raw in sorted(vars(base).items()):
                if isinstance(raw, property):
                    for part in ("fget", "fset", "fdel"):
                        accessor = getattr(raw, part)
                        if self._project_function(accessor) is not None:
                            self.value(accessor, (*path, attr, part), _dotted(name, attr), ())
                elif isinstance(raw, types.FunctionType | staticmethod | classmethod):
                    inner = getattr(kind, attr, None)
                    if isinstance(inner, types.MethodType) or self._project_function(inner):
                        self.value(inner, (*path, attr), _dotted(name, attr), ())

    def value(
        self,
        value: Any,
        path: tuple[str, ...],
        name: str,
        attrs: tuple[str, ...],
        *,
        strict: bool = True,
    ) -> None:
        """Record ``value`` (or follow it: a project module, function,
        method, class or instance); ``strict`` off, a value with no
        fingerprint is not compared."""
        if isinstance(value, types.ModuleType):
            self.module(value, path, name, attrs, strict=strict)
            return
        if _reads_environment(value):  # from os import getenv: its globals hold environ
            self.record((*path, "environ"), "os.environ", os.environ, strict=False)
            return
        if isinstance(value, types.MethodType) and self.method(value, path, name):
            return
        fn = self._project_function(value)
        if fn is not None:
            self.function(fn, path)
            return
        project_class = self._project_class(value)
        if project_class or self._project_class(type(value)):
            if attrs:  # what is read of it, each followed in turn
                try:
                    inner = getattr(value, attrs[0])
                except AttributeError:
                    return  # the trace would fail on it
                self.value(inner, (*path, attrs[0]), _dotted(name, attrs[0]), attrs[1:])
                return
            self.record(path, name, value, strict=strict)
            if project_class:
                self.members(value, path, name)
            else:
                self.members(type(value), (*path, "__class__"), _dotted(name, "__class__"))
            return
        self.record(path, name, value, strict=strict)

    def module(
        self,
        value: types.ModuleType,
        path: tuple[str, ...],
        name: str,
        attrs: tuple[str, ...],
        *,
        strict: bool,
    ) -> None:
        """A module the trace reads attributes of: a project module's, each
        followed; a library's, data and functions recorded."""
        if not attrs:
            if self.project_module(value):
                raise Refused(
                    name,
                    "it is a module of the program, held whole (passed on, or read by a "
                    "name computed as the program runs), so ppy cannot tell which of its "
                    "values the trace reads; read them by name (settings.scale) instead",
                )
            self.record(path, name, value, strict=strict)
            return
        try:
            inner = getattr(value, attrs[0])
        except AttributeError:
            return  # the trace would fail on it
        if self.project_module(value) or isinstance(inner, types.ModuleType):
            self.value(inner, (*path, attrs[0]), _dotted(name, attrs[0]), attrs[1:])
        elif _reads_environment(inner):  # os.getenv(...): what it reads is os.environ
            self.record((*path, "environ"), f"{name}.environ", os.environ, strict=False)
        elif not callable(inner):  # a library's data: math.pi, sys.argv
            self.record((*path, attrs[0]), _dotted(name, attrs[0]), inner, strict=False)
        elif value.__name__.partition(".")[0] in IMPURE or value.__name__ in IMPURE:
            raise Refused(
                _dotted(name, attrs[0]),
                "it is called while tracing and answers anew in each process (the "
                "clock, randomness); the export would keep the build's answer",
            )
        else:  # a library's function, compared by what it is: a program may patch it
            self.record((*path, attrs[0]), _dotted(name, attrs[0]), inner, strict=False)


def _bound_parameters(fn: Any, function: types.FunctionType) -> dict[int, str]:
    """Which of ``function``'s parameters each value ``bound_values(fn)``
    finds binds, by its index there: the innermost partial's arguments are
    the first parameters, and a keyword binds its own name. An index whose
    parameter cannot be told (an ``*args``) is left out."""
    code = function.__code__
    positional = code.co_varnames[: code.co_argcount]
    named = set(code.co_varnames[: code.co_argcount + code.co_kwonlyargcount])
    partials = [layer for layer in layers(fn) if isinstance(layer, functools.partial)]
    taken = 0
    starts: dict[int, int] = {}
    for layer in reversed(partials):  # the innermost binds first
        starts[id(layer)] = taken
        taken += len(layer.args)
    found: dict[int, str] = {}
    index = 0
    for layer in partials:  # bound_values' order: outermost first
        for offset in range(len(layer.args)):
            at = starts[id(layer)] + offset
            if at < len(positional):
                found[index] = positional[at]
            index += 1
        for keyword in sorted(layer.keywords):
            if keyword in named:
                found[index] = keyword
            index += 1
    return found


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
    # ``jax.jit(partial(g, k))``: what the partial binds is traced as
    # constants, so it is compared like a global, and a project function
    # among it is followed for what it reads in turn. A project module it
    # binds is followed by what ``g`` reads of that parameter.
    parameters = _bound_parameters(fn, function)
    bound: Bound = {}
    for index, value in enumerate(bound_values(fn)):
        where = (BOUND, str(index))
        binds = f"that a partial binds to {function.__qualname__}"
        if scan.project_module(value) and index in parameters:
            bound[parameters[index]] = (value, where, f"{parameters[index]} {binds}")
        else:
            scan.value(value, where, f"argument {index} {binds}", ())
    scan.function(function, (), bound)
    return tuple(scan.found[path] for path in sorted(scan.found))
