"""Parameters in any order of their names: each input reaches the parameter python binds it to.

One project holds, for every form a function's inputs can be described in
(fixed and symbolic dims, a dim under a constraint, sharded and replicated
inputs, NamedTuples, ``ppy.Like`` pytrees with and without marked axes,
static, keyword-only and defaulted parameters, and all of them at once), one
function per order of three parameter names: every permutation of ``z``,
``m`` and ``a``, reverse alphabetical among them. Every input has the same
shape and dtype, so a swap of two parameters is caught by the values alone:
the body weighs each parameter by its name. The same property holds for a
program described by a recording instead of annotations.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import PERMISSIONS, cpu_backend, run_ppy
from tests.support.differential import differential, project

#: Its programs shard over a mesh of four of the CPU's forced host devices.
pytestmark = cpu_backend

FOUR = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
NAMES = ("z", "m", "a")
ORDERS = ["".join(order) for order in itertools.permutations(NAMES)]
#: The weight of each parameter in a body: a swap of any two changes the sum.
WEIGHTS = {"z": "1.0", "m": "-2.0", "a": "5.0"}

HEAD = """\
import functools
from typing import Annotated, Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

import ppy

F32 = ppy.DType("float32")
Fixed = Annotated[jax.Array, ppy.Shape(8, 4), F32]
Rows = Annotated[jax.Array, ppy.Shape("B", 4), F32]
Bounded = Annotated[jax.Array, ppy.Shape("N", 4), F32]
Split = Annotated[jax.Array, ppy.Shape("B", 4), F32, ppy.Sharding("data", None)]
Split4 = Annotated[jax.Array, ppy.Shape("4*B", 4), F32, ppy.Sharding("data", None)]
Whole = Annotated[jax.Array, ppy.Shape("B", 4), F32, ppy.Sharding()]


class Duo(NamedTuple):
    y: Fixed
    b: Fixed


def duo():
    return {"y": jnp.zeros((8, 4), jnp.float32), "b": jnp.zeros((8, 4), jnp.float32)}


Liked = Annotated[Any, ppy.Like(duo)]
LikedRows = Annotated[Any, ppy.Like(duo, axes={0: "B"})]

mesh = jax.make_mesh((4,), ("data",))
rng = np.random.default_rng(0)


def array():
    return rng.normal(size=(8, 4)).astype(np.float32)


def split():
    return jax.device_put(array(), NamedSharding(mesh, P("data", None)))


def whole():
    return jax.device_put(array(), NamedSharding(mesh, P()))


def show(label, y):
    print(label, np.round(np.asarray(y), 4).tolist())

