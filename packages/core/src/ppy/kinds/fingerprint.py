"""Fingerprints of the values a trace captured, so a run can tell they changed.

A jitted function is traced at its first call, and what it reads from module
globals then is baked into the program it compiles: an array loaded at
import, a flag set in ``main()``, a scale read from the environment. An
export traced at build time baked in the build's values. The export worker
records a fingerprint of each value the function's trace could read; the
runtime takes the staged path only while each value has the same
fingerprint.

A fingerprint is a sha256 over a canonical text of the value: its kind and
its content, all of it. Two values with the same fingerprint compute the
same trace. It is an allow-list: ``KINDS`` names each kind of value ppy
compares and what it compares of it, and ``_Writer.write`` follows that
table and nothing else. A value of no kind on it (an open file, a lock, a
generator, a subclass of ``list``, an object whose attribute reads run code
of its own) raises ``Unreadable`` with the reason, and the function it was
read by takes jit's path (rule ``captures-runtime-value``). The kinds, in
the order they are tried:

========================  =====================================================
kind                      what is compared
========================  =====================================================
plain value               None, bool, int, float, complex, str, bytes: its
                          type and ``repr`` (-0.0 is not 0.0; ``1`` not
                          ``True``), and a float's bits (a nan's sign)
enum member               its class's name and the member's name
array                     dtype by *name* (int4 is not uint4, though numpy
                          writes both ``<V1``), weak type, shape, every byte,
                          and placement: a jax array's sharding kind, device
                          ids, layout spec and memory kind (not the platform:
                          an artifact built on CPU serves on the TPU). A typed
                          PRNG key: its impl and key data. Over ``limit``
                          bytes: unreadable (weights are parameters)
protobuf message          its class and deterministic serialization
module                    its name: what a trace reads from a module is
                          compared as a value of its own
class                     see *classes* below
partial                   its function, arguments and keywords
function                  qualified name, line, bytecode with names and
                          constants, defaults, keyword defaults, closure, and
                          what it wraps (``__wrapped__``)
list, tuple, namedtuple   its type and items; a namedtuple's class as below
dict                      its items in order
set, frozenset            its items' fingerprints, sorted
dtype                     its name and numpy's code for it
built-in or method        its name and what it is bound to; a method's
                          function too
jitted or wrapped         the Python function inside (``python_function``)
mapping                   its items in key order (``os.environ``)
dataclass instance        its fields, every other attribute it holds, its class
jax tree structure        each node's class, metadata and children
absl flag(s)              the parsed values
bare ``object()``         the module global that holds it
pytree                    what jax's ``tree_flatten`` gives (flax, equinox,
                          optax states) and its class
instance                  every attribute it holds (``__dict__`` and slots)
                          and its class; only of a class written in Python
                          whose attribute reads are plain (no
                          ``__getattr__``, ``__getattribute__`` or property)
========================  =====================================================

*Classes.* A class of the program (one not installed as a library: its
module is ``__main__`` or a file outside site-packages and the standard
library) is compared by its own and inherited attributes, every class of
its MRO but ``object``: data as values, a function by its code, defaults and
closure, a ``staticmethod`` or ``classmethod`` by the function it holds, a
property by its getter, setter and deleter. Never by its name alone. What
Python makes itself for each class (``__dict__``, ``__module__``,
``__doc__``, a dataclass's field table, ...) is left out, and each class is
followed once per fingerprint, so a class that holds itself, or a method
whose closure holds ``__class__`` (``super()``), ends. A class of an
installed library (``jnp.float32``, flax's ``Module``, ``tuple``) is
compared by its name and its data attributes: its code is the installed
version's, which the artifact is built against; its methods are not
compared, so a program that replaces a library class's method under the
main guard is not seen (docs/limitations.md).

A function of the project itself is not fingerprinted here only: the
worker follows it, and records what it reads in turn.

This module needs no jax. Pytrees (flax's FrozenDict, equinox Modules) are
read through ``flatten``, jax's ``tree_util.tree_flatten``, which the caller
passes in; numpy is imported only when an array is met.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import importlib.machinery
import os
import struct
import sys
import sysconfig
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

from ppy.kinds.keys import is_key

__all__ = [
    "BOUND",
    "CLOSURE",
    "DEFAULTS",
    "DEFAULT_LIMIT",
    "KINDS",
    "Kind",
    "Unreadable",
    "absl_flags",
    "defaults",
    "fingerprint",
    "bound_values",
    "layers",
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
#: What Python (and ``abc``, ``typing``, ``dataclasses``) writes into a
#: class's namespace itself: bookkeeping, not what the class computes with.
#: Fields and slots are compared on the instance.
_MADE = frozenset(
    {
        "__dict__",
        "__weakref__",
        "__module__",
        "__doc__",
        "__qualname__",
        "__firstlineno__",
        "__static_attributes__",
        "__annotations__",
        "__annotate__",
        "__annotate_func__",
        "__annotations_cache__",
        "__orig_bases__",
        "__parameters__",
        "__type_params__",
        "__slots__",
        "__dataclass_fields__",
        "__dataclass_params__",
        "__match_args__",
        "__abstractmethods__",
        "_abc_impl",
        "__protocol_attrs__",
        "__non_callable_proto_members__",
        "__callable_proto_members_only__",
        "_is_protocol",
        "_is_runtime_protocol",
        "__orig_class__",
        "__hash__",
    }
)

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


class Kind(NamedTuple):
    """One row of the allow-list: a kind of value and what is compared of it."""

    #: The kind, as docs/reliability.md names it.
    name: str
    #: Whether a value is of this kind: ``(writer, value)``.
    test: Callable[[_Writer, Any], bool]
    #: Writes what is compared: ``(writer, value, depth)``.
    write: Callable[[_Writer, Any, int], None]
    #: Whether the value's type alone decides the kind (remembered per type).
    by_type: bool = False


#: Exact type -> its kind, for the kinds ``by_type``: the record run
#: fingerprints many values, mostly of a few types.
_KNOWN: dict[type, Kind] = {}


class _Writer:
    def __init__(
        self,
        digest: Any,
        limit: int,
        flatten: Flatten | None,
        main: str | None,
        classes: set[type] | None = None,
    ) -> None:
        self.digest = digest
        self.limit = limit
        self.flatten = flatten
        self.main = main
        #: The classes written so far: each is followed once.
        self.classes: set[type] = set() if classes is None else classes

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
        """Write ``value`` as the first row of ``KINDS`` it is of says."""
        if depth > _DEPTH:
            raise Unreadable("it nests too deep to compare")
        kind = _KNOWN.get(type(value))
        if kind is None:
            kind = next((k for k in KINDS if k.test(self, value)), None)
            if kind is None:
                raise Unreadable(
                    f"ppy cannot compare values of type {self.name(type(value))}: it is "
                    "none of the kinds of value ppy compares (docs/reliability.md lists them)"
                )
            if kind in _BY_TYPE:
                _KNOWN[type(value)] = kind
        kind.write(self, value, depth)

    def plain(self, value: Any, depth: int) -> None:
        self.text(type(value).__name__, repr(value))
        if isinstance(value, float | complex):
            # Its bits too: ``repr`` shows a nan of either sign (and of any
            # payload) as ``nan``, and XLA computes with the sign.
            parts = (value.real, value.imag) if isinstance(value, complex) else (value,)
            self.text(*(struct.pack("<d", part).hex() for part in parts))

    def member(self, value: enum.Enum, depth: int) -> None:
        self.text("enum", self.name(type(value)), value.name)

    def module(self, value: types.ModuleType, depth: int) -> None:
        self.text("module", value.__name__)

    def partial(self, value: functools.partial[Any], depth: int) -> None:
        self.text("partial")
        for part in (value.func, value.args, value.keywords):
            self.write(part, depth + 1)

    def wraps(self, value: Any, depth: int) -> None:
        """``jax.jit(f)``, or any ``functools.wraps`` wrapper: what it wraps.
        One ``ppy run`` bound in its place stands for the original (a
        class's jitted static method is one after binding)."""
        from ppy.runtime import ORIGINAL

        self.text("wraps", self.name(type(getattr(value, ORIGINAL, value))))
        self.function(python_function(value), depth)  # type: ignore[arg-type]

    def bound(self, value: Any, depth: int) -> None:
        """A built-in function or a bound method: its name and what it is bound
        to, and a method's function (a classmethod's ``__self__`` is its class)."""
        self.text("callable", self.name(value))
        self.write(getattr(value, "__self__", None), depth + 1)
        if isinstance(value, types.MethodType):
            self.write(value.__func__, depth + 1)

    def dtype(self, value: Any, depth: int) -> None:
        self.text("dtype", value.name, value.str)

    def sequence(self, value: Any, depth: int) -> None:
        kind = type(value)
        self.text(self.name(kind), str(len(value)))
        for item in value:
            self.write(item, depth + 1)
        if kind not in (tuple, list):  # a namedtuple: what it reads from its class
            self.klass(kind, depth + 1)

    def dictionary(self, value: dict[Any, Any], depth: int) -> None:
        self.mapping(value, depth)

    def other_mapping(self, value: Mapping[Any, Any], depth: int) -> None:
        """``os.environ``: its items, in key order."""
        self.text("mapping", self.name(type(value)))
        self.mapping(dict(sorted(value.items())), depth)

    def collection(self, value: set[Any] | frozenset[Any], depth: int) -> None:
        """Items in no order: each fingerprinted alone (with the classes
        written so far), and the prints sorted."""
        items = []
        for item in value:
            digest = hashlib.sha256()
            writer = _Writer(digest, self.limit, self.flatten, self.main, set(self.classes))
            writer.write(item, depth + 1)
            items.append(digest.hexdigest())
        self.text(type(value).__name__, *sorted(items))

    def dataclass(self, value: Any, depth: int) -> None:
        kind = type(value)
        self.text("dataclass", self.name(kind))
        names = []
        for field in dataclasses.fields(value):
            names.append(field.name)
            self.text(field.name)
            self.write(getattr(value, field.name), depth + 1)
        self.attributes(value, frozenset(names), depth)

    def absl_flag(self, value: Any, depth: int) -> None:
        self.text("flag", str(value.name))
        self.write(_flag_value(value), depth + 1)

    def absl_flags(self, value: Any, depth: int) -> None:
        self.text("flags")
        self.mapping(dict(sorted(_flag_value(value).items())), depth)

    def sentinel(self, value: object, depth: int) -> None:
        """A bare ``object()`` (jax's ``no_axis_name``): which one it is."""
        self.text("sentinel", self.qualified(_sentinel_name(value)))

    def instance(self, value: Any, depth: int) -> None:
        """A sentinel (equinox's MISSING), settings (jaxtyping's config), a
        program's object: every attribute it holds, and its class."""
        self.text("instance", self.name(type(value)))
        self.attributes(value, frozenset(), depth)

    def attributes(self, value: Any, skip: frozenset[str], depth: int) -> None:
        """What ``value`` holds besides ``skip`` (its ``__dict__``, then its
        slots), then its class: everything a read of its attributes gives."""
        kind = type(value)
        state = getattr(value, "__dict__", None)
        if isinstance(state, dict):
            for name in sorted(state):
                if name not in skip:
                    self.text(name)
                    self.write(state[name], depth + 1)
        for name in _slots(kind):
            if name not in skip:
                self.text("slot", name)
                try:
                    item = object.__getattribute__(value, name)
                except AttributeError:  # a slot never set
                    self.text("<unset>")
                    continue
                self.write(item, depth + 1)
        self.klass(kind, depth + 1)

    def klass(self, value: type, depth: int) -> None:
        """A class: the program's by every attribute of its MRO, a library's by
        its data (the module docstring says why); each class once."""
        if depth > _DEPTH:
            raise Unreadable("it nests too deep to compare")
        self.text("class", self.name(value))
        if value in self.classes:
            return
        self.classes.add(value)
        meta = type(value)
        if meta is not type:
            self.text("metaclass", self.name(meta))
            if not _installed(meta):
                self.klass(meta, depth + 1)
        for base in value.__mro__:
            if not base.__flags__ & _HEAPTYPE:
                # A type compiled into Python or an extension (``object``,
                # ``tuple``, ``np.float32``): nothing can set its attributes.
                self.text("base", self.name(base))
                continue
            self.text("base", self.name(base))
            space = vars(base)
            if _installed(base):
                self.library_data(space, depth + 1)
                continue
            for name in sorted(space):
                if name not in _MADE:
                    self.text(name)
                    self.attribute(space[name], depth + 1)

    def library_data(self, space: Mapping[str, Any], depth: int) -> None:
        """A library class's data attributes; one ppy cannot compare (a cache,
        a private sentinel) is named and left out, as the library's code is:
        a faithful function is not turned away for a library's internals."""
        for name in sorted(space):
            item = space[name]
            if name in _MADE or _code_of_a_library(name, item):
                continue
            self.text(name)
            digest = hashlib.sha256()
            writer = _Writer(digest, self.limit, self.flatten, self.main, self.classes)
            try:
                writer.write(item, depth)
            except Unreadable:
                self.text("<not compared>")
                continue
            self.text(digest.hexdigest())

    def attribute(self, item: Any, depth: int) -> None:
        """What a class holds under a name: its data, and its code as the
        attribute's read gives it."""
        if isinstance(item, staticmethod | classmethod):
            self.text(type(item).__name__)
            self.write(item.__func__, depth)
        elif isinstance(item, property):
            self.text("property")
            for part in (item.fget, item.fset, item.fdel):
                self.write(part, depth)
        elif isinstance(item, functools.cached_property):
            self.text("cached_property")
            self.write(item.func, depth)
        elif isinstance(item, types.MemberDescriptorType | types.GetSetDescriptorType):
            self.text("descriptor")  # a slot: its value is the instance's
        elif isinstance(item, _C_METHODS):  # ``object.__init__``: code compiled in
            self.text("compiled", self.name(item))
        elif type(item).__name__ == "_tuplegetter":  # a namedtuple's field
            self.text("field", repr(item.__reduce__()[1]))
        elif isinstance(item, type):
            self.klass(item, depth)
        else:
            self.write(item, depth)

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

    def array(self, value: Any, depth: int) -> None:
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
        # A weakly typed jax scalar takes the other operand's dtype in a
        # trace (``x_bf16 * s`` stays bfloat16); a strong one promotes it.
        weak = "weak" if getattr(value, "weak_type", False) is True else "strong"
        placement = _placement(value)
        host = np.asarray(value)
        if host.dtype.hasobject:
            raise Unreadable("it is an array of Python objects")
        # By name: numpy writes int4 and uint4 (and most float8s) as ``<V1``.
        self.text("array", host.dtype.name, host.dtype.str, repr(host.shape), weak, placement)
        self.digest.update(np.ascontiguousarray(host).tobytes())

    def message(self, value: Any, depth: int) -> None:
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
        """A pytree jax flattens into more than itself: its structure, its
        leaves and its class."""
        leaves, structure = self.flatten(value)  # type: ignore[misc]  # _pytree said it is set
        self.text("tree", str(structure))
        for leaf in leaves:
            self.write(leaf, depth + 1)
        self.klass(type(value), depth + 1)


def _placement(value: Any) -> str:
    """Where a jax array lives, as text: its sharding's kind, device ids,
    layout spec and memory kind. Not the devices' platform: an artifact
    built on CPU serves on the TPU, where the build's array is put on the
    TPU as the run's is. A NumPy array has none."""
    sharding = getattr(value, "sharding", None)
    if sharding is None:
        return "host"
    devices = sorted(int(getattr(d, "id", -1)) for d in sharding.device_set)
    spec = getattr(sharding, "spec", None)
    return (
        f"{type(sharding).__name__} {devices} {'' if spec is None else spec} "
        f"{getattr(sharding, 'memory_kind', None)}"
    )


@functools.cache
def _libraries() -> tuple[str, ...]:
    """Where installed libraries and Python's own modules live; asked when a
    class is first compared, not as ``ppy run`` imports this module."""
    paths = sysconfig.get_paths()
    keys = ("purelib", "platlib", "stdlib", "platstdlib")
    return tuple(sorted({os.path.join(os.path.realpath(paths[key]), "") for key in keys}))


@functools.cache
def _installed_module(name: str) -> bool:
    """Whether the module ``name`` is an installed library's or Python's own:
    built in, frozen, or a file under site-packages or the standard library.
    A module that is not loaded, or has no file, is an extension's name for
    its own types (nanobind's metaclass says ``nanobind``; ``jaxlib._jax.config``
    is a submodule of a compiled one); the program's classes are of modules
    it loaded from its files (``__main__`` too)."""
    if name in sys.builtin_module_names:
        return True
    if name == "__main__":
        return False
    module = sys.modules.get(name)
    if module is None:
        return True
    spec = getattr(module, "__spec__", None)
    if spec is not None and spec.origin in ("built-in", "frozen"):
        return True
    path = getattr(module, "__file__", None)
    return not isinstance(path, str) or os.path.realpath(path).startswith(_libraries())


def _installed(kind: type) -> bool:
    """Whether ``kind`` is a class of an installed library (or Python's)."""
    return _installed_module(str(getattr(kind, "__module__", None) or ""))


def _code_of_a_library(name: str, item: Any) -> bool:
    """What a library class holds that is not data: its code (the installed
    version's), descriptors, nested classes, and dunder entries."""
    return (
        name.startswith("__")
        or callable(item)
        or isinstance(item, staticmethod | classmethod | property | functools.cached_property)
        or hasattr(type(item), "__get__")
    )


def _slots(kind: type) -> list[str]:
    """The slot names of ``kind``'s MRO, in MRO order."""
    found: list[str] = []
    for base in kind.__mro__:
        declared = vars(base).get("__slots__", ())
        for declared_name in (declared,) if isinstance(declared, str) else declared:
            name = str(declared_name)
            if name.startswith("__") and not name.endswith("__"):  # private: mangled
                name = f"_{base.__name__.lstrip('_')}{name}"
            if name not in ("__dict__", "__weakref__") and name not in found:
                found.append(name)
    return found


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
    *_, last = layers(value)
    if isinstance(last, types.FunctionType) and not _jax_wrapper(last):
        return last
    return None


def bound_values(value: Any) -> tuple[Any, ...]:
    """What the partials between a jitted callable and its function bind:
    their positional arguments, then their keywords' values by name."""
    found: list[Any] = []
    for layer in layers(value):
        if isinstance(layer, functools.partial):
            found += [*layer.args, *(layer.keywords[k] for k in sorted(layer.keywords))]
    return tuple(found)


def layers(value: Any) -> Iterator[Any]:
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
        if type(current) is tuple:  # defaults, bound values; a NamedTuple's steps are names
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


#: Methods compiled into Python or an extension, as a class holds them.
_C_METHODS = (
    types.WrapperDescriptorType,
    types.MethodDescriptorType,
    types.ClassMethodDescriptorType,
)
#: ``Py_TPFLAGS_HEAPTYPE``: a class made at run time (by a ``class``
#: statement), not a type compiled into Python or an extension.
_HEAPTYPE = 1 << 9
#: A C type whose whole state is its ``__dict__``.
_STATE_IN_DICT = (types.SimpleNamespace,)


def _written_in_python(kind: type) -> bool:
    """Whether ``kind`` keeps its state where ``attributes`` reads it: a class
    written in Python, not a C type (``list``, a lock, a nanobind class)
    whose state a read of ``__dict__`` would miss."""
    if kind in _STATE_IN_DICT:
        return True
    module = str(kind.__module__)
    if not kind.__flags__ & _HEAPTYPE or module in sys.builtin_module_names:
        return False  # ``_thread.lock`` is a heap type of a built-in module
    path = getattr(sys.modules.get(module), "__file__", None) or ""
    return not path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


#: Descriptors whose read gives what the class or the instance holds.
_PLAIN_DESCRIPTORS = (
    types.FunctionType,
    staticmethod,
    classmethod,
    type,
    types.MemberDescriptorType,
    types.GetSetDescriptorType,
    *_C_METHODS,
    types.BuiltinFunctionType,
)


def _computed(item: Any) -> bool:
    """A class attribute whose read on an instance runs code of its own: a
    property, a cached property, a descriptor the program wrote."""
    if isinstance(item, property | functools.cached_property):
        return True
    return hasattr(type(item), "__get__") and not isinstance(item, _PLAIN_DESCRIPTORS)


def _record(value: Any) -> bool:
    """An instance whose attributes are all it holds: every class of its MRO
    but ``object`` written in Python, at most ``_RECORD_FIELDS`` attributes
    in its ``__dict__``, and no read that runs code (``__getattr__``,
    ``__getattribute__``, a property): what a read of such an object gives
    is in its ``__dict__``, its slots or its class. An object whose state
    lives in C (a lock, a file, a ``list`` subclass's items) is not one.
    """
    kind = type(value)
    state = getattr(value, "__dict__", None)
    if state is not None and (not isinstance(state, dict) or len(state) > _RECORD_FIELDS):
        return False
    bases = kind.__mro__[:-1]
    return (
        all(_written_in_python(k) for k in bases)
        and kind.__getattribute__ is object.__getattribute__  # type: ignore[comparison-overlap]  # the unbound slots compare
        and not any("__getattr__" in vars(k) for k in bases)
        and not any(_computed(item) for k in bases for item in vars(k).values())
    )


def _is_dtype(value: Any) -> bool:
    """A numpy dtype, ml_dtypes' included (``numpy.dtype[int4]``); numpy is
    looked for only where the program imported it."""
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, numpy.dtype)


