"""Changing a value a staged function's trace read, and judging what ``ppy run`` does then.

A staged call is faithful only while every value its trace read is the one
the build saw. Between ``ppy record``/``ppy build`` and ``ppy run`` a program
may hold another value at any place the trace reached: a global, a closure, a
default, a partial's argument, a class's or an instance's attribute, a
module's. This module holds what the mutation harness (``record/test_mutations.py``)
needs to ask that question in one process, the way ``ppy run`` answers it:

- ``Site``: one place a value lives, read and replaced there (and put back);
- ``changes``: hypothesis strategies for another value of the same sort,
  including those a fingerprint may confuse with the first: the same bytes
  under another dtype (int4 and uint4, bfloat16 and float16), a weak type
  against a strong one, -0.0 against 0.0, a nan of the other sign;
- ``verdict``: the runtime's own check (``ppy_runtime_pjrt.conditions``) of
  the captures the build took (``ppy_plugin_jax.captures``, as the export
  worker takes them): None where the staged call would be served, else the
  ``Fallback`` with its reason;
- ``outcome`` and ``same_bits``: what jit computes now, traced afresh as the
  run's process would trace it, compared bit for bit with what it computed
  before the change (the export's output).
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import runpy
import struct
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from hypothesis import strategies as st
from ppy.kinds.fingerprint import BOUND, CLOSURE, DEFAULTS, resolve, traced_function
from ppy_plugin_jax.captures import Refused, captures
from ppy_runtime_pjrt.conditions import Conditions

__all__ = [
    "FAMILIES",
    "Site",
    "attribute",
    "build",
    "cell",
    "changes",
    "defaults",
    "outcome",
    "partial_argument",
    "same_bits",
    "verdict",
]

#: The access paths and the sorts of change issue 55 names; each is covered
#: by at least one case of the harness (``test_every_access_path_is_covered``).
FAMILIES = (
    "global",
    "closure",
    "default",
    "partial argument",
    "class attribute (data)",
    "class attribute (callable)",
    "instance attribute",
    "module attribute",
    "weak vs strong",
    "dtype of the same bytes",
    "-0.0",
    "nan",
)

#: The largest captured array, in bytes (the build's default is 1 MiB).
LIMIT = 1 << 20

#: A nan with its sign bit set: ``repr`` shows it as ``nan``, and XLA keeps its sign.
NEGATIVE_NAN = struct.unpack("<d", struct.pack("<Q", 0xFFF8000000000000))[0]

#: Functions of one array, each computing otherwise than the others.
UNARY = (jnp.tanh, jnp.sin, jnp.cos, jnp.exp, jnp.negative)

#: Dtypes of one itemsize that a fingerprint might confuse: the same bytes
#: mean another number under each.
SAME_BYTES: dict[int, tuple[Any, ...]] = {
    1: (ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2),
    2: (ml_dtypes.bfloat16, np.float16, np.int16),
    4: (np.float32, np.int32, np.uint32),
}


@dataclass(frozen=True)
class Site:
    """One place a value the trace reads lives: read it, replace it."""

    get: Callable[[], Any]
    put: Callable[[Any], None]


def attribute(owner: Any, name: str) -> Site:
    """``owner.name``: of a module, a class or an instance. A class's own
    ``staticmethod`` is read and replaced as the function it holds."""

    def get() -> Any:
        held = vars(owner).get(name) if isinstance(owner, type) else None
        return held.__func__ if isinstance(held, staticmethod) else getattr(owner, name)

    def put(value: Any) -> None:
        held = vars(owner).get(name) if isinstance(owner, type) else None
        setattr(owner, name, staticmethod(value) if isinstance(held, staticmethod) else value)

    return Site(get, put)


def cell(function: types.FunctionType, name: str) -> Site:
    """The variable ``name`` of the function around ``function`` (its closure)."""
    index = function.__code__.co_freevars.index(name)
    held = (function.__closure__ or ())[index]

    def put(value: Any) -> None:
        held.cell_contents = value

    return Site(lambda: held.cell_contents, put)


def defaults(function: types.FunctionType, index: int) -> Site:
    """The ``index``-th positional default of ``function``."""

    def put(value: Any) -> None:
        values = list(function.__defaults__ or ())
        values[index] = value
        function.__defaults__ = tuple(values)

    return Site(lambda: (function.__defaults__ or ())[index], put)


def partial_argument(partial: functools.partial[Any], index: int) -> Site:
    """The ``index``-th positional argument a ``functools.partial`` binds."""

    def put(value: Any) -> None:
        arguments = list(partial.args)
        arguments[index] = value
        partial.__setstate__((partial.func, tuple(arguments), partial.keywords, None))

    return Site(lambda: partial.args[index], put)


def _float_bits(dtype: Any, shape: tuple[int, ...]) -> st.SearchStrategy[Any]:
    """Arrays of ``dtype`` from any bits: every nan, infinity and -0.0 among them."""
    size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    return st.binary(min_size=size, max_size=size).map(
        lambda data: np.frombuffer(data, dtype=dtype).reshape(shape).copy()
    )


def _integers(dtype: Any, shape: tuple[int, ...]) -> st.SearchStrategy[Any]:
    info = ml_dtypes.iinfo(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    return st.lists(st.integers(int(info.min), int(info.max)), min_size=count, max_size=count).map(
        lambda items: np.array(items).astype(dtype).reshape(shape)
    )


def _numpy(value: np.ndarray[Any, Any]) -> st.SearchStrategy[Any]:
    """Another array of ``value``'s shape: other bits of its dtype, or its
    bytes (or others) under another dtype of the same itemsize."""
    shape = tuple(value.shape)
    kinds = [value.dtype.type]
    kinds += [d for d in SAME_BYTES.get(value.dtype.itemsize, ()) if np.dtype(d) != value.dtype]
    drawn = []
    for kind in kinds:
        floating = np.dtype(kind).kind in "fV" and not np.dtype(kind).name.startswith(
            ("int", "uint")
        )
        drawn.append(_float_bits(kind, shape) if floating else _integers(kind, shape))
    views = [st.just(value.view(kind)) for kind in kinds[1:]]
    return st.one_of(*views, *drawn)


def _jax(value: jax.Array) -> st.SearchStrategy[Any]:
    """Another jax array: the same one with the other weak type, or another's bits."""
    flipped = _with_weak_type(value, not value.weak_type)
    return st.one_of(st.just(flipped), _numpy(np.asarray(value)).map(jnp.asarray))


