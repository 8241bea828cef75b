"""The watch on a trace's questions to symbolic dims (``ppy_plugin_jax.dependence``).

Each function lives in a module of a project folder, as a program's does, and
is exported with real jax under the watch: a question whose answer depends on
the size is noted with its line; what jax asks of its own dims, and what the
program asks that holds at every size, is not.
"""

from __future__ import annotations

import importlib.util
import textwrap
from types import ModuleType

import jax
import jax.numpy as jnp
import pytest
from jax import export
from jax._src.export import shape_poly
from ppy_plugin_jax.dependence import watched

PROGRAM = """\
from collections import Counter
from functools import partial

import jax
import jax.numpy as jnp

SCALES = {16: 10.0}


def keyed(x):
    return jnp.sum(x) * SCALES.get(x.shape[0], 1.0)


def member(x):
    return jnp.sum(x) * (2.0 if x.shape[0] in {16, 32} else 1.0)


def truth(x):
    return jnp.sum(x) * (2.0 if x.shape[0] - 8 else 1.0)


def caught(x):
    try:
        big = x.shape[0] >= 9
    except Exception:
        big = False
    return jnp.sum(x) * (2.0 if big else 1.0)


def unequal(x):
    return jnp.sum(x) * (2.0 if 16 != x.shape[0] else 1.0)


def number(x):
    try:
        return jnp.sum(x) + int(x.shape[0])
    except Exception:
        return jnp.sum(x)


def text(x):
    return jnp.sum(x) * {"16": 2.0}.get(f"{x.shape[0]}", 1.0)


def counted(x):
    return jnp.sum(x) * len(Counter(x.shape))


@partial(jax.jit, static_argnums=1)
def padded(x, n):
    return jnp.zeros((n,)) + x.sum()


def honest(x):
    # jax's own questions: caches keyed by shapes, vmap's axis sizes in a
    # dataclass, grad, slicing, a nested jit given a dim as a static argument,
    # and what holds at every size.
    assert x.shape[0] >= 1 and bool(x.shape[0]) and x.shape == (x.shape[0], 4)
    rows = jax.vmap(lambda row: jnp.tanh(row).sum())(x)
    slope = jax.grad(lambda w: jnp.sum((x * w) ** 2))(1.0)
    padding = padded(x, x.shape[0]).sum() + jnp.arange(x.shape[0]).sum()
    return rows.sum() + slope + x[:2].sum() + padding
"""

#: What each function asks, on which line of PROGRAM.
ASKED = {
    "keyed": [(11, "looks B up by its hash (a dict key or a set member)")],
    "member": [(15, "looks B up by its hash (a dict key or a set member)")],
    "truth": [(19, "asks bool(B - 8)")],
    "caught": [(24, "asks whether B >= 9")],
    "unequal": [(31, "compares B with 16")],
    "number": [(36, "asks int(B)")],
    "text": [(42, "writes B as text")],
    "counted": [(46, "looks B up by its hash (a dict key or a set member)")],
    "honest": [],
}


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    path = tmp_path_factory.mktemp("project") / "model.py"
    path.write_text(textwrap.dedent(PROGRAM))
    spec = importlib.util.spec_from_file_location("dependence_program", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", sorted(ASKED))
def test_each_question_whose_answer_depends_on_the_size_is_noted(
    program: ModuleType, name: str
) -> None:
    (batch,) = export.symbolic_shape("B")
    x = jax.ShapeDtypeStruct((batch, 4), jnp.float32)
    with watched() as uses:
        export.export(jax.jit(getattr(program, name)))(x)
    assert [(use.line, use.asked) for use in uses] == ASKED[name]
    assert all(use.filename == program.__file__ for use in uses)
    assert all(use.why.startswith("which ") for use in uses)


def test_an_uncaught_question_is_noted_before_jax_raises(program: ModuleType) -> None:
    (batch,) = export.symbolic_shape("B")

    def ordered(x: jax.Array) -> jax.Array:
        return program.caught(x) * (2.0 if x.shape[0] > 12 else 1.0)

    with watched() as uses, pytest.raises(Exception, match="inconclusive"):
        export.export(jax.jit(ordered))(jax.ShapeDtypeStruct((batch, 4), jnp.float32))
    assert [use.asked for use in uses] == ["asks whether B >= 9", "asks whether B > 12"]


def test_jax_s_dim_class_is_as_it_was_after_the_watch(program: ModuleType) -> None:
    expression = shape_poly._DimExpr
    before = {name: expression.__dict__.get(name) for name in dir(expression)}
    (batch,) = export.symbolic_shape("B")
    with pytest.raises(ValueError), watched() as uses:
        assert expression.__dict__.get("__bool__") is not None
        raise ValueError("the trace failed")
    assert uses == []
    assert {name: expression.__dict__.get(name) for name in dir(expression)} == before
    assert "__bool__" not in expression.__dict__
    assert hash(batch) == hash(batch) and batch != 16 and bool(batch - 8)
