"""Fingerprints of the values a trace captured, so a run can tell they changed.

A jitted function is traced at its first call, and what it reads from module
globals then is baked into the program it compiles: an array loaded at
import, a flag set in ``main()``, a scale read from the environment. An
export traced at build time baked in the build's values. The export worker
records a fingerprint of each value the function's trace could read; the
runtime takes the staged path only while each value has the same
fingerprint.

A fingerprint is a sha256 over a canonical text of the value: its type and
its content, all of it. Two values with the same fingerprint compute the
same trace; where a value's content cannot be read (an open file, a lock, an
object of a class with no declared structure) there is no fingerprint, and
the function is not staged. Arrays are hashed byte for byte, up to a limit
above which they do not belong in an artifact (they are weights: pass them
as parameters).

A protobuf message (an onnx ``ModelProto``) is fingerprinted by its
deterministic serialization, under the same limit.

Functions and classes are fingerprinted by their qualified name, with a
function's line and bytecode, defaults and closure, which is where a library such as optax
keeps its hyperparameters. A function of the project itself is not
fingerprinted here: the worker follows it, and records what it reads in turn.

This module needs no jax. Pytrees (flax's FrozenDict, equinox Modules) are
read through ``flatten``, jax's ``tree_util.tree_flatten``, which the caller
passes in; numpy is imported only when an array is met.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import os
import sys
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ppy.kinds.keys import is_key

__all__ = [
    "BOUND",
    "CLOSURE",
    "DEFAULTS",
    "DEFAULT_LIMIT",
    "Unreadable",
    "absl_flags",
    "defaults",
    "fingerprint",
    "bound_values",
    "closure",
    "python_function",
    "resolve",
    "traced_function",
]

#: The largest array (in bytes) a trace may capture and stay staged: 1 MiB.
DEFAULT_LIMIT = 1 << 20
#: How deep a structure is followed before it counts as unreadable.
_DEPTH = 32
_PLAIN = (type(None), bool, int, float, complex, str, bytes)
#: The most attributes an object compared by its ``__dict__`` may have.
_RECORD_FIELDS = 64

#: The path step that stands for a function's ``defaults()``.
DEFAULTS = "<defaults>"
#: The path step that stands for what the partials a jit wraps bind (``bound_values``).
BOUND = "<bound>"
#: The path step that stands for a function's closure (``closure``); the next
#: step names a variable of the function around it.
CLOSURE = "<closure>"

Flatten = Callable[[Any], tuple[list[Any], Any]]


class Unreadable(Exception):
    """The value has no fingerprint; the message says why, in the user's words."""


def fingerprint(
    value: Any,
    *,
    limit: int = DEFAULT_LIMIT,
    flatten: Flatten | None = None,
    main: str | None = None,
) -> str:
    """``sha256:HEX`` of the value's canonical text; ``Unreadable`` when it has none.

    ``main`` is the name the program's own module had at build time: under
    ``ppy run`` it runs as ``__main__``, and a class or function of it is
    named as it was when the build imported it.
    """
    digest = hashlib.sha256()
    _Writer(digest, limit, flatten, main).write(value, 0)
    return f"sha256:{digest.hexdigest()}"


def _name(thing: Any) -> str:
    module = getattr(thing, "__module__", None) or "?"
    return f"{module}.{getattr(thing, '__qualname__', getattr(thing, '__name__', '?'))}"


