"""A function the program differentiates, staged with its VJP: jax.grad,
jax.value_and_grad and jax.vjp of it print python's bits, served by the
export; jax.jacrev's batched pullback and every other transform take the
original path."""

from __future__ import annotations

from pathlib import Path

from ppy.artifact.read import read_artifact

from tests.conftest import PERMISSIONS
from tests.support.differential import differential, project

#: The project asks for the export's VJP (by default gradients are jit's).
STAGED_VJP = PERMISSIONS + "staged-vjp = true\n"

PROGRAM = """\
from typing import Annotated

import jax
import jax.numpy as jnp
import numpy as np

import ppy
from derivs import directional, jacobian

Batch = Annotated[jax.Array, ppy.Shape("N", 3), ppy.DType("float32")]
Targets = Annotated[jax.Array, ppy.Shape("N"), ppy.DType("float32")]
Weights = Annotated[jax.Array, ppy.Shape(3), ppy.DType("float32")]


@jax.jit
def loss(w: Weights, x: Batch, y: Targets) -> jax.Array:
    return jnp.mean((jnp.tanh(x @ w) - y) ** 2)


def bits(a: jax.Array) -> list[str]:
    return [format(b, "08x") for b in np.asarray(a).reshape(-1).view(np.uint32).tolist()]


x = jnp.stack([jnp.linspace(-1.0, 1.0, 16), jnp.cos(jnp.arange(16.0)), jnp.ones(16)], axis=1)
y = jnp.sin(jnp.arange(16.0))
w = jnp.zeros(3, dtype=jnp.float32)
for step in range(3):
    g = jax.grad(loss)(w, x, y)
    value, g2 = jax.value_and_grad(loss)(w, x, y)
    print(step, bits(g), bits(value), bits(g2))
    w = w - 0.5 * g
tangents = (jnp.ones(3), jnp.zeros_like(x), jnp.zeros_like(y))
print("jvp", bits(directional(loss, (w, x, y), tangents)))
print("jit of grad", bits(jax.jit(jax.grad(loss))(w, x, y)))
batched = jax.vmap(jax.grad(loss), in_axes=(0, None, None))
print("vmap of grad", bits(batched(jnp.stack([w, w]), x, y)))
print("loss", bits(loss(w, x, y)))
print("jacrev", bits(jacobian(loss, w, x, y)))
out, pullback = jax.vjp(loss, w, x, y)
print("vjp", bits(out), bits(pullback(jnp.float32(1.0))[0]))
print("jacrev here", bits(jax.jacrev(loss)(w, x, y)))
"""

#: A helper module the build does not read: its jax.jvp and jax.jacrev reach
#: loss at run time. jacrev batches the pullback of a call the export served.
DERIVS = """\
import jax


def directional(f, primals, tangents):
    return jax.jvp(f, primals, tangents)[1]


def jacobian(f, *args):
    return jax.jacrev(f)(*args)
"""


def test_grad_of_a_staged_function_is_served_by_its_vjp(tmp_path: Path) -> None:
    files = {"model.ppy": PROGRAM, "derivs.py": DERIVS}
    root = project(tmp_path / "p", files, STAGED_VJP)
    compared = differential(root, cache=tmp_path / "c")
    assert compared.bound() == {"loss"}
    # 3 jax.grad, 3 jax.value_and_grad, 1 plain call, jax.vjp's forward call
    # and its pullback on a concrete cotangent: no trace of loss's body; and
    # the two jax.jacrev forward calls, whose batched pullback is the original's.
    assert compared.staged_calls("loss") == 10
    originals = [e for e in compared.named("run.call") if e.get("path") == "original"]
    assert len(originals) == 3  # jax.jvp, grad under jax.jit, grad under jax.vmap
    reasons = {e["reason"] for e in compared.fallbacks()}
    assert reasons == {"w is a tracer (called inside jit, grad or vmap)"}


def test_by_default_a_gradient_is_jits_and_the_plain_call_is_staged(tmp_path: Path) -> None:
    """Without ``staged-vjp`` the export carries no VJP: every gradient takes
    jit's path, which is python's to the bit, saying so."""
    root = project(tmp_path / "p", {"model.ppy": PROGRAM, "derivs.py": DERIVS})
    compared = differential(root, cache=tmp_path / "c")
    assert compared.bound() == {"loss"}
    assert compared.staged_calls("loss") == 1  # print("loss", ...)
    reasons = {str(e["reason"]) for e in compared.fallbacks()}
    assert any(r.startswith("differentiated, and its export carries no VJP") for r in reasons)


NORMALIZED = """\
from typing import Annotated

import jax
import jax.numpy as jnp
import numpy as np

import ppy

Batch = Annotated[jax.Array, ppy.Shape("B", 64), ppy.DType("float32")]


@jax.jit
def normalized(x: Batch) -> jax.Array:
    z = (x - x.mean(-1, keepdims=True)) / (x.std(-1, keepdims=True) + 1e-6)
    return jnp.sum(z**3)


def bits(y: jax.Array) -> int:
    return int(np.asarray(y).view(np.uint32).sum(dtype=np.uint64))


rng = np.random.default_rng(0)
for rows in (8, 3):
    x = jnp.asarray(rng.normal(size=(rows, 64)).astype(np.float32))
    print(rows, bits(jax.grad(normalized)(x)), bits(normalized(x)))
"""


def test_a_function_whose_vjp_is_not_jits_bit_for_bit_stays_or_matches(tmp_path: Path) -> None:
    """On jax 0.10.2 the symbolic export's VJP of ``normalized`` gives other
    bits than jit's gradient at B=8 (149 of 512 elements): it stays, with the
    reason. Where a jax compiles the two alike it is staged, and the run's
    gradients are python's."""
    root = project(tmp_path / "p", {"model.ppy": NORMALIZED}, STAGED_VJP)
    # Where it stays, a quiet run says that nothing was staged, and why.
    compared = differential(root, cache=tmp_path / "c", quiet_stderr=None)
    decisions = {d.qualname: d for d in read_artifact(root / ".ppy" / "artifact.ppyz").decisions}
    decision = decisions["normalized"]
    if compared.bound() == {"normalized"}:
        assert compared.staged_calls("normalized") == 4
    else:
        assert decision.rule == "vjp-bits", decision.reason
        assert decision.reason.startswith("the gradient of x through its VJP differs at B=8")
        assert "jax.grad of the staged function would compute other bits" in decision.reason