def _with_weak_type(value: jax.Array, weak: bool) -> jax.Array:
    """``value`` as a weakly or strongly typed array of its dtype and bits."""
    from jax._src.lax import lax as lax_internal

    return lax_internal._convert_element_type(value, value.dtype, weak_type=weak)


def _floats(value: float) -> st.SearchStrategy[Any]:
    """Another Python float, or the same number as a NumPy or jax scalar
    (strong), or as a weak jax scalar; -0.0, nan of either sign among them."""
    return st.one_of(
        st.sampled_from([-value, 0.0, -0.0, math.nan, NEGATIVE_NAN, math.inf]),
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from(
            [np.float32(value), np.float64(value), jnp.float32(value), jnp.asarray(value)]
        ),
    )


def _integers_like(value: int) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.integers(-(1 << 20), 1 << 20),
        st.sampled_from([float(value), np.int32(value), jnp.asarray(value)]),
    )


def changes(value: Any) -> st.SearchStrategy[Any]:
    """Values that may stand where ``value`` stood, of its sort and of the
    sorts a fingerprint could take it for; some draws equal it."""
    if isinstance(value, bool):
        return st.booleans()
    if isinstance(value, int):
        return _integers_like(value)
    if isinstance(value, float):
        return _floats(value)
    if isinstance(value, jax.Array) and jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
        return st.integers(0, (1 << 31) - 1).map(jax.random.key)
    if isinstance(value, jax.Array):
        return _jax(value)
    if isinstance(value, np.ndarray):
        return _numpy(value)
    if callable(value):
        return st.sampled_from(UNARY)
    raise TypeError(f"no strategy for a {type(value).__name__}")