def _is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def _is_wrapper(value: Any) -> bool:
    """``jax.jit(f)`` or any ``functools.wraps`` wrapper of a Python function."""
    return callable(value) and python_function(value) is not None


def _is_pytree(writer: _Writer, value: Any) -> bool:
    """A value jax's ``flatten`` takes apart (flax, equinox, optax states)."""
    if writer.flatten is None:
        return False
    leaves, _ = writer.flatten(value)
    return not (len(leaves) == 1 and leaves[0] is value)


def _row(
    name: str,
    test: Callable[[Any], bool],
    write: Callable[[_Writer, Any, int], None],
    *,
    by_type: bool = True,
) -> Kind:
    return Kind(name, lambda _writer, value: test(value), write, by_type)


#: The allow-list: each kind of value ppy compares, in the order they are
#: tried, and how it is written (the module docstring says what of it).
KINDS: tuple[Kind, ...] = (
    _row("plain value", lambda v: isinstance(v, _PLAIN), _Writer.plain),
    _row("enum member", lambda v: isinstance(v, enum.Enum), _Writer.member),
    _row("array", _is_array, _Writer.array),
    _row("protobuf message", _is_protobuf, _Writer.message),
    _row("module", lambda v: isinstance(v, types.ModuleType), _Writer.module),
    _row("class", lambda v: isinstance(v, type), _Writer.klass),
    _row("partial", lambda v: isinstance(v, functools.partial), _Writer.partial),
    _row("function", lambda v: isinstance(v, types.FunctionType), _Writer.function),
    _row(
        "list, tuple, namedtuple",
        lambda v: type(v) in (tuple, list) or _is_namedtuple(v),
        _Writer.sequence,
    ),
    _row("dict", lambda v: type(v) is dict, _Writer.dictionary),
    _row("set, frozenset", lambda v: type(v) in (set, frozenset), _Writer.collection),
    _row("dtype", _is_dtype, _Writer.dtype),
    # Before what wraps: a bound method reads ``__wrapped__`` through to its
    # function's (flax's ``Module.apply``), and what it is bound to counts.
    _row(
        "built-in or method",
        lambda v: isinstance(v, types.BuiltinFunctionType | types.MethodType),
        _Writer.bound,
    ),
    _row("jitted or wrapped function", _is_wrapper, _Writer.wraps, by_type=False),
    _row("mapping", lambda v: isinstance(v, Mapping), _Writer.other_mapping),
    _row("dataclass instance", dataclasses.is_dataclass, _Writer.dataclass),
    _row("jax tree structure", _is_treedef, _Writer.treedef),
    _row("absl flag", lambda v: _absl(v, "FlagHolder"), _Writer.absl_flag),
    _row("absl flags", lambda v: _absl(v, "FlagValues"), _Writer.absl_flags),
    _row("bare object()", lambda v: type(v) is object, _Writer.sentinel),
    Kind("pytree", _is_pytree, _Writer.tree),
    _row("instance", _record, _Writer.instance, by_type=False),
)
#: The kinds a type alone decides: ``by_type``, and no row before them
#: decided by the value (a type's values are then all of one kind).
_BY_TYPE = frozenset(
    kind for index, kind in enumerate(KINDS) if all(row.by_type for row in KINDS[: index + 1])
)
