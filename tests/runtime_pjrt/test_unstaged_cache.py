"""Eager ops and other unstaged computations are compiled once, then loaded.

Under ``ppy run`` a program's eager ops (``jnp.arange``, ``reshape``,
iterating over an array) come from ppy's per-user cache from the second run
on, without being lowered again, with the program's JAX config flags as
``python`` sees them and the same output. Where the program's environment
turns on jax's own persistent cache, or ``PPY_UNSTAGED_CACHE=0`` is set, ppy
steps aside.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

Run = Callable[..., subprocess.CompletedProcess[str]]

PROGRAM = """\
from typing import Annotated

import jax
import jax.numpy as jnp

import ppy

Rows = Annotated[jax.Array, ppy.Shape("B", 3), ppy.DType("float32")]


@jax.jit
def total(x: Rows) -> jax.Array:
    return jnp.sum(x, axis=-1)


if __name__ == "__main__":
    x = jnp.sin(jnp.arange(6, dtype=jnp.float32)).reshape(2, 3)
    print(jax.config.jax_compilation_cache_dir)
    print(jax.config.jax_persistent_cache_min_compile_time_secs)
    print([round(float(v), 6) for v in total(x)])
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The program, built once with the real ``ppy build``."""
    from tests.conftest import PERMISSIONS, run_ppy

    root = tmp_path_factory.mktemp("unstaged")
    (root / "pyproject.toml").write_text(PERMISSIONS)
    (root / "model.ppy").write_text(PROGRAM)
    built = run_ppy("build", str(root), env={"PPY_CACHE_DIR": str(root / "build-cache")})
    assert built.returncode == 0, built.stdout + built.stderr
    assert "exported" in built.stdout
    return root


@pytest.fixture(scope="module")
def printed(project: Path) -> str:
    """What ``python model.ppy`` prints for the module's project, run once."""
    return _plain(project)


def _plain(project: Path, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, "model.ppy"],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _run(ppy: Run, project: Path, **env: str) -> tuple[str, list[dict[str, Any]]]:
    done = ppy("-vv", "--log-format", "json", "run", "--no-build", "model.ppy", cwd=project, **env)
    assert done.returncode == 0, done.stderr
    events = [json.loads(ln) for ln in done.stderr.splitlines() if ln.startswith("{")]
    return done.stdout, events


def _unstaged(events: list[dict[str, Any]]) -> dict[str, str]:
    return {e["computation"]: e["source"] for e in events if e["event"] == "cache.unstaged"}


def _lowered(events: list[dict[str, Any]]) -> dict[str, bool]:
    return {e["computation"]: e["lowered"] for e in events if e["event"] == "cache.unstaged"}


def test_eager_ops_are_loaded_from_the_cache_on_the_second_run(
    project: Path, printed: str, ppy: Run, cache_dir: Path
) -> None:
    plain = printed

    first, first_events = _run(ppy, project)
    second, second_events = _run(ppy, project)

    assert first == second == plain  # flags as python sees them, and the same numbers
    assert any(e["event"] == "run.bind" for e in first_events)
    compiled = _unstaged(first_events)
    assert {"jit_iota", "jit_sin", "jit_reshape"} <= set(compiled)
    assert set(compiled.values()) == {"compiled"}
    assert _unstaged(second_events) == dict.fromkeys(compiled, "cache")
    # Each is one a key before lowering covers: loaded without being lowered.
    assert _lowered(first_events) == dict.fromkeys(compiled, True)
    assert _lowered(second_events) == dict.fromkeys(compiled, False)


def test_a_program_with_jax_s_own_cache_keeps_it(
    project: Path, ppy: Run, cache_dir: Path, tmp_path: Path
) -> None:
    jax_cache = tmp_path / "jax-cache"
    env = {
        "JAX_COMPILATION_CACHE_DIR": str(jax_cache),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    }

    out, events = _run(ppy, project, **env)

    assert out == _plain(project, **env)
    assert str(jax_cache) in out.splitlines()[0]
    assert _unstaged(events) == {}
    assert any(jax_cache.iterdir())  # jax wrote its own entries


