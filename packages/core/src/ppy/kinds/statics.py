"""Static argument values, as an export's variants hold them and a call picks one.

jit traces once per value of its static arguments, told apart by their hash
and equality. An export holds one variant per value, written in its
metadata as JSON, and the runtime keys the variants by ``key``:

- a literal (None, bool, int, float, str) as itself, keyed by its exact type
  too, so that ``1`` is not taken for ``True``;
- a tuple as ``{"tuple": [...]}`` of such values;
- a function (a lambda the program makes in ``main()``, a ``partial``) as
  ``{"function": name, "fingerprint": ..., "reads": [...]}``: the
  fingerprint of its name, code, defaults and closure
  (``ppy.kinds.fingerprint``), and the globals its trace read, each a
  ``Captured`` whose path starts at the function. Only the recorded run
  can export one (the build cannot make the program's lambda again); the
  runtime keys a call's function by its fingerprint, so the lambda made
  again by the next run picks the variant, and checks what it reads where
  jit would trace, as it checks the export's own captures.
"""

from __future__ import annotations

import functools
import math
import types
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Final

from ppy.kinds.fingerprint import python_function

__all__ = ["FUNCTION", "callable_static", "key", "key_of_json", "reads", "to_json"]

#: The tag of a function's key: ``(FUNCTION, fingerprint)``.
FUNCTION: Final = "<function>"
_LITERALS = (type(None), bool, int, float, str)


def callable_static(value: Any) -> bool:
    """Whether ``value`` is a static argument told apart by its fingerprint:
    a Python function, a partial, or what wraps one (a jitted function)."""
    if isinstance(value, types.FunctionType | functools.partial):
        return True
    return callable(value) and not isinstance(value, type) and python_function(value) is not None


def key(value: Any, fingerprint: Callable[[Any], str | None]) -> Hashable:
    """The variant key of a call's static ``value``; ``fingerprint`` gives a
    function's (None where it has none, which no variant is keyed by)."""
    if type(value) is tuple:
        return (tuple, tuple(key(item, fingerprint) for item in value))
    if callable_static(value):
        return (FUNCTION, fingerprint(value))
    return (type(value), value)


def to_json(value: Any, function: Callable[[Any], Mapping[str, Any]]) -> Any:
    """A static ``value`` as the metadata writes it, ``function`` describing
    each function in it; ``ValueError`` for anything else than a literal, a
    tuple or a function."""
    if type(value) is tuple:
        return {"tuple": [to_json(item, function) for item in value]}
    if callable_static(value):
        return dict(function(value))
    if type(value) is float and not math.isfinite(value):
        raise ValueError(f"the static float {value}, which JSON holds no number for")
    if type(value) in _LITERALS:
        return value
    raise ValueError(f"a static {type(value).__name__}, which an export cannot hold")


def key_of_json(value: Any) -> Hashable:
    """The variant key of a static value as the metadata writes it."""
    if isinstance(value, Mapping) and set(value) == {"tuple"}:
        return (tuple, tuple(key_of_json(item) for item in value["tuple"]))
    if isinstance(value, Mapping) and "function" in value:
        return (FUNCTION, value["fingerprint"])
    if isinstance(value, _LITERALS):
        return (type(value), value)
    raise ValueError(f"{value!r} is not a static value this ppy reads")


def reads(value: Any) -> list[tuple[tuple[int | str, ...], Mapping[str, Any]]]:
    """Each function in a static value as the metadata writes it, with where
    it is in the value: ``()`` for the value itself, ``(1,)`` for a tuple's
    second item."""
    if isinstance(value, Mapping) and set(value) == {"tuple"}:
        return [
            ((index, *where), found)
            for index, item in enumerate(value["tuple"])
            for where, found in reads(item)
        ]
    if isinstance(value, Mapping) and "function" in value:
        return [((), value)]
    return []
