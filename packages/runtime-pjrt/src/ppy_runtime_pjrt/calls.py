"""A call, bound to the staged function's signature the way jax binds it.

``score(x)``, ``score(x=x)`` and ``step(params, batch, training=True)`` all
reach the same export: the call is bound to the Python function's signature
(defaults applied to static parameters), its static values pick the
export's variant, and its traced parameters, in signature order, are the
pytree whose leaves the export takes. An entry that lists them in another
order is not bound. The arguments jax's dispatcher keys
its cache by are the call's own, less the static ones, as jit removes them:
by position (``static_argnums``) and by name (``static_argnames``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ppy_runtime_pjrt.guard import Fallback

__all__ = ["Bound", "Calls"]

#: A static value as the variants are keyed: its exact type, then itself
#: (so that ``1`` is not taken for ``True``).
StaticKey = tuple[tuple[type, Any], ...]


@dataclass(frozen=True)
class Bound:
    """One call, bound."""

    #: The static parameters' values, keyed as ``Calls.key`` keys a variant.
    static: StaticKey
    #: The traced parameters' values, in signature order.
    traced: tuple[Any, ...]
    #: The call's arguments without the static ones: what the executable takes.
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


class Calls:
    """Binds calls of one function; ``traced`` and ``static`` are the entry's names."""

    def __init__(
        self, function: Callable[..., Any], traced: Sequence[str], static: Sequence[str]
    ) -> None:
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

    @staticmethod
    def key(values: Sequence[Any]) -> StaticKey:
        return tuple((type(v), v) for v in values)

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
        static = self.key([arguments[name] for name in self.static])
        numbers = self.static_argnums
        names = self.static_argnames
        return Bound(
            static=static,
            traced=tuple(arguments[name] for name in self.traced),
            args=tuple(a for i, a in enumerate(args) if i not in numbers),
            kwargs={k: v for k, v in kwargs.items() if k not in names},
        )