class _Writer:
    def __init__(self, digest: Any, limit: int, flatten: Flatten | None, main: str | None) -> None:
        self.digest = digest
        self.limit = limit
        self.flatten = flatten
        self.main = main

    def name(self, thing: Any) -> str:
        return self.qualified(_name(thing))

    def qualified(self, name: str) -> str:
        """``name`` with the main module's name for ``__main__``."""
        if self.main is not None and name.startswith("__main__."):
            name = f"{self.main}.{name.removeprefix('__main__.')}"
        return name

    def text(self, *parts: str) -> None:
        for part in parts:
            data = part.encode("utf-8", "surrogatepass")
            self.digest.update(len(data).to_bytes(8, "little"))
            self.digest.update(data)

    def write(self, value: Any, depth: int) -> None:
        if depth > _DEPTH:
            raise Unreadable("it nests too deep to compare")
        kind = type(value)
        if isinstance(value, _PLAIN):
            self.text(kind.__name__, repr(value))
        elif isinstance(value, enum.Enum):
            self.text("enum", self.name(kind), value.name)
        elif _is_array(value):
            self.array(value)
        elif _is_protobuf(value):  # an onnx ModelProto: its bytes, as protobuf writes them
            self.message(value)
        elif isinstance(value, types.ModuleType):
            self.text("module", value.__name__)
        elif isinstance(value, type):
            self.text("class", self.name(value))
        elif isinstance(value, functools.partial):
            self.text("partial")
            for part in (value.func, value.args, value.keywords):
                self.write(part, depth + 1)
        elif isinstance(value, types.FunctionType):
            self.function(value, depth)
        elif callable(value) and python_function(value) is not None:  # jax.jit(f), wraps
            self.text("wraps", self.name(kind))
            self.function(python_function(value), depth)  # type: ignore[arg-type]
        elif isinstance(value, types.BuiltinFunctionType | types.MethodType):
            self.text("callable", self.name(value))
            self.write(getattr(value, "__self__", None), depth + 1)
        elif _is_dtype(value):
            self.text("dtype", str(value))
        elif (isinstance(value, tuple | list) and kind in (tuple, list)) or _is_namedtuple(value):
            self.text(self.name(kind), str(len(value)))
            for item in value:
                self.write(item, depth + 1)
        elif isinstance(value, dict) and kind is dict:
            self.mapping(value, depth)
        elif isinstance(value, Mapping):  # os.environ: its items, in key order
            self.text("mapping", self.name(kind))
            self.mapping(dict(sorted(value.items())), depth)
        elif isinstance(value, frozenset | set) and kind in (frozenset, set):
            items = sorted(
                fingerprint(v, limit=self.limit, flatten=self.flatten, main=self.main)
                for v in value
            )
            self.text(kind.__name__, *items)
        elif dataclasses.is_dataclass(value):
            self.text("dataclass", self.name(kind))
            for field in dataclasses.fields(value):
                self.text(field.name)
                self.write(getattr(value, field.name), depth + 1)
        elif _is_treedef(value):  # jax's PyTreeDef: flax.nnx's GraphDef is one
            self.treedef(value, depth)
        elif _absl(value, "FlagHolder"):  # absl.flags: one flag, as the program parsed it
            self.text("flag", str(value.name))
            self.write(_flag_value(value), depth + 1)
        elif _absl(value, "FlagValues"):  # absl's FLAGS: every flag's value
            self.text("flags")
            self.mapping(dict(sorted(_flag_value(value).items())), depth)
        elif kind is object:  # a bare sentinel (jax's no_axis_name): which one it is
            self.text("sentinel", self.qualified(_sentinel_name(value)))
        elif _record(value):  # a sentinel (equinox's MISSING), settings (jaxtyping's config)
            self.text("instance", self.name(kind))
            for name, item in sorted(vars(value).items()):
                self.text(name, kind.__name__)
                self.write(item, depth + 1)
            for base in kind.__mro__[:-1]:  # what it reads from its class
                for name, item in vars(base).items():
                    if not name.startswith("__") and not _behaviour(item):
                        self.text(name)
                        self.write(item, depth + 1)
        else:
            self.tree(value, depth)

    def mapping(self, value: Mapping[Any, Any], depth: int) -> None:
        self.text("dict", str(len(value)))
        for key, item in value.items():  # insertion order is part of a dict's meaning
            self.write(key, depth + 1)
            self.write(item, depth + 1)

    def function(self, value: types.FunctionType, depth: int) -> None:
        self.text("function", self.name(value))
        # Its code too: two lambdas of one function share a qualname
        # (``train.<locals>.<lambda>``), and may share a closure.
        code = value.__code__
        self.text("code", str(code.co_firstlineno), _code_digest(code))
        wrapped = getattr(value, "__wrapped__", None)
        if wrapped is not None and wrapped is not value:
            self.write(wrapped, depth + 1)
        self.write(value.__defaults__, depth + 1)
        self.write(value.__kwdefaults__, depth + 1)
        for cell in value.__closure__ or ():
            try:
                contents = cell.cell_contents
            except ValueError:  # an empty cell: a name assigned later
                contents = None
            self.write(contents, depth + 1)

    def treedef(self, value: Any, depth: int) -> None:
        """A tree structure: each node's class and metadata, then its children."""
        if depth > _DEPTH:
            raise Unreadable("it nests too deep to compare")
        data = value.node_data()
        if data is None:
            self.text("leaf")
            return
        kind, aux = data
        children = value.children()
        self.text("node", self.name(kind), str(len(children)))
        self.write(aux, depth + 1)
        for child in children:
            self.treedef(child, depth + 1)

    def array(self, value: Any) -> None:
        import numpy as np

        if is_key(value.dtype):  # a typed PRNG key: its impl, and the bits it holds
            self.text("key", str(value.dtype))
            value = _key_data(value)
        size = int(getattr(value, "nbytes", 0))
        if size > self.limit:
            raise Unreadable(
                f"it is an array of {size} bytes, over the {self.limit}-byte limit on "
                "captured arrays"
            )
        host = np.asarray(value)
        if host.dtype.hasobject:
            raise Unreadable("it is an array of Python objects")
        self.text("array", host.dtype.str, repr(host.shape))
        self.digest.update(np.ascontiguousarray(host).tobytes())

    def message(self, value: Any) -> None:
        """A protobuf message by its class and its deterministic serialization,
        which holds all of its content, under the limit arrays have."""
        data = value.SerializeToString(deterministic=True)
        if len(data) > self.limit:
            raise Unreadable(
                f"it is a {type(value).__name__} of {len(data)} bytes, over the "
                f"{self.limit}-byte limit on captured values"
            )
        self.text("protobuf", self.name(type(value)))
        self.digest.update(data)

    def tree(self, value: Any, depth: int) -> None:
        """A pytree jax knows how to flatten (its structure and leaves), else unreadable."""
        if self.flatten is not None:
            leaves, structure = self.flatten(value)
            if not (len(leaves) == 1 and leaves[0] is value):
                self.text("tree", str(structure))
                for leaf in leaves:
                    self.write(leaf, depth + 1)
                return
        raise Unreadable(f"ppy cannot compare values of type {self.name(type(value))}")


