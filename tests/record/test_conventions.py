"""Each of jit's calling conventions under ``ppy record``: the recording prints
what python prints, and ``ppy run`` (cold and warm) prints it too, serving
each convention the export can take.

One program holds one jitted function per convention, recorded once and
built once: a recording that crashed on one of them would lose the
program's output for all of them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import PERMISSIONS, run_ppy
from tests.support.differential import differential
from tests.support.events import json_events

#: One jitted function per way jit lets a program call one.
CONVENTIONS = """
import sys
from functools import partial

import jax
import jax.numpy as jnp


@jax.jit
def positional(x, y):
    return x * y + 1


@jax.jit
def keyword(x, y):
    return x - y


@jax.jit
def positional_only(x, /, y):
    return x / (y + 1)


@partial(jax.jit, static_argnums=(1,))
def static_by_position(x, n):
    return x**n


@partial(jax.jit, static_argnames=("n",))
def static_by_name(x, n):
    return x * n


@partial(jax.jit, static_argnames=("n",))
def static_default(x, n=2):
    return x * n


@partial(jax.jit, static_argnames=("act",))
def static_function_default(x, act=jnp.tanh):
    return jnp.sum(act(x))


@jax.jit
def traced_default(x, y=1.5):
    return x + y


@jax.jit
def star_args(*xs):
    return sum(xs)


@jax.jit
def star_kwargs(x, **named):
    return x + sum(named.values())


def _power(x, n):
    return jnp.sum(x**n)


power = jax.jit(_power, static_argnums=1)


@partial(jax.jit, donate_argnums=0)
def donated(state, x):
    return state + x


class Net:
    @staticmethod
    @jax.jit
    def forward(w, x):
        return jnp.tanh(x * w)


@partial(jax.jit, static_argnames=("mode",))
def keyword_only(x, *, scale, mode="sum"):
    return jnp.sum(x * scale) if mode == "sum" else jnp.max(x * scale)


class Shapeless:
    # An input whose shape raises: jit refuses it with a TypeError.

    @property
    def shape(self):
        raise RuntimeError("no shape")


def main(factor):
    offset = jnp.full(4, factor)

    @partial(jax.jit, static_argnames=("n",))
    def live_default(x, n=3):
        return x * n + offset

    x = jnp.arange(4.0)
    y = jnp.ones(4)
    for _ in range(2):
        print(positional(x, y))
        print(keyword(x=x, y=y), keyword(x, y=y))
        print(positional_only(x, y), positional_only(x, y=y))
        print(static_by_position(x, 2), static_by_position(x, 3))
        print(static_by_name(x, n=2), static_by_name(x, 3))
        print(static_default(x), static_default(x, n=4))
        print(static_function_default(x), static_function_default(x, act=jnp.sin))
        print(traced_default(x), traced_default(x, y))
        print(star_args(x, y), star_args(x, y, x))
        print(star_kwargs(x, a=y, b=x))
        print(power(x, 2), power(x, n=3))
        state = donated(jnp.zeros(4), x)
        print(state)
        print(Net.forward(x, y), Net().forward(x, y))
        print(keyword_only(x, scale=2.0), keyword_only(x, scale=2.0, mode="max"))
        print(live_default(x), live_default(x, n=2))
    try:
        positional(x, Shapeless())
    except TypeError as error:
        print("TypeError:", "abstract array" in str(error))


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 1.0)
"""

#: Each staged function, and its calls in one run: every call of the program
#: but ``traced_default(x)``'s (below).
STAGED = {
    "positional": 2,
    "keyword": 4,
    "positional_only": 4,
    "static_by_position": 4,
    "static_by_name": 4,
    "static_default": 4,
    "static_function_default": 4,
    "traced_default": 2,
    "power": 4,
    "donated": 2,
    "Net.forward": 4,
    "keyword_only": 4,
    "main.<locals>.live_default": 4,
}


def test_every_calling_convention_is_recorded_and_run_as_python_runs_it(tmp_path: Path) -> None:
    """``ppy record`` prints python's output, exit status and stderr (less
    its own JSON events); each
    function is staged for every call its export can take, under ``ppy run``
    cold and warm. A static parameter left to its default is a variant keyed
    by that default (it crashed the recording); a traced one left to its
    default, in a call the export was not made for, takes jit's path and
    says so; ``*args`` and ``**kwargs`` stay jit's with the reason. An input
    that raises where the recording looks at it (it crashed the recording)
    is left out of the file with ``record.skipped``, and jit raises what it
    raises under python."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "model.ppy").write_text(textwrap.dedent(CONVENTIONS).lstrip())
    (root / "pyproject.toml").write_text(PERMISSIONS)
    env = {"PPY_CACHE_DIR": str(tmp_path / "cache")}
    plain = subprocess.run(
        [sys.executable, "model.ppy"],
        cwd=root,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    recorded = run_ppy("--log-format", "json", "record", "model.ppy", cwd=root, env=env)
    assert (recorded.stdout, recorded.returncode) == (plain.stdout, plain.returncode)
    assert "".join(_program_lines(recorded.stderr)) == plain.stderr
    (skipped,) = json_events(recorded.stderr, "record.skipped")
    assert skipped["function"] == "positional", skipped
    assert "an input ppy could not read (RuntimeError: no shape)" in str(skipped["reason"])
    built = run_ppy("build", cwd=root, env=env)
    assert built.returncode == 0, built.stdout + built.stderr
    assert "staged 13 of 15" in built.stdout, built.stdout
    for name, parameter in (("star_args", "xs (*args)"), ("star_kwargs", "named (**kwargs)")):
        (line,) = [line for line in built.stdout.splitlines() if f"  {name}  " in line]
        assert (
            " stays " in line
            and f"only named parameters can be described for export: {parameter}" in line
        )
    compared = differential(root, cache=tmp_path / "cache", build=False)
    assert {name: compared.staged_calls(name) for name in STAGED} == STAGED
    fallbacks = {(str(e["function"]), str(e["reason"])) for e in compared.fallbacks()}
    assert ("traced_default", "y left to its default, which the export does not take") in fallbacks
    assert {name for name, _ in fallbacks} == {"traced_default", "positional"}, fallbacks


def _program_lines(stderr: str) -> list[str]:
    """``stderr`` without ppy's JSON events: what the program wrote."""
    return [line for line in stderr.splitlines(keepends=True) if not line.startswith("{")]
