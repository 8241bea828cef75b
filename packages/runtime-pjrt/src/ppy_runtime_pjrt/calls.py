"""A call, bound to the staged function's signature the way jax binds it.

``score(x)``, ``score(x=x)`` and ``step(params, batch, training=True)`` all
reach the same export: the call is bound to the Python function's signature
(defaults applied to static parameters), its static values pick the
export's variant (keyed as ``ppy.kinds.statics`` keys them: a function by
its fingerprint, taken once per function object, as jit keys its cache by
the object), and its traced parameters, in signature order, are the
pytree whose leaves the export takes. An entry that lists them in another
order is not bound. The arguments jax's dispatcher keys
its cache by are the call's own, less the static ones, as jit removes them:
by position (``static_argnums``) and by name (``static_argnames``).
"""

from __future__ import annotations

import contextlib
import inspect
import weakref
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from ppy.kinds import statics
from ppy.kinds.fingerprint import Unreadable, fingerprint

from ppy_runtime_pjrt.guard import Fallback

__all__ = ["Bound", "Calls"]

#: The static values as the variants are keyed (``ppy.kinds.statics.key``).
StaticKey = tuple[Hashable, ...]


@dataclass(frozen=True)
class Bound:
    """One call, bound."""

    #: The static parameters' values, keyed as ``ppy.kinds.statics.key`` keys a variant.
    static: StaticKey
    #: The static parameters' values themselves.
    values: tuple[Any, ...]
    #: The traced parameters' values, in signature order.
    traced: tuple[Any, ...]
    #: The call's arguments without the static ones: what the executable takes.
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


class Calls:
    """Binds calls of one function; ``traced`` and ``static`` are the entry's names."""

    def __init__(
        self,
        function: Callable[..., Any],
        traced: Sequence[str],
        static: Sequence[str],
        module: str | None = None,
        donated: Sequence[str] = (),
    ) -> None:
        """``module``: the entry's module, the name the program's own module
        had when it was exported (it runs as ``__main__``); ``donated``: the
        parameters the jit donates."""
        self.fingerprints = _Fingerprints(module)
        self.signature = inspect.signature(function)
        parameters = self.signature.parameters
        missing = [name for name in (*traced, *static) if name not in parameters]
        if missing:
            raise ValueError(f"the function has no parameter {', '.join(missing)}")
        order = list(parameters)
        if list(traced) != sorted(traced, key=order.index):
            # The export takes its inputs in the order ``traced`` lists them;
            # a build lists them in the signature's. One that listed them in
            # another order paired each input with another's description, and
            # binding by its order would hand each parameter another's value.
            raise ValueError(
                f"the entry lists its inputs as ({', '.join(traced)}), not in the "
                f"signature's order; rebuild the artifact (`ppy build`)"
            )
        self.traced = tuple(traced)
        self.static = tuple(static)
        positional = [
            name
            for name, p in parameters.items()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        #: As jit resolves them: every static parameter by name, and the
        #: positional ones by position too.
        self.static_argnums = tuple(i for i, name in enumerate(positional) if name in static)
        self.static_argnames = tuple(
            name for name in static if parameters[name].kind != parameters[name].POSITIONAL_ONLY
        )
        #: As jit resolves them, the same way.
        self.donated = tuple(name for name in donated if name in parameters)
        self.donate_argnums = tuple(i for i, name in enumerate(positional) if name in self.donated)
        self.donate_argnames = tuple(
            name
            for name in self.donated
            if parameters[name].kind != parameters[name].POSITIONAL_ONLY
        )

    def with_traced(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], traced: Sequence[Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The call ``args``, ``kwargs`` with ``traced`` (in ``self.traced``'s
        order) in place of its traced parameters' values."""
        bound = self.signature.bind(*args, **kwargs)
        bound.arguments.update(zip(self.traced, traced, strict=True))
        return bound.args, bound.kwargs

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Bound | Fallback:
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as error:
            return Fallback("signature", f"the call does not bind to the signature: {error}")
        arguments = bound.arguments
        left = [name for name in self.traced if name not in arguments]
        if left:
            return Fallback(
                "signature",
                f"{', '.join(left)} left to its default, which the export does not take",
            )
        passed = [name for name in arguments if name not in self.traced and name not in self.static]
        if passed:
            # Left out of every call the export was made for (a default, what
            # a partial binds by keyword): its trace holds that value.
            return Fallback(
                "signature",
                f"{', '.join(passed)} passed, which the export does not take: it was traced "
                "with the value the function has when the call leaves it out",
            )
        bound.apply_defaults()  # a static parameter left out takes its default, as in jit
        arguments = bound.arguments
        values = tuple(arguments[name] for name in self.static)
        numbers = self.static_argnums
        names = self.static_argnames
        return Bound(
            static=tuple(statics.key(v, self.fingerprints) for v in values),
            values=values,
            traced=tuple(arguments[name] for name in self.traced),
            args=tuple(a for i, a in enumerate(args) if i not in numbers),
            kwargs={k: v for k, v in kwargs.items() if k not in names},
        )


class _Fingerprints:
    """A function's fingerprint, taken once per function object: a static
    argument's key. jit keys its traces by the object too, and what the
    function reads is checked again where jit would trace (``Conditions``)."""

    def __init__(self, module: str | None) -> None:
        self.module = module
        self._known: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()

    def __call__(self, function: Any) -> str | None:
        try:
            return self._known[function]
        except (KeyError, TypeError):  # not seen, or not weakly referable
            pass
        import jax

        try:
            found: str | None = fingerprint(
                function, limit=1 << 62, flatten=jax.tree_util.tree_flatten, main=self.module
            )
        except Unreadable:
            found = None  # no variant is keyed by it: jit's path
        with contextlib.suppress(TypeError):
            self._known[function] = found
        return found