def _is_protobuf(value: Any) -> bool:
    """A protobuf message; protobuf is looked for only where the program imported it."""
    message = sys.modules.get("google.protobuf.message")
    return message is not None and isinstance(value, message.Message)


def _is_array(value: Any) -> bool:
    return (
        not isinstance(value, type)  # np.float32 has the attributes too
        and hasattr(value, "__array__")
        and hasattr(value, "dtype")
        and hasattr(value, "shape")
    )


def _key_data(value: Any) -> Any:
    import jax  # a key array exists: jax is imported already

    return jax.random.key_data(value)


def _is_treedef(value: Any) -> bool:
    kind = type(value)
    return kind.__name__ == "PyTreeDef" and kind.__module__.startswith("jax")


def _absl(value: Any, name: str) -> bool:
    """Whether ``value`` is an instance of absl's ``flags`` class ``name``
    (absl imported by the program: ppy never imports it)."""
    kind = type(value)
    return kind.__name__ == name and kind.__module__.startswith("absl.flags")


def absl_flags(value: Any) -> bool:
    """Whether ``value`` is absl's ``FLAGS`` or a flag holder: values the
    program parses from its command line as it runs."""
    return _absl(value, "FlagHolder") or _absl(value, "FlagValues")


def _flag_value(value: Any) -> Any:
    """A flag holder's value, or all of ``FLAGS``' values, read as the trace
    reads them: after the command line is parsed (``app.run``). Before, absl
    refuses the read, and so does the fingerprint."""
    try:
        return value.value if _absl(value, "FlagHolder") else value.flag_values_dict()
    except Exception as error:  # absl's UnparsedFlagAccessError
        raise Unreadable(f"its absl flags cannot be read yet: {error}") from None


#: id of a bare sentinel -> the module global that holds it, as found.
_SENTINELS: dict[int, tuple[str, str]] = {}