def build(jitted: Any, root: str) -> tuple[Any, ...] | str:
    """The captures the build takes of ``jitted`` as the export worker takes
    them, or the reason it refuses the export (then the function stays)."""
    try:
        return captures(jitted, root=root, limit=LIMIT, flatten=jax.tree_util.tree_flatten)
    except Refused as refused:
        return f"not staged: {refused}"


def verdict(jitted: Any, read: tuple[Any, ...] | str) -> str | None:
    """Why ``ppy run`` would take jit's path for ``jitted`` now, or None
    where it would serve the staged call. ``read``: what ``build`` gave
    before the change; a refusal is a reason too."""
    if isinstance(read, str):
        return read
    found = Conditions(jitted, read, {}).captured(("mutation",))
    return None if found is None else f"{found.category}: {found.detail}"


def outcome(jitted: Any, *inputs: Any) -> tuple[Any, ...]:
    """What ``jitted`` computes on ``inputs`` when traced afresh, as bits:
    each output's dtype, weak type, shape and bytes; or the error's type."""
    jax.clear_caches()
    try:
        result = jitted(*inputs)
    except Exception as error:  # the program's own error, as python would raise it
        return ("raises", type(error).__name__)
    leaves, tree = jax.tree_util.tree_flatten(result)
    return (
        str(tree),
        *(
            (
                str(leaf.dtype),
                bool(getattr(leaf, "weak_type", False)),
                tuple(leaf.shape),
                np.asarray(leaf).tobytes(),
            )
            for leaf in leaves
        ),
    )


def same_bits(before: tuple[Any, ...], after: tuple[Any, ...]) -> bool:
    """Whether two ``outcome``s are the same bits."""
    return before == after


def distinct(before: Any, after: Any) -> bool:
    """Whether ``after`` differs from ``before`` in a way a trace can see:
    its type, an array's dtype, weak type, shape or bytes, a float's bits,
    or (for anything else) its identity."""
    if type(before) is not type(after):
        return True
    if isinstance(before, float):
        return struct.pack("<d", before) != struct.pack("<d", after)
    if isinstance(before, jax.Array) and jax.dtypes.issubdtype(before.dtype, jax.dtypes.prng_key):
        return before.dtype != after.dtype or distinct(
            jax.random.key_data(before), jax.random.key_data(after)
        )
    if isinstance(before, jax.Array | np.ndarray):
        return (
            before.dtype != after.dtype
            or bool(getattr(before, "weak_type", False)) != bool(getattr(after, "weak_type", False))
            or before.shape != after.shape
            or np.asarray(before).tobytes() != np.asarray(after).tobytes()
        )
    if isinstance(before, bool | int):
        return bool(before != after)
    return before is not after


#: What ``changes`` draws for, besides functions: the leaves a trace reads.
LEAVES = (bool, int, float, np.ndarray, jax.Array)


def _swappable(value: Any) -> bool:
    """A library function of arrays (``jnp.tanh``): swapped for another."""
    module = getattr(type(value), "__module__", "") or ""
    return callable(value) and not isinstance(value, type) and module.startswith(("jax", "numpy"))


