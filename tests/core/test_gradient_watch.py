"""The recording's watch of calls under ``jax.grad`` (``ppy.record.gradients``),
run on real jax in this process."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from ppy.record.format import FunctionCalls
from ppy.record.gradients import QUIET, Watch


def test_a_signature_is_no_longer_watched_once_its_calls_bring_no_new_pattern() -> None:
    """A training loop makes one call under ``jax.grad`` hundreds of times:
    after ``QUIET`` watched calls in a row that brought no new cotangent
    pattern, its calls run without the identities, and a pattern that
    shows only later is left out of the file (a run traces it)."""
    parts = jax.jit(lambda x: (x * 2.0, x * 3.0))
    calls = FunctionCalls()
    watch = Watch(calls)
    watched = 0

    def loss(x: Any, which: int) -> Any:
        nonlocal watched
        made = watch(("x",), frozenset(), (x,), {})
        watched += made is not None
        outputs = made(parts) if made is not None else parts(x)
        return jnp.sum(outputs[which])

    x = jnp.arange(3.0)
    for _ in range(10):
        assert jax.grad(loss)(x, 0).tolist() == [2.0, 2.0, 2.0]
    assert watched == QUIET + 1
    assert jax.grad(loss)(x, 1).tolist() == [3.0, 3.0, 3.0]
    assert [call["cotangents"] for call in calls.gradient_calls()] == [[[0]]]


def test_a_new_pattern_keeps_a_signature_watched() -> None:
    """Calls whose backward passes keep bringing patterns stay watched, and
    every pattern is noted."""
    parts = jax.jit(lambda x: (x * 2.0, x * 3.0, x * 4.0))
    calls = FunctionCalls()
    watch = Watch(calls)

    def loss(x: Any, which: int) -> Any:
        made = watch(("x",), frozenset(), (x,), {})
        assert made is not None
        return jnp.sum(made(parts)[which])

    x = jnp.arange(3.0)
    for which in (0, 0, 0, 1, 1, 1, 2):
        jax.grad(loss)(x, which)
    assert [call["cotangents"] for call in calls.gradient_calls()] == [[[0], [1], [2]]]
