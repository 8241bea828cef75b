"""Executables read back from jax's pickling, with jax's singletons intact.

``jax.experimental.serialize_executable`` pickles an executable together
with the avals of its inputs and outputs. Since jax 0.11 an aval also holds
a layout, whose default (``jax._src.layout.AutoLayout``) is a module-level
singleton that jax compares by identity. Pickle rebuilds it as a new object,
so an aval read back compares unequal to the same aval made in the process,
and hashes differently: a cached eager op never matched its jaxpr, and an
output of a loaded executable carried an aval jax had never made.

``Unpickler`` is jax's own, except that a singleton jax pickled is read back
as the singleton itself. It reads what jax's ``serialize`` wrote, so the
cache's format does not change; with a jax that has no such singleton it is
jax's unpickler unchanged.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from jax.experimental import serialize_executable

__all__ = ["Unpickler", "load", "load_compiled"]


def _singletons() -> dict[tuple[str, str], type]:
    """For each jax singleton that pickle would rebuild as a new object, its
    class's (module, name), and a class whose construction gives the singleton."""
    from jax._src import layout

    found: dict[tuple[str, str], type] = {}
    for singleton in (getattr(layout, "AutoLayout", None),):
        if singleton is not None:
            cls = type(singleton)

            def new(_: type, *args: Any, _value: object = singleton) -> object:
                return _value

            found[(cls.__module__, cls.__qualname__)] = type(cls.__name__, (), {"__new__": new})
    return found


class Unpickler(serialize_executable._JaxPjrtUnpickler):
    """jax's executable unpickler, keeping jax's singletons singletons."""

    _SINGLETONS = _singletons()

    def find_class(self, module: str, name: str) -> Any:
        # pickle writes the singleton as "a new instance of its class" (NEWOBJ).
        singleton = self._SINGLETONS.get((module, name))
        return singleton if singleton is not None else super().find_class(module, name)


def load(data: bytes, client: Any, devices: Sequence[Any]) -> Any:
    """The object jax's executable pickler wrote as ``data``."""
    # jax's unpickler has an untyped __init__.
    return Unpickler(io.BytesIO(data), client, list(devices)).load()  # type: ignore[no-untyped-call]


def load_compiled(
    data: bytes,
    in_tree: Any,
    out_tree: Any,
    client: Any,
    devices: Sequence[Any],
    *,
    committed: bool | None = None,
) -> Any:
    """``serialize_executable.deserialize_and_load``, read with ``Unpickler``;
    ``committed``, where given, is whether its outputs are committed to their
    device (jit commits them only when an input was)."""
    import dataclasses

    import jax

    unloaded, args_info_flat, no_kwargs, const_args = _contents(load(data, client, devices))
    if committed is not None:
        unloaded = dataclasses.replace(unloaded, committed=committed)
    args_info = in_tree.unflatten(args_info_flat)
    return jax.stages.Compiled(
        unloaded.load(), const_args, args_info, out_tree, no_kwargs=no_kwargs
    )


def _contents(loaded: Any) -> tuple[Any, Any, bool, list[Any]]:
    """(the unloaded executable, its flat args info, no_kwargs, its constants)
    from what jax pickled: ``(unloaded, args, no_kwargs)`` through jax 0.12.0,
    ``(version, unloaded, args, no_kwargs, constants)`` from 0.12.1. The cache
    keys executables by jax's version, so an entry is only read by the jax
    that wrote it; a format this jax does not write is refused."""
    if isinstance(loaded, tuple) and len(loaded) == 3:
        unloaded, args, no_kwargs = loaded
        return unloaded, args, no_kwargs, []
    version = getattr(serialize_executable, "_SERIALIZATION_VERSION", None)
    if isinstance(loaded, tuple) and len(loaded) == 5 and loaded[0] == version:
        _, unloaded, args, no_kwargs, constants = loaded
        return unloaded, args, no_kwargs, list(constants)
    raise ValueError("not an executable in a format this jax pickles")