def within(value: Any, site: Site, family: str, depth: int = 0) -> Iterator[tuple[str, Site]]:
    """Every place inside ``value`` (held at ``site``) a trace may read a
    leaf from, with the access path that reaches it: the value itself, the
    items of a container, a function's closure and defaults, an object's
    and a class's attributes."""
    if isinstance(value, LEAVES) or _swappable(value):
        yield family, site
        return
    if depth >= 4:
        return
    if isinstance(value, functools.partial):
        for index, item in enumerate(value.args):
            yield from within(item, partial_argument(value, index), "partial argument", depth + 1)
    elif isinstance(value, types.FunctionType):
        for name, item in zip(value.__code__.co_freevars, value.__closure__ or (), strict=True):
            with contextlib.suppress(ValueError):  # an empty cell
                yield from within(item.cell_contents, cell(value, name), "closure", depth + 1)
        for index, item in enumerate(value.__defaults__ or ()):
            yield from within(item, defaults(value, index), "default", depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from within(item, _item(value, index), family, depth + 1)
    elif isinstance(value, dict):
        for key, item in list(value.items()):
            yield from within(item, _item(value, key), family, depth + 1)
    elif isinstance(value, tuple):
        for index, item in enumerate(value):
            yield from within(item, _tuple_item(site, index), family, depth + 1)
    elif isinstance(value, type):
        for name, item in list(vars(value).items()):
            if not name.startswith("__"):
                kind = "callable" if _swappable(item) else "data"
                yield from within(
                    item, attribute(value, name), f"class attribute ({kind})", depth + 1
                )
    elif isinstance(getattr(value, "__dict__", None), dict) and not isinstance(
        value, types.ModuleType
    ):
        for name, item in list(vars(value).items()):
            yield from within(item, attribute(value, name), "instance attribute", depth + 1)


def _item(container: Any, key: Any) -> Site:
    def put(value: Any) -> None:
        container[key] = value

    return Site(lambda: container[key], put)


def _tuple_item(site: Site, index: int) -> Site:
    """An item of the tuple (or NamedTuple) held at ``site``, replaced by
    putting a copy of the tuple there."""

    def put(value: Any) -> None:
        held = site.get()
        items = [*held[:index], value, *held[index + 1 :]]
        site.put(type(held)(*items) if hasattr(held, "_fields") else type(held)(items))

    return Site(lambda: site.get()[index], put)


def captured_site(jitted: Any, path: tuple[str, ...]) -> tuple[str, Site] | None:
    """Where the value at a capture's ``path`` from ``jitted`` lives, and the
    access path that reaches it; None where it cannot be replaced in place
    (an item of a function's defaults, which ``within`` reaches instead)."""
    *prefix, step = path
    if DEFAULTS in path or step in (CLOSURE, BOUND):
        return None
    if prefix and prefix[-1] == BOUND:
        wrapped = getattr(jitted, "__wrapped__", None)
        index = int(step)
        if (
            len(prefix) == 1
            and isinstance(wrapped, functools.partial)
            and index < len(wrapped.args)
        ):
            return "partial argument", partial_argument(wrapped, index)
        return None
    if prefix and prefix[-1] == CLOSURE:
        owner = traced_function(resolve(jitted, tuple(prefix[:-1])) if prefix[:-1] else jitted)
        return None if owner is None else ("closure", cell(owner, step))
    parent = resolve(jitted, tuple(prefix)) if prefix else jitted
    if isinstance(parent, types.ModuleType):
        return "module attribute", attribute(parent, step)
    if isinstance(parent, type):
        return "class attribute (data)", attribute(parent, step)
    function = traced_function(parent)
    if function is not None:
        if step in function.__globals__:
            return "global", _item(function.__globals__, step)
        return None  # a builtin
    if isinstance(getattr(parent, "__dict__", None), dict):
        return "instance attribute", attribute(parent, step)
    return None


def jits_of(program: Path, argv: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run ``program`` as ``__main__`` in this process, as python runs it,
    and return each jitted function it made: its module's, and those held
    by the locals of its functions (``main()``'s) as they return."""
    found: dict[str, Any] = {}
    filename = str(program)

    def watch(frame: types.FrameType, event: str, _: Any) -> None:
        if event == "return" and frame.f_code.co_filename == filename:
            for name, value in frame.f_locals.items():
                if _jitted(value):
                    found.setdefault(f"{frame.f_code.co_qualname}.{name}", value)

    saved = sys.argv[:]
    sys.argv = [filename, *argv]
    sys.path.insert(0, str(program.parent))
    sys.setprofile(watch)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            space = runpy.run_path(filename, run_name="__main__")
    finally:
        sys.setprofile(None)
        sys.path.remove(str(program.parent))
        sys.argv = saved
    found.update({name: value for name, value in space.items() if _jitted(value)})
    return found


def _jitted(value: Any) -> bool:
    return callable(value) and hasattr(value, "lower") and hasattr(value, "__wrapped__")
