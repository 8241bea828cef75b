"""The ``jax.export`` runtime: bind a serialized export in place of the original.

``ExportRuntime.bind`` reads the entry's ``jax.export`` serialization, refuses
(``NotBound``) what this process cannot run -- another platform, a calling
convention this jax does not support, an export outside this jax's
compatibility window, a description that disagrees with the export -- and
returns a ``StagedFunction``.

A ``StagedFunction`` call costs a configuration check and one dict lookup on
top of the executable's own C++ dispatch: jax's trace context must be one
``conditions.Conditions`` accepted, and the key is ``(type, shape, dtype,
weak type, committed)`` of each argument, with only signatures that
``guard.Guard`` accepted in the dict. Everything the lookup needs is
computed at bind time; a miss (a new shape, a Python scalar, a tracer,
keyword arguments, a new configuration) takes the slow path, which either
loads an executable for the new signature (once the values its trace read
are found unchanged) or calls the original and records why.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ppy.entry import Entry
from ppy.jax_window import outside_window
from ppy.kinds import JaxExport, KindError
from ppy.runtime import ORIGINAL, NotBound

from ppy_runtime_pjrt import unstaged
from ppy_runtime_pjrt.conditions import Conditions
from ppy_runtime_pjrt.guard import Fallback, Guard, Signature

__all__ = ["CallStats", "ExportRuntime", "StagedFunction"]


def _log() -> Any:
    from ppy.log import get_logger

    return get_logger()


def _verbose() -> bool:
    from ppy.log import verbose

    return verbose()


@dataclass
class CallStats:
    """What a ``StagedFunction`` has done, for tests, benchmarks and ``-v``.

    ``fallbacks`` counts calls that went to the original by ``Fallback``
    category; ``executables`` says where each signature's executable came
    from ("cache" or "compiled"). Staged calls are not counted: the fast path
    does nothing it does not need.
    """

    fallbacks: dict[str, int] = field(default_factory=dict)
    executables: dict[Signature, str] = field(default_factory=dict)


class StagedFunction:
    """The state behind one bound function: its guard, executables and stats.

    What is bound in the original's place is ``StagedFunction.callable()``, a
    plain function specialised for the entry's arity, because a Python-level
    ``__call__`` on an instance costs more than the guard itself. Calling the
    instance works too (the generic path); tests and tools may use either.
    """

    def __init__(
        self,
        original: Callable[..., Any],
        *,
        guard: Guard,
        loader: Any,
        module: str,
        qualname: str,
        conditions: Conditions,
    ) -> None:
        self.original = original
        self.guard = guard
        self.conditions = conditions
        self.loader = loader
        self.module = module
        self.qualname = qualname
        #: ``_key(args)`` -> the executable's call, for accepted signatures only.
        self.table: dict[tuple[Any, ...], Callable[..., Any]] = {}
        #: Concrete signature -> call, shared by ndarray and jax.Array keys.
        self.executables: dict[Signature, Callable[..., Any]] = {}
        #: Keys the guard refused, so a repeated fallback does not re-check.
        self.rejected: dict[tuple[Any, ...], Fallback] = {}
        self.seen: set[str] = set()
        self.stats = CallStats()

    def __repr__(self) -> str:
        return f"<staged {self.module}.{self.qualname} of {self.original!r}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.slow(args, kwargs)

    def callable(self) -> Callable[..., Any]:
        """The function to bind: the fast path, then ``slow`` on any miss."""
        arity = len(self.guard.specs)
        conditions = self.conditions
        gate = (conditions.context, conditions.held, conditions.debug)
        fast = _FAST.get(arity, _fast_any)(self.table, self.slow, gate)
        if _verbose():
            fast = _logged(fast, self)
        functools.update_wrapper(fast, self.original)
        # As jax's own: ``score.__wrapped__`` is the Python function jit wraps.
        fast.__wrapped__ = getattr(self.original, "__wrapped__", self.original)  # type: ignore[attr-defined]
        for name in _FORWARDED:
            value = getattr(self.original, name, None)
            if value is not None:
                setattr(fast, name, value)
        fast.ppy_stats = self.stats  # type: ignore[attr-defined]
        fast.ppy_staged = self  # type: ignore[attr-defined]
        setattr(fast, ORIGINAL, self.original)
        return fast

    def slow(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A call the table did not serve: a new signature, a configuration
        not yet checked, or a fallback."""
        configured = self.conditions.configuration()
        if configured is not None:
            return self._fall_back(configured, args, kwargs)
        key = None if kwargs else _key(args)
        if key is not None:
            call = self.table.get(key)
            if call is not None:  # a NumPy array of a known signature
                return call(*args)
            verdict = self.rejected.get(key)
            if verdict is not None:
                return self._fall_back(verdict, args, kwargs)
        checked = self.guard.check(args, kwargs)
        if not isinstance(checked, Fallback):
            call_or_fallback = self._executable(checked)
            if not isinstance(call_or_fallback, Fallback):
                if key is not None:
                    self.table[key] = call_or_fallback
                return call_or_fallback(*args)
            checked = call_or_fallback
        if key is not None and checked.category != "tracer":
            self.rejected[key] = checked
        return self._fall_back(checked, args, kwargs)

    def _executable(self, signature: Signature) -> Callable[..., Any] | Fallback:
        call = self.executables.get(signature)
        if call is not None:
            return call
        # Where jit would trace this signature, and read the globals now.
        captured = self.conditions.captured()
        if captured is not None:
            return captured
        from ppy_runtime_pjrt.compile import CompileRefused

        try:
            call, source = self.loader.load(signature)
        except CompileRefused as error:
            return Fallback("compile", f"the export does not compile for these shapes: {error}")
        self.executables[signature] = call
        self.stats.executables[signature] = source
        return call

    def _fall_back(self, verdict: Fallback, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        counts = self.stats.fallbacks
        counts[verdict.category] = counts.get(verdict.category, 0) + 1
        if verdict.detail not in self.seen:
            self.seen.add(verdict.detail)
            _log().info(
                "run.fallback",
                module=self.module,
                function=self.qualname,
                category=verdict.category,
                reason=verdict.detail,
            )
        return self.original(*args, **kwargs)


#: What a jitted function offers besides being called; the bound function
#: forwards them so that ``score.lower(x)`` keeps working under ``ppy run``.
_FORWARDED = ("lower", "trace", "eval_shape", "clear_cache")


def _key(args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The table key of ``args`` as the fast path builds it; None if unkeyable.

    A ``jax.Array`` is keyed by its aval's shape, dtype and weak type (one C
    attribute read instead of two Python properties) and whether it is
    committed to a device; a NumPy array by its shape and dtype. The type is
    part of the key, so a tracer, whose aval may be the same, never matches.
    """
    key: list[Any] = []
    for a in args:
        kind = type(a)
        aval = getattr(a, "aval", None)
        if aval is not None:
            key += (kind, aval.shape, aval.dtype, aval.weak_type, getattr(a, "_committed", False))
        elif isinstance(a, _numpy_array()):
            key += (kind, a.shape, a.dtype, False, False)
        else:
            return None
    try:
        hash(tuple(key))
    except TypeError:
        return None
    return tuple(key)


def _numpy_array() -> type:
    import numpy

    return numpy.ndarray


# The fast paths. Each reads one aval per argument and looks the key up;
# anything unexpected (no aval, unhashable, not in the table) goes to
# ``slow`` outside the ``except`` so the original's errors carry no context.

_MISSES = (KeyError, AttributeError, TypeError)
#: What the fast path checks of the configuration on every call
#: (``Conditions``): jax's trace context, the one last found to hold, and
#: what says whether debug_nans or debug_infs is on.
_Gate = tuple[Callable[[], Any], list[Any], Any]


def _fast_0(table: dict[Any, Any], slow: Callable[..., Any], gate: _Gate) -> Callable[..., Any]:
    context, held, debug = gate

    def staged(*args: Any, **kwargs: Any) -> Any:
        if not kwargs and not args and context() == held[0] and not debug.value:
            call = table.get(())
            if call is not None:
                return call()
        return slow(args, kwargs)

    return staged


def _fast_1(table: dict[Any, Any], slow: Callable[..., Any], gate: _Gate) -> Callable[..., Any]:
    context, held, debug = gate

    def staged(*args: Any, **kwargs: Any) -> Any:
        if not kwargs and len(args) == 1 and context() == held[0] and not debug.value:
            a = args[0]
            try:
                av = a.aval
                call = table[(type(a), av.shape, av.dtype, av.weak_type, a._committed)]
            except _MISSES:
                pass
            else:
                return call(a)
        return slow(args, kwargs)

    return staged


def _fast_2(table: dict[Any, Any], slow: Callable[..., Any], gate: _Gate) -> Callable[..., Any]:
    context, held, debug = gate

    def staged(*args: Any, **kwargs: Any) -> Any:
        if not kwargs and len(args) == 2 and context() == held[0] and not debug.value:
            a, b = args
            try:
                av = a.aval
                bv = b.aval
                call = table[
                    (
                        type(a), av.shape, av.dtype, av.weak_type, a._committed,
                        type(b), bv.shape, bv.dtype, bv.weak_type, b._committed,
                    )
                ]  # fmt: skip
            except _MISSES:
                pass
            else:
                return call(a, b)
        return slow(args, kwargs)

    return staged


def _fast_any(table: dict[Any, Any], slow: Callable[..., Any], gate: _Gate) -> Callable[..., Any]:
    context, held, debug = gate

    def staged(*args: Any, **kwargs: Any) -> Any:
        if not kwargs and context() == held[0] and not debug.value:
            try:
                key: tuple[Any, ...] = ()
                for a in args:
                    av = a.aval
                    key += (type(a), av.shape, av.dtype, av.weak_type, a._committed)
                call = table[key]
            except _MISSES:
                pass
            else:
                return call(*args)
        return slow(args, kwargs)

    return staged


_FAST = {0: _fast_0, 1: _fast_1, 2: _fast_2}


def _logged(fast: Callable[..., Any], staged: StagedFunction) -> Callable[..., Any]:
    """Under ``-v``: the same, and every call's path is logged (``run.call``)."""
    counts = staged.stats.fallbacks

    def staged_verbose(*args: Any, **kwargs: Any) -> Any:
        before = sum(counts.values())
        result = fast(*args, **kwargs)
        path = "original" if sum(counts.values()) > before else "staged"
        _log().info("run.call", module=staged.module, function=staged.qualname, path=path)
        return result

    return staged_verbose


def _jaxlib_version() -> str:
    import jaxlib

    return str(jaxlib.__version__)


def _platform_reason(entry: Entry, exported: Any) -> str | None:
    import jax

    here = jax.export.default_export_platform()
    platforms = tuple(exported.platforms) or tuple(entry.platforms)
    if here in platforms:
        return None
    return (
        f"exported for {', '.join(platforms)}, but this process runs on {here} "
        f"(jax.default_backend() is {jax.default_backend()!r})"
    )


def _check_description(entry: Entry, exported: Any) -> None:
    """The entry's inputs must be the export's, or the guard would lie."""
    import jax

    if exported.in_tree != jax.tree_util.tree_structure((tuple(range(len(entry.inputs))), {})):
        raise NotBound(
            f"the export takes {exported.in_tree}, not {len(entry.inputs)} positional arrays"
        )
    for index, (spec, aval) in enumerate(zip(entry.inputs, exported.in_avals, strict=True)):
        dims = tuple(aval.shape)
        dtype = str(aval.dtype)
        fixed_agree = all(
            not isinstance(d, int) or (isinstance(a, int) and a == d)
            for d, a in zip(spec.dims, dims, strict=False)
        )
        if len(dims) != len(spec.dims) or dtype != spec.dtype or not fixed_agree:
            raise NotBound(
                f"input {index} is described as {spec} but the export takes "
                f"{dtype}[{','.join(str(d) for d in dims)}]; rebuild the artifact"
            )


class ExportRuntime:
    """Loads ``jax.export`` entries (registered under ``ppy.runtimes``)."""

    def __init__(self, cache: Any = None) -> None:
        # None: the per-user cache, created on first use; False: no disk cache.
        self._cache = cache

    def close(self) -> None:
        """The program has ended: jax's compile step is its own again."""
        unstaged.uninstall()

    def bind(self, entry: Entry, original: Callable[..., Any]) -> Callable[..., Any]:
        import jax
        import numpy
        from jax._src.array import ArrayImpl
        from ppy.cache import ExecutableCache

        from ppy_runtime_pjrt.compile import Executables

        try:
            contract = JaxExport.read(entry)
        except KindError as error:
            raise NotBound(str(error)) from error
        outside = outside_window(contract.jaxlib_version, _jaxlib_version())
        if outside is not None:
            raise NotBound(f"{outside}; rebuild the artifact with this jax (`ppy build`)")
        blob = contract.export
        try:
            exported = jax.export.deserialize(bytearray(blob))
        except Exception as error:
            raise NotBound(
                f"jax {jax.__version__} cannot read this export (written by jax "
                f"{contract.jax_version}): {type(error).__name__}: {error}"
            ) from error
        low = jax.export.minimum_supported_calling_convention_version
        high = jax.export.maximum_supported_calling_convention_version
        version = exported.calling_convention_version
        if not low <= version <= high:
            raise NotBound(
                f"the export uses calling convention version {version}; jax {jax.__version__} "
                f"supports {low}..{high}; rebuild the artifact with this jax"
            )
        reason = _platform_reason(entry, exported)
        if reason is not None:
            raise NotBound(reason)
        _check_description(entry, exported)
        if self._cache is None:
            cache: ExecutableCache | None = ExecutableCache()
        else:
            cache = self._cache or None
        if cache is not None:
            unstaged.install(cache.unstaged())
        try:
            guard = Guard(
                entry.inputs,
                [jax.numpy.dtype(spec.dtype) for spec in entry.inputs],
                array_types=(ArrayImpl, numpy.ndarray),
                tracer_type=jax.core.Tracer,
            )
        except ValueError as error:
            raise NotBound(f"the input description does not read: {error}; rebuild") from error
        loader = Executables(
            exported, payload=blob, cache=cache, module=entry.module, qualname=entry.qualname
        )
        staged = StagedFunction(
            original,
            guard=guard,
            loader=loader,
            module=entry.module,
            qualname=entry.qualname,
            conditions=Conditions(original, contract.captures, dict(contract.trace_config)),
        )
        return staged.callable()