def test_ppy_unstaged_cache_0_compiles_as_jax_would(
    project: Path, printed: str, ppy: Run, cache_dir: Path
) -> None:
    out, events = _run(ppy, project, PPY_UNSTAGED_CACHE="0")

    assert out == printed
    assert _unstaged(events) == {}
    assert any(e["event"] == "run.bind" for e in events)


FORKS = """\
import os, sys
import jax
import jax.numpy as jnp


@jax.jit
def double(x):
    return x * 2


print("before", jnp.sin(jnp.arange(4.0)).round(3).tolist())
sys.stdout.flush()
pid = os.fork()
if pid == 0:
    print("child")
    sys.stdout.flush()
    os._exit(3)
_, status = os.waitpid(pid, 0)
print("parent saw", os.waitstatus_to_exitcode(status), double(jnp.cos(jnp.arange(3.0))) > 0)
"""


def test_a_program_that_forks_keeps_every_compile(
    tmp_path: Path, ppy: Run, cache_dir: Path
) -> None:
    """Executables are written behind the program, and a fork waits for the
    writes queued before it: the child starts with none half done, and every
    compile of the parent, before the fork and after, is in the cache when
    the run ends."""
    from tests.conftest import PERMISSIONS

    (tmp_path / "pyproject.toml").write_text(PERMISSIONS)
    (tmp_path / "model.ppy").write_text(FORKS)
    plain = _plain(tmp_path)
    assert ppy("build", cwd=tmp_path).returncode == 0  # double stays: the jax runtime serves

    first, first_events = _run(ppy, tmp_path)
    second, second_events = _run(ppy, tmp_path)

    assert first == second == plain
    assert plain.splitlines()[1:] == ["child", "parent saw 3 [ True  True False]"]
    compiled = _unstaged(first_events)
    assert {"jit_sin", "jit_cos", "jit_double"} <= set(compiled)
    assert _unstaged(second_events) == dict.fromkeys(compiled, "cache")


#: A jitted step that stays unstaged (it differentiates a jitted loss), so
#: its jaxpr holds the loss as a nested jit: keyed before lowering all the
#: same. ``total`` is staged, so the runtime (and its cache) serves the run.
NESTED = """\
from typing import Annotated

import jax
import jax.numpy as jnp

import ppy

Rows = Annotated[jax.Array, ppy.Shape("B", 3), ppy.DType("float32")]


@jax.jit
def total(x: Rows) -> jax.Array:
    return jnp.sum(x, axis=-1)


@jax.jit
def loss(w, x):
    return jnp.sum((x @ w) ** 2)


@jax.jit
def step(w, x):
    return w - 0.1 * jax.grad(loss)(w, x)

if __name__ == "__main__":
    w = jnp.ones(3, dtype=jnp.float32)
    x = jnp.ones((2, 3), dtype=jnp.float32)
    print([round(float(v), 6) for v in step(step(w, x), x)])
"""


def test_a_jit_that_calls_a_jit_is_loaded_without_being_lowered(
    ppy: Run, cache_dir: Path, tmp_path: Path
) -> None:
    from tests.conftest import PERMISSIONS

    (tmp_path / "pyproject.toml").write_text(PERMISSIONS)
    (tmp_path / "model.ppy").write_text(NESTED)
    built = ppy("build", cwd=tmp_path)
    assert built.returncode == 0, built.stdout + built.stderr
    plain = _plain(tmp_path)
    first, first_events = _run(ppy, tmp_path)
    second, second_events = _run(ppy, tmp_path)
    assert first == second == plain
    assert _lowered(first_events)["jit_step"] is True
    assert _unstaged(second_events)["jit_step"] == "cache"
    assert _lowered(second_events)["jit_step"] is False
