"""jit's programs under ``jax.grad`` as the runtime reads them
(``ppy_runtime_pjrt.linearized``): programs that do not fit together, as a
damaged or edited artifact may hold, are named before a call is served."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from ppy.kinds.linearized import Linearized, Transposed
from ppy_runtime_pjrt.linearized import Programs, serving

X = jax.ShapeDtypeStruct((3,), jnp.float32)


def _exported(fn: Any, *avals: Any) -> bytes:
    return bytes(jax.export.export(jax.jit(fn))(*avals).serialize())


def _sine() -> Linearized:
    """``sin`` as jit would run it under ``jax.grad``: a primal program
    giving the output and its residual, a transposed one scaling the
    cotangent by it."""
    return Linearized(
        variant=0,
        inputs=(("float32", (3,), False),),
        perturbed=(True,),
        primal_inputs=(("input", 0),),
        outputs=(("primal", 0),),
        primal=_exported(lambda x: (jnp.sin(x), jnp.cos(x)), X),
        transposed=(
            Transposed((0,), (("primal", 1),), (0,), _exported(lambda r, c: (r * c,), X, X)),
        ),
    )


def test_programs_that_fit_serve_the_gradient() -> None:
    programs = Programs(_sine())
    assert programs.misfit() is None
    traced: list[str] = []
    served = serving(programs, lambda x: [jnp.sin(x)], traced.append)
    x = jnp.arange(3.0)
    gradient = jax.grad(lambda x: jnp.sum(served(x)[0]))(x)
    assert gradient.tolist() == jnp.cos(x).tolist() and traced == []


def _with_transposed(**changed: Any) -> Linearized:
    sine = _sine()
    return dataclasses.replace(
        sine, transposed=(dataclasses.replace(sine.transposed[0], **changed),)
    )


@pytest.mark.parametrize(
    ("linearized", "why"),
    [
        (
            dataclasses.replace(_sine(), outputs=(("primal", 5),)),
            "the outputs name primal value 5 of 2",
        ),
        (
            dataclasses.replace(_sine(), primal_inputs=(("constant", 0),)),
            "the primal program's inputs name constant value 0 of 0",
        ),
        (
            dataclasses.replace(_sine(), primal_inputs=(("primal", 0),)),
            "the primal program's inputs name its own outputs",
        ),
        (_with_transposed(residuals=(("input", 3),)), "name input value 3 of 1"),
        (_with_transposed(gradients=(4,)), "gives no output that a gradient names"),
        (_with_transposed(gradients=()), "gives 0 gradients"),
        (_with_transposed(residuals=()), "takes 2 inputs"),
        (dataclasses.replace(_sine(), primal=b"not an export"), "a program cannot be read"),
    ],
)
def test_programs_that_do_not_fit_are_named_before_a_call(linearized: Linearized, why: str) -> None:
    assert why in (Programs(linearized).misfit() or "")
