"""Watch a run's jitted calls: ``ppy record`` runs the program as python does,
on the original jitted path everywhere, and notes what each call passed.

The project's ``.ppy`` modules are executed through the same finder as
``ppy run`` (``ppy.run.binding``), so each module-level ``jax.jit`` function
is wrapped right after its ``def``, and one defined inside a function or
under ``if __name__ == "__main__":`` where ``jax.jit`` makes it
(``ppy.run.made``): the wrapper notes the call's abstract
signature, as jit sees it, then calls the jitted function itself. What is
noted per input: an array's dtype and shape (and whether it is weakly typed
or laid out over several devices), a static argument's value, a Python
scalar's type, a pytree's structure and leaves. Values never leave the
process; shapes and static literals are all the file holds.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import math
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import CodeType, FunctionType
from typing import Any

from ppy.discovery.records import FunctionInfo, ModuleInfo
from ppy.kinds.fingerprint import closure
from ppy.kinds.keys import KEY_DTYPES, is_key
from ppy.kinds.pytrees import class_name, reference
from ppy.kinds.tracers import primals
from ppy.record.format import CLOSURE, FunctionCalls, Signatures
from ppy.record.gradients import Watch
from ppy.record.live import LiveWatch, Traced, module_names, needs_live
from ppy.run.binding import bind_source, want_made
from ppy.run.made import MadeJits

__all__ = ["Recorder", "Unrecordable", "candidates"]

#: The decorators whose functions are recorded.
_JIT = "jax.jit"


#: Where a recorded function may be defined: at module level, inside a
#: function, or under ``if __name__ == "__main__":`` (not a method, but a
#: static one).
_SCOPES = frozenset({"module", "nested", "main"})


def candidates(modules: Sequence[ModuleInfo]) -> dict[str, dict[str, FunctionInfo]]:
    """The jitted functions of each module, by qualname."""
    found: dict[str, dict[str, FunctionInfo]] = {}
    for module in modules:
        functions = {
            f.qualname: f
            for f in module.functions
            if (f.scope in _SCOPES or f.static_method) and any(d.name == _JIT for d in f.decorators)
        }
        if functions:
            found[module.name] = functions
    return found


class Recorder:
    """A binder for ``run_program`` that wraps instead of replacing."""

    def __init__(
        self, root: Path, functions: Mapping[str, Mapping[str, FunctionInfo]], main: str
    ) -> None:
        self.root = root
        self.functions = functions
        #: The program's module name: its classes are ``__main__``'s as it runs.
        self.main = main
        #: Per function (``module.qualname``), how often each signature was called.
        self.seen: dict[str, Counter[str]] = {}
        #: Per function, its calls under ``jax.grad`` (``FunctionCalls.gradients``).
        self.gradients: dict[str, FunctionCalls] = {}
        #: Per function, the watch of those calls (``ppy.record.gradients``).
        self.watches: dict[str, Watch] = {}
        #: Per function, the calls that could not be written down, by why.
        self.skipped: Counter[tuple[str, str]] = Counter()
        #: Per function the build cannot make again (``ppy.record.live``): its
        #: module, qualname, and the signatures of its calls as jit keys them.
        self.live: dict[str, tuple[str, str, LiveWatch]] = {}
        #: Per module, the names its top level binds where the build imports it.
        self.names: dict[str, frozenset[str]] = {}
        self.jits = MadeJits()

    def modules(self) -> set[str]:
        return set(self.functions)

    def code(
        self, path: str, module: str | None
    ) -> tuple[CodeType, Callable[[str, Any], Any] | None]:
        functions = self.functions.get(module or "", {})
        source = Path(path).read_bytes()
        bound = bind_source(source, path, frozenset(functions))
        if not functions:
            return bound.code, None
        assert module is not None
        self.names[module] = module_names(source)

        def bind(qualname: str, original: Any) -> Any:
            return self._wrap(f"{module}.{qualname}", functions[qualname], original)

        want_made(self.jits, path, frozenset(functions), bound, bind)
        return bound.code, bind

    def _wrap(self, name: str, function: FunctionInfo, original: Any) -> Any:
        python = inspect.unwrap(original)
        try:
            signature = inspect.signature(python)
        except (TypeError, ValueError):
            return original  # nothing to name the inputs by: left alone
        positional = tuple(
            p.name
            for p in signature.parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        )
        counter = self.seen.setdefault(name, Counter())
        code = getattr(python, "__code__", None)  # None: a partial or a transform of one
        made = python if code is not None and code.co_freevars else None
        notes = _Notes(
            _name(original),
            positional,
            function.static,
            self.main,
            counter,
            self.skipped,
            made,
            self.watches.setdefault(name, Watch(self.gradients.setdefault(name, FunctionCalls()))),
        )
        notes.defaults = {
            n: p.default
            for n, p in signature.parameters.items()
            if n in function.static and p.default is not p.empty
        }
        notes.live = self._live(name, function, python, signature)
        if notes.live is not None:
            notes.live.function = original
        return _recorded(original, notes)

    def _live(
        self, name: str, function: FunctionInfo, python: Any, signature: inspect.Signature
    ) -> LiveWatch | None:
        """The watch of a function's calls: it is exported from this run where
        the build cannot make it again, or cannot hold its calls. None where
        there is no signature to export by."""
        qualname = function.qualname
        module = name[: -len(qualname) - 1]
        if function.reads:  # made by a call that reads variables of the function around it
            owner = qualname.rpartition(".<locals>.")[0] or "the main guard"
            why: str | None = (
                f"it is made by a call that reads {', '.join(function.reads)} of {owner}"
            )
        elif isinstance(python, FunctionType):
            why = needs_live(python, self.names.get(module, frozenset()), self.main)
        else:
            return None
        # Where ``why`` is None the build makes it, and it is exported here
        # only if a call passes what the file cannot hold (``LiveWatch.note``).
        kinds = [p.kind for p in function.parameters]
        if any(k not in ("positional", "keyword_only") for k in kinds):
            return None  # *args, **kwargs: no signature to export by
        known = self.live.get(name)
        if known is not None:  # made again (each call of main(), a loop): one watch
            return known[2]
        parameters = tuple((p.name, p.kind) for p in function.parameters)
        defaults = [p.name for p in signature.parameters.values() if p.default is not p.empty]
        watch = LiveWatch(parameters, function.static, why, defaults, function.donated)
        self.live[name] = (module, qualname, watch)
        return watch

    def gradient_calls(self, name: str) -> list[dict[str, Any]]:
        """The calls of function ``name`` under ``jax.grad``, as the
        signatures file holds them (``FunctionCalls.gradient_calls``)."""
        found = self.gradients.get(name)
        return found.gradient_calls() if found is not None else []

    def signatures(self) -> Signatures:
        """This run's calls as a file's content (one run)."""
        found = Signatures(runs=1)
        for name, counter in self.seen.items():
            calls = FunctionCalls()
            for key, count in counter.items():
                if count:
                    calls.counts[key] = count
            calls.gradients = self.gradients.get(name, FunctionCalls()).gradients
            if calls.counts:
                found.functions[name] = calls
        return found


def _recorded(original: Any, notes: _Notes) -> Any:
    """``original`` as jit's own kind of object (``ppy.kinds.dispatch``),
    noting each call's signature before making it.

    The dispatcher caches nothing, so every call comes to ``miss`` and is
    counted; the call itself is the jitted function's, on its own fast path
    once it has traced. ``_cache_size`` and ``clear_cache`` are the jitted
    function's own.
    """
    from ppy.kinds.dispatch import dispatcher, dress, hide_own_frames
    from ppy.kinds.fingerprint import python_function

    def miss(*args: Any, **kwargs: Any) -> tuple[Any, None, bool]:
        watched = notes(args, kwargs)
        try:
            if watched is not None:
                return watched(original), None, False
            return original(*args, **kwargs), None, False
        except BaseException as error:
            hide_own_frames(error)  # this frame is ppy's, not the program's
            raise

    function = python_function(original) or original
    static = [i for i, name in enumerate(notes.positional) if name in notes.static]
    made = dispatcher(notes.name, function, miss, static, sorted(notes.static))
    if made is None:  # a jax without the dispatcher: a Python function in its place

        def made(*args: Any, **kwargs: Any) -> Any:
            return miss(*args, **kwargs)[0]

    dress(made, original, function, "_cache_size", "clear_cache")
    return made


class _Notes:
    """Notes the abstract signature of each call of one jitted function."""

    __slots__ = (
        "_counter",
        "_made",
        "_main",
        "_skipped",
        "defaults",
        "live",
        "name",
        "positional",
        "static",
        "watch",
    )

    def __init__(
        self,
        name: str,
        positional: tuple[str, ...],
        static: frozenset[str],
        main: str,
        counter: Counter[str],
        skipped: Counter[tuple[str, str]],
        made: Any = None,
        watch: Watch | None = None,
    ) -> None:
        self.name = name
        #: Where calls under ``jax.grad`` note their backward passes.
        self.watch = watch if watch is not None else Watch(FunctionCalls())
        #: The Python function, where it reads variables of the function around it.
        self._made = made
        self.positional = positional
        self.static = static
        self._main = main
        self._counter = counter
        self._skipped = skipped
        #: Where a function the build cannot make again counts its signatures.
        self.live: LiveWatch | None = None
        #: The static parameters' defaults: a call that leaves one out is
        #: noted with its default, the value jit traces with and the
        #: runtime's binding keys the variant by (``Calls.bind``).
        self.defaults: Mapping[str, Any] = {}

    def __call__(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Callable[[Callable[..., Any]], Any] | None:
        """Note a call; under ``jax.grad``, what makes it so that its backward
        passes are noted too (``ppy.record.gradients``)."""
        try:
            self._note(args, kwargs)
        except (Traced, _Traced):
            # Under jax.grad or jax.vjp: the arrays the call is evaluated at,
            # which a staged export serves it at. Under any other transform,
            # inside another function's trace: inlined there, never a call of its own.
            concrete = _evaluated_at(args, kwargs)
            if concrete is not None:
                with contextlib.suppress(Traced, _Traced):
                    self._note(*concrete)
                    if self.live is not None:
                        self.live.differentiated = True
                    return self.watch(self.positional, self.static, args, kwargs)
        return None

    def _note(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        passed = self.positional[: len(args)]
        left = {n: v for n, v in self.defaults.items() if n not in kwargs and n not in passed}
        if left:
            kwargs = {**kwargs, **left}
        try:
            if self.live is not None:
                self.live.note(self.positional, args, kwargs)
            inputs = _inputs(self.positional, self.static, self._main, args, kwargs)
            if self._made is not None:
                inputs.update(_closure(self._made, self._main))
            self._counter[json.dumps(inputs, sort_keys=True, separators=(",", ":"))] += 1
        except Unrecordable as why:
            self._skipped[(self.name, str(why))] += 1
        except (Traced, _Traced):
            raise
        except Exception as error:  # reading the inputs must not change the call
            # An input that raises where ppy looks at it (a ``shape`` property
            # of the program's, a pytree node whose flattening fails): the
            # call is left out of the file, and jit, called next, meets the
            # input as under python, raising what python raises.
            unread = f"an input ppy could not read ({type(error).__name__}: {error})"
            self._skipped[(self.name, unread)] += 1


class Unrecordable(Exception):
    """A call whose inputs the file cannot hold; the message says why."""


class _Traced(Exception):
    """An input is a tracer: the call happens inside another jitted function's trace."""


