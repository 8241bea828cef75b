"""What an ``@xla.jit`` body read from its module, compared before a staged call.

The compiled module folded in every module-level name the body reads: a
constant's value, an inlined function, a builtin, ``math``. Python reads them
again on every call, and a program may rebind any of them from outside the
module (``steps.STEP = 10``, ``globals()["K"] = 4``), so a staged call is
served only while each is still what the build compiled (``metadata.reads``).

A name is compared by value once, then by identity: ``Reads.same`` is one
dict lookup and one ``is`` per name, on the fast path; a value that is new
but equal is compared again and kept.
"""

from __future__ import annotations

import builtins
import math
import struct
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Reads"]

_ABSENT = object()
_TYPES: dict[str, type] = {"int": int, "float": float, "bool": bool}


class Reads:
    """The names one entry read, in the module ``namespace`` the function runs in."""

    def __init__(self, reads: Mapping[str, str], namespace: dict[str, Any], module: str) -> None:
        self.namespace = namespace
        self.module = module
        self.expected = dict(reads)
        #: (name, the object accepted for it): what the fast path compares.
        self.accepted: tuple[tuple[str, Any], ...] = ()

    def same(self) -> bool:
        """Whether every name is still the object last accepted for it."""
        get = self.namespace.get
        for name, accepted in self.accepted:  # noqa: SIM110  (a loop: faster than all())
            if get(name, _ABSENT) is not accepted:
                return False
        return True

    def changed(self) -> str | None:
        """Why a name is not what the build compiled, or None (and every name accepted)."""
        accepted = []
        for name, read in self.expected.items():
            value = self.namespace.get(name, _ABSENT)
            kind, _, what = read.partition(":")
            if not _holds(kind, what, value, self.module):
                shown = "unbound" if value is _ABSENT else f"{value!r}"[:80]
                return f"{name} is {shown}, not what the build compiled ({read})"
            accepted.append((name, value))
        self.accepted = tuple(accepted)
        return None


def _holds(kind: str, what: str, value: Any, module: str) -> bool:
    if kind in _TYPES:
        if type(value) is not _TYPES[kind]:
            return False
        if kind == "float":
            return _bits(value) == what
        return str(value) == what
    if kind == "builtin":  # the module binds no such name: Python finds the builtin
        return value is _ABSENT and getattr(builtins, what, None) is _BUILTINS.get(what)
    if kind == "module":
        return value is math
    if kind == "math":
        original = _MATH.get(what)
        if isinstance(original, float):
            return type(value) is float and _bits(value) == _bits(original)
        return original is not None and value is original
    if kind == "function":
        return _compiled(value, what, module)
    return False


def _compiled(value: Any, qualname: str, module: str) -> bool:
    """Whether ``value`` is the module's own ``qualname``: as defined, or staged in its place."""
    entry = getattr(value, "entry", None)
    if entry is not None:
        return bool(entry.module == module and entry.qualname == qualname)
    code = getattr(value, "__code__", None)
    return (
        code is not None
        and getattr(value, "__qualname__", None) == qualname
        and getattr(value, "__module__", None) in (module, "__main__")
    )


def _bits(value: Any) -> str:
    return struct.pack(">d", value).hex()


#: The builtins and ``math`` names as they were before the program ran.
_BUILTINS: dict[str, Any] = dict(vars(builtins))
_MATH: dict[str, Callable[..., Any] | float] = dict(vars(math))