def _sentinel_name(value: object) -> str:
    """The module global a bare ``object()`` is, by which a run tells it apart.

    Such a sentinel holds nothing: code only asks whether a value *is* it
    (``axis_name is not core.no_axis_name``), so one sentinel is not another.
    Made again in the next process under the same name, it is the same one.
    Where several modules hold it (a re-export), the first name in sorted
    order is its name, whatever order the process imported them in. A bare
    object no loaded module holds (made in a function) has no name, so it
    cannot be compared and the function stays.
    """
    held = _SENTINELS.get(id(value))
    if held is not None and getattr(sys.modules.get(held[0]), held[1], None) is value:
        return ".".join(held)
    names = [
        (module_name, name)
        for module_name, module in list(sys.modules.items())
        if isinstance(space := getattr(module, "__dict__", None), dict)
        for name, item in list(space.items())
        if item is value
    ]
    if not names:
        raise Unreadable("it is a bare object() that no module holds, so a run cannot tell which")
    _SENTINELS[id(value)] = min(names)
    return ".".join(min(names))


def _record(value: Any) -> bool:
    """An instance of a Python class whose state is plain values: its class
    and those values say all (a sentinel holds none; jaxtyping's config holds
    two flags a jaxtyped trace reads).

    Only instances whose ``__dict__`` holds plain values, with no
    ``__slots__``, no properties and no ``__getattr__`` count: what a read of
    such an object gives is in its ``__dict__`` or its class. An object whose
    state lives in C (a lock, a file) has no ``__dict__``.
    """
    state = getattr(value, "__dict__", None)
    if not isinstance(state, dict) or len(state) > _RECORD_FIELDS:
        return False
    kind = type(value)
    bases = kind.__mro__[:-1]
    return (
        all(isinstance(item, _PLAIN) for item in state.values())
        and not any(getattr(k, "__slots__", ()) for k in bases)
        and kind.__getattribute__ is object.__getattribute__  # type: ignore[comparison-overlap]  # the unbound slots compare
        and not any("__getattr__" in vars(k) for k in bases)
        and not any(isinstance(item, property) for k in bases for item in vars(k).values())
    )


def _behaviour(item: Any) -> bool:
    """A class attribute that is code, not data."""
    return callable(item) or isinstance(item, staticmethod | classmethod | property)


def _is_dtype(value: Any) -> bool:
    kind = type(value)
    return (kind.__module__ == "numpy" and kind.__name__ == "dtype") or (
        kind.__module__.startswith("numpy.dtypes")
    )


def _is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def python_function(value: Any) -> types.FunctionType | None:
    """The Python function behind ``value``: itself, or what a jit (or any
    ``functools.wraps`` wrapper) wraps; for a function ``ppy run`` bound, the
    original's."""
    from ppy.runtime import ORIGINAL

    value = getattr(value, ORIGINAL, value)
    for _ in range(8):
        if isinstance(value, types.FunctionType):
            return value
        value = getattr(value, "__wrapped__", None)
        if value is None:
            return None
    return None


def traced_function(value: Any) -> types.FunctionType | None:
    """The Python function a jitted callable traces at its core: what
    ``python_function`` finds, seen also through ``functools.partial`` and
    through jax's own transforms (``jax.vmap(g)``, ``jax.grad(g)``), which wrap
    ``g`` with ``functools.wraps``. A wrapper of the program's own is kept:
    its code is part of what is traced."""
    *_, last = _layers(value)
    if isinstance(last, types.FunctionType) and not _jax_wrapper(last):
        return last
    return None


def bound_values(value: Any) -> tuple[Any, ...]:
    """What the partials between a jitted callable and its function bind:
    their positional arguments, then their keywords' values by name."""
    found: list[Any] = []
    for layer in _layers(value):
        if isinstance(layer, functools.partial):
            found += [*layer.args, *(layer.keywords[k] for k in sorted(layer.keywords))]
    return tuple(found)


def _layers(value: Any) -> Iterator[Any]:
    """Each callable from a jitted one in to the function it traces: through
    what ``ppy run`` bound, partials and ``__wrapped__``, to the first
    function that is not jax's own wrapper (the last one yielded)."""
    from ppy.runtime import ORIGINAL

    for _ in range(16):
        value = getattr(value, ORIGINAL, value)
        yield value
        if isinstance(value, functools.partial):
            value = value.func
        elif isinstance(value, types.FunctionType) and not _jax_wrapper(value):
            return
        else:
            value = getattr(value, "__wrapped__", None)
            if value is None:
                return


