"""What a recording notes of a jitted call under ``jax.grad``.

jit serves such a call by programs of its own (``ppy.kinds.linearized``),
which depend on which inputs carry a tangent and on which outputs the
backward pass gives a cotangent. The first is known at the call; the
second only when the backward pass runs. So the recording passes each
traced leaf in and out of the call through an identity of its own (a
``jax.custom_vjp`` whose backward pass hands the cotangent on as it is, a
symbolic zero as a symbolic zero): the outputs' note which were given a
cotangent, and the inputs', whose backward passes run after the call's own
transpose, write the pattern down. One identity per leaf keeps what jax
prunes before it transposes the call what it would be without them: an
output nothing uses is pruned with its identity.

The values are python's: the identity computes nothing either way.

The identities cost the recording time (about 0.3 ms each, one per leaf of a
call, in eager mode), where a training loop makes the same call hundreds of
times. So a signature (leaves, perturbed set, static values) stops being
watched once ``QUIET`` of its watched calls in a row brought no pattern the
recording had not seen. A pattern that shows only later is then not in the
file, and a run serves it as it serves any unseen one: by tracing the
function once, as jit does (``ppy_runtime_pjrt.linearized``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ppy.kinds.linearized import leaf_aval
from ppy.kinds.tracers import perturbed
from ppy.record.format import FunctionCalls

__all__ = ["QUIET", "Watch"]

#: Static values the file holds: JSON literals.
_LITERALS = (bool, int, float, str, type(None))

#: Watched calls in a row of one signature, none bringing a new cotangent
#: pattern, after which its calls are no longer watched.
QUIET: Final = 3


@dataclass
class Watch:
    """Where one function's calls under ``jax.grad`` note their backward
    passes (``calls``), and, per signature, how many of its watched calls in
    a row brought no new pattern, with the count of patterns it had then."""

    calls: FunctionCalls
    quiet: dict[str, tuple[int, int]] = field(default_factory=dict)

    def __call__(
        self,
        positional: Sequence[str],
        static: frozenset[str],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
    ) -> Callable[[Callable[..., Any]], Any] | None:
        """What makes a call under reverse-mode differentiation at concrete
        points (``ppy.kinds.tracers.primals`` found them), given the jitted
        function, so that its backward passes are noted; None where a static
        value is not one the file holds, or where its signature is quiet."""
        call = _call(positional, static, args, kwargs)
        if call is None or self._settled(call):
            return None
        return lambda original: _watched(original, args, dict(kwargs), self.calls, call)

    def _settled(self, call: Mapping[str, Any]) -> bool:
        """Whether ``QUIET`` watched calls of this signature in a row brought
        no new pattern (each one's backward pass has run by the next call:
        a call whose pass has not is counted as quiet, and watched again
        while the count is short)."""
        patterns = self.calls.patterns(call)
        key = json.dumps(call, sort_keys=True)
        calm, seen = self.quiet.get(key, (-1, -1))
        calm = 0 if patterns > seen else calm + 1
        self.quiet[key] = (calm, patterns)
        return calm >= QUIET


def _call(
    positional: Sequence[str],
    static: frozenset[str],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> dict[str, Any] | None:
    """A call's leaves, which of them carry a tangent, and its static values;
    None where a static value is not a JSON literal."""
    import jax

    values = dict(zip(positional, args, strict=False)) | dict(kwargs)
    fixed = {name: v for name, v in values.items() if name in static}
    if not all(type(v) in _LITERALS for v in fixed.values()):
        return None
    inputs: dict[str, list[Any]] = {}
    flags: dict[str, list[bool]] = {}
    for name, value in values.items():
        if name not in static:
            leaves = jax.tree_util.tree_leaves(value)
            inputs[name] = [_aval(getattr(leaf, "primal", leaf)) for leaf in leaves]
            flags[name] = [perturbed(leaf) for leaf in leaves]
    return {"inputs": inputs, "perturbed": flags, "static": fixed}


def _watched(
    original: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    calls: FunctionCalls,
    call: dict[str, Any],
) -> Any:
    """``original`` called with its traced inputs and outputs passed through
    identities (``_identity``). Each output's backward pass notes its
    position; each input's, which runs after the call's own transpose and so
    after every output's, notes the pattern in ``calls``."""
    import jax

    given: set[int] = set()

    def noted() -> None:
        if given:
            calls.differentiated(call, tuple(sorted(given)))

    leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
    leaves = [_identity(leaf, noted, zero_too=True) if perturbed(leaf) else leaf for leaf in leaves]
    args, kwargs = jax.tree_util.tree_unflatten(tree, leaves)
    outputs, tree = jax.tree_util.tree_flatten(original(*args, **kwargs))
    outputs = [
        _identity(leaf, functools.partial(given.add, i))
        if isinstance(leaf, jax.core.Tracer)
        else leaf
        for i, leaf in enumerate(outputs)
    ]
    return jax.tree_util.tree_unflatten(tree, outputs)


def _aval(value: Any) -> list[Any]:
    dtype, shape, weak = leaf_aval(value)
    return [dtype, list(shape), weak]


def _identity(leaf: Any, given: Callable[[], Any], *, zero_too: bool = False) -> Any:
    """``leaf`` through a ``jax.custom_vjp`` identity whose backward pass
    calls ``given`` where its cotangent is not a symbolic zero (or always,
    ``zero_too``), and hands the cotangent on as it is."""
    import jax
    from jax.custom_derivatives import SymbolicZero

    @jax.custom_vjp
    def same(x: Any) -> Any:
        return x

    def forward(x: Any) -> tuple[Any, None]:
        return x.value, None

    def backward(_: None, cotangent: Any) -> tuple[Any]:
        if zero_too or not isinstance(cotangent, SymbolicZero):
            given()
        return (cotangent,)

    same.defvjp(forward, backward, symbolic_zeros=True)
    return same(leaf)