"""


@dataclass(frozen=True)
class Form:
    """One way of describing three traced parameters."""

    #: Each parameter's annotation, by its position in the signature.
    annotations: tuple[str, str, str]
    #: The value passed to each parameter, by position (an expression of the program).
    values: tuple[str, str, str]
    #: One traced parameter's part of the body, given its name.
    leaf: Callable[[str], str] = lambda name: name
    #: Where the signature turns keyword-only (before which position), if it does.
    keyword_from: int | None = None
    #: A static parameter, written before the traced one at ``static_at``.
    static: str | None = None
    static_at: int = 1
    #: Written after the traced parameters (a static one with a default).
    tail: str | None = None
    #: What the static parameters multiply the body by, and pass in the call.
    factor: str = ""
    static_call: str = ""
    #: The traced parameter at this position has a default (and is passed anyway).
    default_at: int | None = None


def _pair(name: str) -> str:
    return f"({name}.y - 3.0 * {name}.b)"


def _keyed(name: str) -> str:
    return f"({name}['y'] - 3.0 * {name}['b'])"


FORMS: dict[str, Form] = {
    "fixed": Form(("Fixed",) * 3, ("array()",) * 3),
    "symbolic": Form(("Rows",) * 3, ("array()",) * 3),
    "constrained": Form(("Bounded",) * 3, ("array()",) * 3),
    "sharded": Form(("Split",) * 3, ("split()",) * 3),
    "sharded4": Form(("Split4",) * 3, ("split()",) * 3),
    "replicated": Form(("Split", "Whole", "Split"), ("split()", "whole()", "split()")),
    "namedtuple": Form(("Duo",) * 3, ("Duo(array(), array())",) * 3, leaf=_pair),
    "like": Form(("Liked",) * 3, ("dict(y=array(), b=array())",) * 3, leaf=_keyed),
    "like_axes": Form(("LikedRows",) * 3, ("dict(y=array(), b=array())",) * 3, leaf=_keyed),
    "static": Form(
        ("Rows",) * 3, ("array()",) * 3, static="k: Literal[1, 2]", factor=" * k", static_call="2"
    ),
    "keyword": Form(("Fixed",) * 3, ("array()",) * 3, keyword_from=1),
    "defaults": Form(
        ("Fixed",) * 3,
        ("array()",) * 3,
        tail="scale: Literal[1, 3] = 3",
        factor=" * scale",
        default_at=2,
    ),
    "everything": Form(
        ("Split",) * 3,
        ("split()",) * 3,
        keyword_from=1,
        static="k: Literal[1, 2]",
        tail="scale: Literal[1, 3] = 3",
        factor=" * k * scale",
        static_call="2",
    ),
}


def _function(form_name: str, form: Form, order: str) -> tuple[str, str]:
    """The definition of one function, and the lines that call it and print the result."""
    name = f"{form_name}_{order}"
    parameters = []
    for position, (parameter, annotation) in enumerate(zip(order, form.annotations, strict=True)):
        if form.static is not None and position == form.static_at:
            parameters.append(form.static)
        if form.keyword_from == position:
            parameters.append("*")
        default = " = None" if form.default_at == position else ""
        parameters.append(f"{parameter}: {annotation}{default}")
    if form.tail is not None:
        parameters.append(form.tail)
    statics = [p.split(":")[0] for p in (form.static, form.tail) if p is not None]
    body = " + ".join(f"{WEIGHTS[p]} * {form.leaf(p)}" for p in NAMES)
    decorator = (
        f"@functools.partial(jax.jit, static_argnames={tuple(statics)!r})"
        if statics
        else "@jax.jit"
    )
    definition = (
        f"{decorator}\ndef {name}({', '.join(parameters)}):\n"
        f"    return (({body}){form.factor}).sum(axis=-1)\n"
    )
    values = [f"{name}_{p} = {v}" for p, v in zip(order, form.values, strict=True)]
    positional = [f"{name}_{p}" for p in order[: form.keyword_from]]
    if form.static is not None:
        positional.insert(form.static_at, form.static_call)
    # Keyword arguments in another order than the signature's.
    keywords = [f"{p}={name}_{p}" for p in reversed(order[form.keyword_from or 3 :])]
    call = f"show({name!r}, {name}({', '.join(positional + keywords)}))"
    return definition, "\n".join([*values, call]) + "\n"


#: A data-parallel layer whose weight's name sorts before the batch's: taken
#: in alphabetical order, the export contracts the batch with the weight's rows.
FORWARD = """\
@jax.jit
def forward(x: Split, w: Annotated[jax.Array, ppy.Shape(4, 3), F32, ppy.Sharding()]):
    return jnp.tanh(x @ w)
"""
FORWARD_CALL = "show('forward', forward(split(), whole()[:4, :3]))\n"


def program(forms: dict[str, Form], orders: Sequence[str]) -> tuple[str, list[str]]:
    """The program of every form in every order, and its functions' names."""
    definitions, calls, names = [FORWARD], [FORWARD_CALL], ["forward"]
    for form_name, form in forms.items():
        for order in orders:
            definition, call = _function(form_name, form, order)
            definitions.append(definition)
            calls.append(call)
            names.append(f"{form_name}_{order}")
    return HEAD + "\n\n".join(definitions) + "\n\n" + "".join(calls), names


@dataclass(frozen=True)
class Built:
    """The project of every form in every order, built once."""

    root: Path
    cache: Path
    names: list[str]
    #: What ``ppy build`` printed.
    lines: str


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    tmp_path = tmp_path_factory.mktemp("order")
    source, names = program(FORMS, ORDERS)
    pyproject = PERMISSIONS + 'mesh = { data = 4 }\nconstraints = ["N >= 2"]\n'
    root = project(tmp_path / "p", {"model.ppy": source}, pyproject)
    cache = tmp_path / "c"
    done = run_ppy("build", cwd=root, env={"PPY_CACHE_DIR": str(cache), **FOUR})
    return Built(root, cache, names, done.stdout)


def test_every_form_in_every_order_prints_what_python_prints(built: Built) -> None:
    compared = differential(built.root, cache=built.cache, env=FOUR, build=False)
    # Each function took the staged path, so what differential compared is
    # the export's answer, not jit's.
    assert compared.bound() == set(built.names), built.lines
    assert not compared.fallbacks(), compared.fallbacks()
    unstaged = [name for name in built.names if compared.staged_calls(name) != 1]
    assert not unstaged, (unstaged, built.lines)


