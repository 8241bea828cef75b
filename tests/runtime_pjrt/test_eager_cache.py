"""Eager ops are served from the cache before lowering, and only when the key
covers everything their executable depends on.

These run in this process with the real jax: ``_fresh_start()`` between
calls plays the part of a fresh start (jax's in-process caches are empty, the
per-user cache is written), and a count of jax's lowerings shows what was lowered.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.interpreters import mlir
from ppy.cache import ExecutableCache
from ppy_runtime_pjrt import behind, eager, unstaged


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[ExecutableCache]:
    """Both unstaged layers installed over a fresh cache; removed afterwards."""
    store = ExecutableCache(tmp_path / "unstaged")
    assert unstaged.install(store)
    jax.clear_caches()
    yield store
    unstaged.uninstall()
    jax.clear_caches()


@pytest.fixture
def lowerings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the modules jax lowers from now on."""
    seen: list[str] = []
    original = mlir.lower_jaxpr_to_module

    def counted(module_name: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(module_name)
        return original(module_name, *args, **kwargs)

    monkeypatch.setattr(mlir, "lower_jaxpr_to_module", counted)
    return seen


def _fresh_start() -> None:
    """What a new process would find: the cache written, jax's own caches empty."""
    behind.drain()
    jax.clear_caches()


def _program() -> list[float]:
    """Eager ops of the kinds a program makes outside any jit."""
    values = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    scaled = jnp.sin(values) * 2 + 1
    return [round(float(v), 6) for v in scaled.sum(axis=0)]


def test_a_second_start_runs_eager_ops_without_lowering_them(
    cache: ExecutableCache, lowerings: list[str]
) -> None:
    first = _program()
    assert lowerings  # the first start lowers and compiles each op
    _fresh_start()
    lowerings.clear()

    second = _program()

    assert second == first
    assert lowerings == []


def test_an_op_the_eager_layer_keys_is_kept_once(
    cache: ExecutableCache, lowerings: list[str]
) -> None:
    expected = _program()
    _fresh_start()

    # One file per computation: the compile-step layer keeps out of the way
    # of a miss the eager layer compiles, rather than writing it again under
    # jax's key.
    assert len(list(cache.directory.glob("*.exe"))) == len(lowerings)
    lowerings.clear()
    assert _program() == expected
    assert lowerings == []


def _key(fun: Any, *args: Any) -> str | None:
    """The eager key of the jaxpr jax calls for ``fun(*args)``, or None."""
    keys: list[str | None] = []
    from jax._src import pjit

    original = pjit._pjit_call_impl_python

    def spy(*call_args: Any, **params: Any) -> Any:
        try:
            keys.append(eager._key(call_args, **params)[0])
        except eager._Refused:
            keys.append(None)
        return original(*call_args, **params)

    pjit._pjit_call_impl_python = spy
    try:
        jax.clear_caches()
        jax.block_until_ready(fun(*args))
    finally:
        pjit._pjit_call_impl_python = original
    return keys[-1]


def test_the_key_follows_every_part_of_the_computation() -> None:
    x = jnp.ones((3, 4), jnp.float32)
    base = _key(lambda a: a.reshape(4, 3), x)
    assert base is not None
    assert _key(lambda a: a.reshape(4, 3), x) == base  # the same op: the same key
    others = {
        "another parameter": _key(lambda a: a.reshape(2, 6), x),
        "another dtype": _key(lambda a: a.reshape(4, 3), x.astype(jnp.int32)),
        "another shape": _key(lambda a: a.reshape(4, 3, 1), x.reshape(3, 4, 1)),
        "a weak type": _key(lambda a: a.reshape(4, 3), jax.lax.broadcast(1.0, (3, 4))),
        "a committed operand": _key(lambda a: a.reshape(4, 3), jax.device_put(x, jax.devices()[0])),
    }
    assert None not in others.values()
    assert len({base, *others.values()}) == len(others) + 1


def test_a_config_value_changes_the_key() -> None:
    x = jnp.ones((3,), jnp.float32)
    base = _key(jnp.sin, x)
    with jax.numpy_rank_promotion("raise"):
        raised = _key(jnp.sin, x)
    assert base is not None and raised is not None and raised != base


def test_a_lowering_rule_registered_over_jax_s_is_not_keyed() -> None:
    from jax._src.lax import lax as lax_internal

    x = jnp.ones((3,), jnp.float32)
    assert _key(jnp.sin, x) is not None
    saved = mlir._lowerings[lax_internal.sin_p]

    def sine(ctx: Any, operand: Any, **params: Any) -> Any:
        return saved.rule(ctx, operand, **params)

    mlir.register_lowering(lax_internal.sin_p, sine)
    try:
        assert _key(jnp.sin, x) is None  # another rule could lower it differently
    finally:
        mlir._lowerings[lax_internal.sin_p] = saved
    assert _key(jnp.sin, x) is not None


def test_what_the_key_cannot_cover_takes_jax_s_path(
    cache: ExecutableCache, lowerings: list[str]
) -> None:
    table = np.arange(64, dtype=np.float32)

    def with_callback(a: jax.Array) -> jax.Array:
        return jax.pure_callback(np.sin, jax.ShapeDtypeStruct(a.shape, a.dtype), a)

    cases = {
        "a closed-over constant": (jax.jit(lambda a: a + table), jnp.ones(64, jnp.float32)),
        "a host callback": (jax.jit(with_callback), jnp.ones(3, jnp.float32)),
        "a loop (a sub-jaxpr)": (
            jax.jit(lambda a: jax.lax.fori_loop(0, 3, lambda i, v: v * 2, a)),
            jnp.ones(3, jnp.float32),
        ),
    }
    for why, (fun, arg) in cases.items():
        assert _key(fun, arg) is None, why
        expected = np.asarray(fun(arg))
        _fresh_start()
        lowerings.clear()
        assert np.array_equal(np.asarray(fun(arg)), expected), why
        assert lowerings, why  # lowered again: nothing was served before lowering


def test_a_damaged_entry_is_compiled_again(cache: ExecutableCache) -> None:
    expected = _program()
    behind.drain()
    keys = [path.stem for path in cache.directory.glob("*.exe")]
    for key in keys:  # replace every entry with well-formed bytes of the wrong kind
        cache.put(key, b"not an executable")
    jax.clear_caches()

    assert _program() == expected