def _jax_wrapper(fn: types.FunctionType) -> bool:
    """A function jax's transforms made around another (``vmap``, ``grad``).
    Told by where its code is: jax's wrappers copy the wrapped function's
    ``__module__``."""
    jax = sys.modules.get("jax")
    folder = os.path.dirname(getattr(jax, "__file__", None) or "") if jax else ""
    return (
        bool(folder)
        and hasattr(fn, "__wrapped__")
        and fn.__code__.co_filename.startswith(os.path.join(folder, ""))
    )


def defaults(fn: types.FunctionType) -> tuple[Any, ...]:
    """What a function holds besides its globals: its code, defaults and
    closed-over values. The code counts for a project function the staged
    one calls: one in a plain ``.py`` module can change with no ``.ppy``
    source changing."""
    closure = []
    for cell in fn.__closure__ or ():
        try:
            closure.append(cell.cell_contents)
        except ValueError:  # an empty cell: a name assigned later
            closure.append(None)
    return (_code(fn.__code__), fn.__defaults__, fn.__kwdefaults__, tuple(closure))


def _code(code: types.CodeType) -> tuple[Any, ...]:
    """A code object as plain data: its bytecode, names and constants, nested
    code included (the same source compiled by the same Python gives the same)."""
    constants = tuple(_code(c) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return (code.co_code, code.co_names, code.co_varnames, constants)


def _code_digest(code: types.CodeType) -> str:
    """sha256 of a code object's bytecode, names and constants, nested code
    included: ``lambda x: x * 2`` and ``lambda x: x * 3`` (or ``jnp.sin`` and
    ``jnp.cos``) on one line share their bytecode, not their constants or
    names. A frozenset constant is written in a fixed order, which its repr,
    under hash randomization, is not."""
    digest = hashlib.sha256()

    def feed(part: types.CodeType) -> None:
        for text in (part.co_code, repr(part.co_names), repr(part.co_varnames)):
            digest.update(text if isinstance(text, bytes) else text.encode("utf-8", "replace"))
        for constant in part.co_consts:
            if isinstance(constant, types.CodeType):
                feed(constant)
                continue
            if isinstance(constant, frozenset):
                shown = f"frozenset{sorted(repr(item) for item in constant)}"
            else:
                shown = f"{type(constant).__name__}:{constant!r}"
            digest.update(len(shown).to_bytes(8, "little"))
            digest.update(shown.encode("utf-8", "surrogatepass"))

    feed(code)
    return digest.hexdigest()


class _Closure(dict[str, Any]):
    """A function's closure by variable name: a step of its own on a path."""


def closure(fn: types.FunctionType) -> dict[str, Any]:
    """What ``fn`` reads of the function around it, by variable name, as it
    holds it now (an empty cell, a name not yet assigned, is left out)."""
    found = _Closure()
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True):
        try:
            found[name] = cell.cell_contents
        except ValueError:
            continue
    return found


def resolve(start: Any, path: tuple[str, ...]) -> Any:
    """Follow a capture's path from the staged function ``start``.

    From a function (or what wraps one) a step is a name in its globals,
    else a builtin, or ``DEFAULTS``, or ``BOUND`` (then an index into what
    the partials bind), or ``CLOSURE`` (then a variable of its closure);
    from a module, a class or any other value, an attribute.
    ``LookupError`` or ``AttributeError`` where the running program has no
    such name.
    """
    import builtins

    current = start
    for step in path:
        if step == BOUND:
            current = bound_values(current)
            continue
        if isinstance(current, tuple):
            current = current[int(step)]
            continue
        if isinstance(current, _Closure):
            current = current[step]
            continue
        function = (
            None if isinstance(current, types.ModuleType | type) else traced_function(current)
        )
        if function is None:
            current = getattr(current, step)
        elif step == CLOSURE:
            current = closure(function)
        elif step == DEFAULTS:
            current = defaults(function)
        elif step in function.__globals__:
            current = function.__globals__[step]
        else:
            current = getattr(builtins, step)
    return current
