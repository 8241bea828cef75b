"""The ``xla.scalar`` runtime: bind a compiled scalar function in place of its body.

The staged call takes Python scalars in and gives a Python scalar out. It is
used only for arguments of exactly the annotated types (``float``, ``int``
within int64, ``bool``; a float argument that is subnormal is excluded, since
XLA's CPU runtime flushes those to zero) and only when the module's fallback
flag stays clear, and only while every module-level name the body reads is
what the build compiled (``reads``); every other call runs the original
Python body, so the caller sees what CPython computes, exceptions included.
The module is compiled on the first call, once per process, or loaded from
the executable cache.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, cast

from ppy.kinds.base import KindError
from ppy.kinds.xla_scalar import INT64_MAX, INT64_MIN, MIN_NORMAL_FLOAT64, XlaScalar
from ppy.runtime import Entry, NotBound, Runtime

from ppy_runtime_pjrt.guard import type_name
from ppy_runtime_pjrt.reads import Reads

__all__ = ["LoggedScalar", "ScalarRuntime", "StagedScalar"]

#: The Python type of each of the contract's scalar types.
_TYPES = {"float": float, "int": int, "bool": bool}
_FLAGGED = (
    "flag",
    "the staged call raised its fallback flag (an error, an int beyond int64, "
    "a subnormal or a result Python computes otherwise)",
)


def _log() -> Any:
    from ppy.runtime import get_logger

    return get_logger()


class StagedScalar:
    """Callable in place of an ``@xla.jit`` function; falls back to ``original``."""

    def __init__(self, entry: Entry, contract: XlaScalar, original: Callable[..., Any]) -> None:
        self.entry = entry
        self.original = original
        self.param_types = contract.param_types
        self.result_type = contract.result_type
        self._text = contract.text
        self._executable: Any = None
        #: The executable's call once loaded: the fast path's one test.
        self._call: Callable[[tuple[Any, ...]], tuple[Any, int]] | None = None
        #: The exact Python types a staged call takes, and where ints and
        #: floats sit, whose values the fast path checks too.
        self._types = tuple(_TYPES[kind] for kind in self.param_types)
        self._ints = tuple(i for i, kind in enumerate(self.param_types) if kind == "int")
        self._floats = tuple(i for i, kind in enumerate(self.param_types) if kind == "float")
        #: What the body reads from its module; None where it reads nothing.
        self._reads: Reads | None = None
        if contract.reads:
            namespace = getattr(original, "__globals__", None)
            if not isinstance(namespace, dict):
                raise NotBound("its module's names cannot be compared: not a Python function")
            self._reads = Reads(contract.reads, namespace, entry.module)
        self._broken: str | None = None
        self._reasons: set[str] = set()
        self.fallbacks = 0
        self.staged_calls = 0
        functools.update_wrapper(self, original)

    def _fallback(self, why: tuple[str, str], *args: Any, **kwargs: Any) -> Any:
        """Call the original; ``why`` is (category, reason), logged once per reason."""
        category, reason = why
        self.fallbacks += 1
        if reason not in self._reasons:
            self._reasons.add(reason)
            _log().info(
                "run.fallback",
                module=self.entry.module,
                function=self.entry.qualname,
                category=category,
                reason=reason,
            )
        return self.original(*args, **kwargs)

    def _guard(self, args: tuple[Any, ...]) -> tuple[str, str] | None:
        if len(args) != len(self.param_types):
            return "count", f"called with {len(args)} arguments, staged for {len(self.param_types)}"
        for value, kind in zip(args, self.param_types, strict=True):
            if type(value) is not _TYPES[kind]:
                given = type_name(type(value))
                return "type", f"an argument of type {given} where {kind} was staged"
            if kind == "int" and not INT64_MIN <= cast(int, value) <= INT64_MAX:
                return "range", "an int argument outside int64"
            if kind == "float" and value != 0.0 and abs(cast(float, value)) < MIN_NORMAL_FLOAT64:
                return "range", "a subnormal float argument (XLA's CPU runtime flushes it to zero)"
        return None

    def _load(self) -> Any:
        if self._executable is None and self._broken is None:
            from ppy_runtime_pjrt.scalar_exec import ScalarExecutable

            try:
                self._executable = ScalarExecutable(
                    self._text, self.param_types, self.result_type, name=self.entry.qualname
                )
            except Exception as error:  # a module this jaxlib cannot compile stays Python
                self._broken = f"the module did not compile: {error}"
                _log().warning(
                    "run.unbound",
                    module=self.entry.module,
                    function=self.entry.qualname,
                    reason=self._broken,
                )
        return self._executable

    def _fits(self, args: tuple[Any, ...]) -> bool:
        """Whether ``args`` are what the module takes (``_guard``, without the reason)."""
        if tuple(map(type, args)) != self._types:
            return False
        for i in self._ints:
            if not INT64_MIN <= args[i] <= INT64_MAX:
                return False
        for i in self._floats:
            value = args[i]
            if value != 0.0 and abs(value) < MIN_NORMAL_FLOAT64:
                return False
        return True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # The fast path: a loaded executable and arguments it takes. Anything
        # else, the first call included, goes through _slow, which says why.
        call = self._call
        reads = self._reads
        if call is None or kwargs or not self._fits(args) or (reads and not reads.same()):
            return self._slow(args, kwargs)
        result, flag = call(args)
        if flag:
            return self._fallback(_FLAGGED, *args)
        self.staged_calls += 1
        return result if self.result_type != "bool" else result != 0

    def _slow(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if kwargs:
            return self._fallback(("keywords", "keyword arguments"), *args, **kwargs)
        reason = self._guard(args)
        if reason is not None:
            return self._fallback(reason, *args)
        changed = self._reads.changed() if self._reads is not None else None
        if changed is not None:
            return self._fallback(("captured", changed), *args)
        executable = self._load()
        if executable is None:
            return self._fallback(("compile", self._broken or "not compiled"), *args)
        self._call = executable.call
        return StagedScalar.__call__(self, *args)  # now the fast path; logged once under -v


class LoggedScalar(StagedScalar):
    """Under ``-v``: the same, and every call's path is logged (``run.call``),
    as for ``jax.export`` entries. Chosen at bind time, so a quiet run's calls
    pay nothing for it."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        before = self.fallbacks
        result = super().__call__(*args, **kwargs)
        path = "original" if self.fallbacks > before else "staged"
        _log().info("run.call", module=self.entry.module, function=self.entry.qualname, path=path)
        return result


class ScalarRuntime:
    """Loads ``xla.scalar`` entries."""

    #: The ``ppy.runtime.CONTRACT`` it was written for.
    contract = (1, 0)

    def bind(self, entry: Entry, original: Callable[..., Any]) -> Callable[..., Any]:
        try:
            contract = XlaScalar.read(entry)
        except KindError as error:
            raise NotBound(str(error)) from error
        if "cpu" not in entry.platforms:
            raise NotBound(f"staged for {', '.join(entry.platforms)}, this runtime runs cpu")
        from ppy.runtime import verbose

        staged = LoggedScalar if verbose() else StagedScalar
        return staged(entry, contract, original)


#: It satisfies core's contract; mypy checks this line.
_: type[Runtime] = ScalarRuntime