@pytest.mark.parametrize("form", list(FORMS))
def test_the_build_lists_the_parameters_in_the_signatures_order(built: Built, form: str) -> None:
    for order in ORDERS:
        (line,) = [line for line in built.lines.splitlines() if f" {form}_{order}(" in line]
        listed = line.split(f"{form}_{order}(", 1)[1]
        # Each input as ``z: ...``, or a pytree's leaves as ``z.y: ...``, ``z['y']: ...``.
        named = [re.match(r"\w+", part) for part in listed.split(", ")]
        shown = list(dict.fromkeys(m.group(0) for m in named if m and m.group(0) in NAMES))
        # A long line is cut short: what it shows comes in the signature's order.
        assert shown and shown == list(order[: len(shown)]), line


RECORDED = """\
import sys

import jax
import jax.numpy as jnp
import numpy as np

rng = np.random.default_rng(0)


def array(rows):
    return jnp.asarray(rng.normal(size=(rows, 4)).astype(np.float32))


def show(label, y):
    print(label, np.round(np.asarray(y), 4).tolist())

"""


def _recorded_program() -> tuple[str, list[str]]:
    """Unannotated functions of arrays, pytrees, static and keyword-only
    parameters in every order, called at two sizes (so their first dim is
    recorded as a symbol)."""
    definitions, calls, names = [], [], []
    forms = {
        "plain": ("{p}", "array(rows)", "", ""),
        "tuple": ("({p}[0] - 3.0 * {p}[1])", "(array(rows), array(rows))", "", ""),
        "static": ("{p}", "array(rows)", ", k", "k"),
        "keyword": ("{p}", "array(rows)", "", ""),
    }
    for form, (leaf, value, extra, factor) in forms.items():
        for order in ORDERS:
            name = f"{form}_{order}"
            names.append(name)
            star = "*, " if form == "keyword" else ""
            first, *rest = order
            signature = f"{first}, {star}{', '.join(rest)}{extra}"
            body = " + ".join(f"{WEIGHTS[p]} * {leaf.format(p=p)}" for p in NAMES)
            scaled = f" * {factor}" if factor else ""
            decorator = (
                '@functools.partial(jax.jit, static_argnames=("k",))' if extra else "@jax.jit"
            )
            definitions.append(
                f"{decorator}\ndef {name}({signature}):\n"
                f"    return (({body}){scaled}).sum(axis=-1)\n"
            )
            args = [f"{name}_{p}" for p in order]
            if form == "keyword":
                call_args = [args[0], *(f"{p}={name}_{p}" for p in reversed(rest))]
            else:
                call_args = args + (["k=2"] if extra else [])
            calls.append(
                "\n".join(f"    {name}_{p} = {value}" for p in order)
                + f"\n    show(f'{name} {{rows}}', {name}({', '.join(call_args)}))\n"
            )
    main = "for rows in [int(r) for r in sys.argv[1:]] or [8]:\n" + "".join(calls)
    head = "import functools\n" + RECORDED
    return head + "\n\n".join(definitions) + "\n\n" + main, names


@pytest.mark.slow
def test_a_recorded_program_in_every_order_prints_what_python_prints(tmp_path: Path) -> None:
    source, names = _recorded_program()
    # The constraint names the recording's symbol: the export's scope is remade with it.
    pyproject = PERMISSIONS + 'constraints = ["B >= 2"]\n'
    root = project(tmp_path / "p", {"model.ppy": source}, pyproject)
    cache = tmp_path / "c"
    env = {**os.environ, "PPY_CACHE_DIR": str(cache)}
    recorded = subprocess.run(
        [sys.executable, "-m", "ppy", "record", "model.ppy", "8", "16"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert recorded.returncode == 0, recorded.stderr
    signatures = json.loads((root / ".ppy" / "signatures.json").read_text())
    assert signatures["functions"]["model.plain_zma"]["description"]["z"] == "float32[B,4]"
    built = run_ppy("build", cwd=root, env=env)
    compared = differential(root, "8", "24", cache=cache, build=False)
    assert compared.bound() == set(names), built.stdout
    unstaged = [name for name in names if compared.staged_calls(name) != 2]
    assert not unstaged, (unstaged, built.stdout)