_TRACER: list[type] = []


def _is_tracer(value: Any) -> bool:
    if not _TRACER:
        try:
            from jax.core import Tracer
        except ImportError:  # where jax.core no longer exports it
            from jax._src.core import Tracer
        _TRACER.append(Tracer)
    return isinstance(value, _TRACER[0])


def _evaluated_at(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """The call with each tracer of a reverse-mode differentiation in it
    replaced by the array it is evaluated at (``ppy.kinds.tracers``); None
    where a tracer is of any other trace."""
    import jax

    leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
    _is_tracer(None)  # jax's Tracer type, found once
    found = primals(leaves, _TRACER[0])
    if found is None:
        return None
    concrete: tuple[tuple[Any, ...], dict[str, Any]] = jax.tree_util.tree_unflatten(tree, found)
    return concrete


def _name(function: Any) -> str:
    return str(getattr(function, "__qualname__", getattr(function, "__name__", "?")))


def _inputs(
    positional: Sequence[str],
    static: frozenset[str],
    main: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> dict[str, Any]:
    """The call's inputs as the file holds them."""
    inputs: dict[str, Any] = {}
    for name, value in zip(positional, args, strict=False):
        inputs[name] = _input(value, name in static, main)
    for name, value in kwargs.items():
        inputs[name] = _input(value, name in static, main)
    return inputs


def _closure(fn: Any, main: str) -> dict[str, Any]:
    """``{CLOSURE: {"closure": {name: value}}}``: the variables ``fn`` reads
    of the function around it, where each is a literal (``{"static": 0.1}``)
    or an object a module names (``{"ref": "model:loss"}``), which the build
    can give it again; nothing where one is anything else (an array), and
    the build then says what the function reads."""
    found = {}
    for name, value in closure(fn).items():
        if value is None or type(value) in (bool, int, str) or _finite(value):
            found[name] = {"static": value}
        elif (ref := reference(value, main)) is not None:
            found[name] = {"ref": ref}
        else:
            return {}
    return {CLOSURE: {"closure": found}}


def _finite(value: Any) -> bool:
    return type(value) is float and math.isfinite(value)


def _input(value: Any, static: bool, main: str) -> dict[str, Any]:
    if static:
        if type(value) is float and not math.isfinite(value):
            # JSON has no such number, nor has the artifact's manifest.
            raise Unrecordable(f"the static float {value}, which the file holds no number for")
        if value is None or type(value) in (bool, int, float, str):
            return {"static": value}
        raise Unrecordable(f"a static {type(value).__name__}, which is not a literal")
    leaf = _leaf(value)
    if leaf is not None:
        return leaf
    import jax

    leaves, tree = jax.tree_util.tree_flatten(value)
    found = []
    for item in leaves:
        described = _leaf(item)
        if described is None:
            raise Unrecordable(f"a {type(item).__name__} inside a pytree, which jit cannot take")
        found.append(described)
    return {"nest": _node(tree, iter(found), main, 0)}


#: How deep a pytree is written out (the file's limit).
NEST_DEPTH = 16


def _node(tree: Any, leaves: Iterator[dict[str, Any]], main: str, depth: int) -> dict[str, Any]:
    """One pytree node as the file holds it: plain lists, tuples and
    str-keyed dicts as themselves, any other node (a NamedTuple, an optax
    state, a flax or equinox structure) by its class, its metadata and its
    children, so that the build can rebuild the very same structure."""
    if depth > NEST_DEPTH:
        raise Unrecordable(f"a pytree nested more than {NEST_DEPTH} deep")
    kind, data = tree.node_data()
    children = [_child(child, leaves, main, depth) for child in tree.children()]
    if kind is list or kind is tuple:
        return {kind.__name__: children}
    if kind is dict and all(type(key) is str for key in data):
        return {"dict": dict(zip(data, children, strict=True))}
    try:
        metadata = _metadata(data, main, 0)
    except Unrecordable as why:
        raise Unrecordable(f"a {kind.__qualname__} whose metadata holds {why}") from None
    return {"node": {"type": class_name(kind, main), "data": metadata, "children": children}}


def _child(tree: Any, leaves: Iterator[dict[str, Any]], main: str, depth: int) -> dict[str, Any]:
    data = tree.node_data()
    if data is None:
        return next(leaves)
    if data[0] is type(None):
        return {"none": True}
    return {"nest": _node(tree, leaves, main, depth + 1)}


def _metadata(value: Any, main: str, depth: int) -> Any:
    """A node's metadata as JSON: literals, lists, ``{"tuple": [...]}``, and
    ``{"ref": "module:name"}`` for a class, function or sentinel that its
    module holds under that name."""
    if depth > NEST_DEPTH:
        raise Unrecordable("metadata nested too deeply")
    if value is None or type(value) in (bool, int, str):
        return value
    if type(value) is float:
        if not math.isfinite(value):
            raise Unrecordable(f"the float {value}")
        return value
    if type(value) is tuple:
        return {"tuple": [_metadata(item, main, depth + 1) for item in value]}
    if type(value) is list:
        return [_metadata(item, main, depth + 1) for item in value]
    ref = reference(value, main)
    if ref is None:
        raise Unrecordable(f"a {type(value).__name__} its module does not name")
    return {"ref": ref}


def _leaf(value: Any) -> dict[str, Any] | None:
    """An array, a Python scalar or None; None for anything else.

    What is noted is what jit traces: a NumPy array or scalar of a 64-bit
    dtype by the dtype jit gives it under the configuration in force at the
    call (``float64`` is ``float32`` where x64 is off), and a Python int or
    float where x64 is on by the weakly typed 64-bit scalar jit makes of it
    (``{"python": "int"}`` stands for jit's ``int32`` one).
    """
    if value is None:
        return {"none": True}
    kind = type(value)
    if kind in (bool, int, float, complex):
        if kind in (int, float) and _x64():
            return {"array": f"{kind.__name__}64[]", "weak": True}
        return {"python": kind.__name__}
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if isinstance(shape, tuple) and dtype is not None:
        if _is_tracer(value):
            raise _Traced
        if str(dtype) in KEY_DTYPES and is_key(dtype):  # a key array: as jit traces it
            return _array(value, shape, dtype)
        _standard(dtype)
        return _array(value, shape, _canonical(dtype))
    return None


def _x64() -> bool:
    """Whether jit keeps 64-bit values as they are (``jax_enable_x64``, as
    the calling thread sees it, a ``with`` block's value inside one)."""
    import numpy

    wide = numpy.dtype("int64")
    return bool(_canonical(wide) == wide)


def _standard(dtype: Any) -> None:
    """Refuse an array of one of jax's extended dtypes other than the keys
    of ``KEY_DTYPES``: the file has no such dtype, and ppy stages none."""
    import numpy

    if isinstance(dtype, numpy.dtype):  # every array's but an extended one: no more to ask
        return
    import jax

    try:
        extended = jax.numpy.issubdtype(dtype, jax.dtypes.extended)
    except TypeError:  # not a dtype jax knows: noted as it is, and the file refuses it
        return
    if extended:
        key = jax.numpy.issubdtype(dtype, jax.dtypes.prng_key)
        kind = (
            "a typed PRNG key array of its own implementation"
            if key
            else "an array of jax's extended dtype"
        )
        raise Unrecordable(f"{kind} ({dtype}), which ppy does not stage")


def _canonical(dtype: Any) -> Any:
    """``dtype`` as jit gives it to the trace, under the configuration in force."""
    import jax

    try:
        return jax.dtypes.canonicalize_dtype(dtype)
    except TypeError:  # not a dtype jax knows: noted as it is, and the file refuses it
        return dtype


def _array(value: Any, shape: tuple[int, ...], dtype: Any) -> dict[str, Any]:
    found: dict[str, Any] = {"array": f"{dtype}[{','.join(str(int(d)) for d in shape)}]"}
    if getattr(value, "weak_type", False):
        found["weak"] = True
    sharding = getattr(value, "sharding", None)
    if sharding is not None and len(getattr(sharding, "device_set", ())) > 1:
        found["sharded"] = True
    return found
