"""The jax.export runtime on real exports: what a bound function returns, when
it falls back and why, and when it refuses to bind at all."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ppy.cache import ExecutableCache
from ppy.runtime import NotBound
from ppy_runtime_pjrt import behind
from ppy_runtime_pjrt.export import ExportRuntime
from structlog.testing import capture_logs

from tests.runtime_pjrt.exports import make_entry, spec


@jax.jit
def score(x):
    centred = x - jnp.mean(x, axis=-1, keepdims=True)
    return jnp.sum(jnp.tanh(centred), axis=-1)


@jax.jit
def affine(x, w):
    return jnp.tanh(x @ w)


@jax.jit
def pair(x, y):
    return x + y


@jax.jit
def split(x):
    return x.min(axis=-1), {"max": x.max(axis=-1), "sum": x.sum()}


BATCH = [spec(("B", 4), name="x")]


@pytest.fixture(scope="module")
def score_entry():
    return make_entry(score, BATCH)


def bind(entry, original, cache=False):
    return ExportRuntime(cache=cache).bind(entry, original)


def test_results_are_the_jitted_functions(score_entry) -> None:
    bound = bind(score_entry, score)
    for batch in (1, 3, 7):
        x = jnp.arange(batch * 4, dtype=jnp.float32).reshape(batch, 4) / 3
        got, want = bound(x), score(x)
        assert isinstance(got, jax.Array)
        assert (got.dtype, got.shape) == (want.dtype, want.shape)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert bound.ppy_stats.fallbacks == {}
    assert len(bound.ppy_stats.executables) == 3


def test_numpy_arrays_take_the_staged_path(score_entry) -> None:
    bound = bind(score_entry, score)
    x = np.linspace(0, 1, 8, dtype=np.float32).reshape(2, 4)
    for _ in range(2):
        got = bound(x)
        assert isinstance(got, jax.Array)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(score(x)))
    assert bound.ppy_stats.fallbacks == {}


def test_pytree_outputs_keep_their_structure() -> None:
    bound = bind(make_entry(split, BATCH), split)
    x = jnp.arange(8, dtype=jnp.float32).reshape(2, 4)
    got, want = bound(x), split(x)
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    assert bound.ppy_stats.fallbacks == {}


def test_two_arguments_with_fixed_and_symbolic_dims() -> None:
    entry = make_entry(affine, [spec(("B", 4), name="x"), spec((4, 3), name="w")])
    bound = bind(entry, affine)
    x = jnp.ones((5, 4), jnp.float32)
    w = jnp.full((4, 3), 0.5, jnp.float32)
    np.testing.assert_array_equal(np.asarray(bound(x, w)), np.asarray(affine(x, w)))
    assert bound.ppy_stats.fallbacks == {}


F32 = jnp.ones((3, 4), jnp.float32)


@pytest.mark.parametrize(
    ("args", "kwargs", "category"),
    [
        ((jnp.ones((3, 5), jnp.float32),), {}, "dim"),
        ((jnp.ones((3, 4), jnp.int32),), {}, "dtype"),
        ((jnp.ones((2, 3, 4), jnp.float32),), {}, "rank"),
        ((jnp.ones((0, 4), jnp.float32),), {}, "size"),
        ((2.0,), {}, "scalar"),
        ((np.float32(2.0),), {}, "rank"),  # to jit, an array of shape ()
        (([[1.0, 2.0, 3.0, 4.0]],), {}, "tree"),
        ((object(),), {}, "type"),
        ((jnp.full((3, 4), 2.0),), {}, "dtype"),
    ],
    ids=[
        "shape",
        "dtype",
        "rank",
        "zero-size",
        "python-scalar",
        "numpy-scalar",
        "list",
        "object",
        "weakly-typed",
    ],
)
def test_what_does_not_match_goes_to_the_original(score_entry, args, kwargs, category) -> None:
    calls = []

    def original(x):
        calls.append(((x,), {}))
        return "the original's result"

    bound = bind(score_entry, original)
    with capture_logs() as events:
        assert bound(*args, **kwargs) == "the original's result"
        assert bound(*args, **kwargs) == "the original's result"
    assert calls == [(args, kwargs)] * 2
    assert bound.ppy_stats.fallbacks == {category: 2}
    fallbacks = [e for e in events if e["event"] == "run.fallback"]
    assert len(fallbacks) == 1  # each distinct reason is logged once
    assert fallbacks[0]["category"] == category
    assert fallbacks[0]["module"] == "model" and fallbacks[0]["function"] == "score"


def test_a_parameter_the_export_was_traced_without_goes_to_the_original_when_passed() -> None:
    """An export traced with a parameter left to its default (or bound by a
    partial's keyword) holds that value; a call that passes one is jit's."""

    @jax.jit
    def scaled(x, scale=2.0):
        return x * scale

    bound = bind(make_entry(scaled, BATCH, qualname="scaled"), scaled)
    x = jnp.ones((3, 4), jnp.float32)
    np.testing.assert_array_equal(np.asarray(bound(x)), np.full((3, 4), 2.0, np.float32))
    with capture_logs() as events:
        np.testing.assert_array_equal(np.asarray(bound(x, 3.0)), np.full((3, 4), 3.0))
        np.testing.assert_array_equal(np.asarray(bound(x, scale=2.0)), np.full((3, 4), 2.0))
    assert bound.ppy_stats.fallbacks == {"signature": 2}
    (reason,) = {e["reason"] for e in events if e["event"] == "run.fallback"}
    assert reason.startswith("scale passed, which the export does not take")


def test_sizes_the_export_constrains_out_go_to_the_original() -> None:
    (b,) = jax.export.symbolic_shape("B", constraints=["B >= 3"])
    flat = jax.jit(lambda x: [score(x)])  # as the worker exports: the output's leaves
    exported = jax.export.export(flat)(jax.ShapeDtypeStruct((b, 4), jnp.float32))
    plain = make_entry(score, BATCH)
    entry = dataclasses.replace(
        plain, payload={**plain.payload, "export": bytes(exported.serialize())}
    )
    bound = bind(entry, score)
    small = jnp.ones((2, 4), jnp.float32)
    with capture_logs() as events:
        for _ in range(3):
            np.testing.assert_array_equal(np.asarray(bound(small)), np.asarray(score(small)))
    # Decided once for the signature, as jit decides: the original's miss
    # answered the first call, and jax's dispatcher serves the next ones
    # with the original's executable, without ppy.
    assert bound.ppy_stats.fallbacks == {"compile": 1}
    (fallback,) = [e for e in events if e["event"] == "run.fallback"]
    assert fallback["reason"].startswith("the export does not compile for these shapes")
    big = jnp.ones((3, 4), jnp.float32)
    np.testing.assert_array_equal(np.asarray(bound(big)), np.asarray(score(big)))
    assert bound.ppy_stats.fallbacks == {"compile": 1}


def test_an_export_written_by_another_jax_version_is_bound(score_entry) -> None:
    older = dataclasses.replace(
        score_entry, metadata={**score_entry.metadata, "jax_version": "0.4.35"}
    )
    bound = bind(older, score)
    np.testing.assert_array_equal(np.asarray(bound(F32)), np.asarray(score(F32)))
    assert bound.ppy_stats.fallbacks == {}


def test_symbolic_dims_must_agree_across_arguments() -> None:
    entry = make_entry(pair, [spec(("B", 4), name="x"), spec(("B", 4), name="y")])
    bound = bind(entry, pair)
    x, y = jnp.ones((3, 4), jnp.float32), jnp.ones((2, 4), jnp.float32)
    with pytest.raises(TypeError):  # what the original says about mismatched shapes
        pair(x, y)
    with capture_logs() as events, pytest.raises(TypeError):
        bound(x, y)
    assert bound.ppy_stats.fallbacks == {"symbolic": 1}
    assert "B is 3 in x but 2 in y" in events[0]["reason"]
    np.testing.assert_array_equal(np.asarray(bound(x, x)), np.asarray(pair(x, x)))


@pytest.mark.parametrize(
    "transform",
    [
        lambda f, x: jax.jit(f)(x),
        lambda f, x: jax.grad(lambda v: f(v).sum())(x),
        lambda f, x: jax.vmap(f)(x[None]),
    ],
    ids=["jit", "grad", "vmap"],
)
def test_tracers_go_to_the_original(score_entry, transform) -> None:
    bound = bind(score_entry, score)
    x = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    got, want = transform(bound, x), transform(score, x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
    assert bound.ppy_stats.fallbacks == {"tracer": 1}


def test_the_jitted_functions_methods_are_still_there(score_entry) -> None:
    bound = bind(score_entry, score)
    assert bound.__name__ == "score" and bound.__wrapped__ is score.__wrapped__
    assert "tanh" in bound.lower(F32).as_text()


def test_an_export_for_another_platform_is_not_bound() -> None:
    entry = make_entry(score, BATCH, platforms=["cuda"])
    with pytest.raises(NotBound) as refusal:
        bind(entry, score)
    assert "cuda" in refusal.value.reason and jax.default_backend() in refusal.value.reason


def test_an_unsupported_calling_convention_is_not_bound(score_entry) -> None:
    exported = jax.export.deserialize(bytearray(score_entry.payload["export"]))
    newer = dataclasses.replace(exported, calling_convention_version=99)
    entry = dataclasses.replace(
        score_entry, payload={**score_entry.payload, "export": bytes(newer.serialize())}
    )
    with pytest.raises(NotBound, match=r"version 99; jax .* supports \d+\.\.\d+"):
        bind(entry, score)


def test_unreadable_bytes_are_not_bound(score_entry) -> None:
    entry = dataclasses.replace(
        score_entry, payload={**score_entry.payload, "export": b"not an export"}
    )
    with pytest.raises(NotBound, match="cannot read this export"):
        bind(entry, score)


def test_a_description_that_disagrees_with_the_export_is_not_bound(score_entry) -> None:
    (variant,) = score_entry.metadata["variants"]
    wrong = {**variant, "inputs": [spec(("B", 5), name="x").to_json()]}
    entry = dataclasses.replace(score_entry, metadata={**score_entry.metadata, "variants": [wrong]})
    with pytest.raises(NotBound, match="described as float32"):
        bind(entry, score)


def test_an_entry_listing_its_inputs_out_of_the_signatures_order_is_not_bound() -> None:
    # An export takes its inputs in the order the entry lists them; one listed
    # in another order than the signature's (an artifact written by a build
    # that sorted them by name) would hand each parameter another's value.
    entry = make_entry(pair, [spec((4,), name="x"), spec((4,), name="y")])
    swapped = {**entry.metadata, "traced": ["y", "x"]}
    with pytest.raises(NotBound, match=r"lists its inputs as \(y, x\).*rebuild the artifact"):
        bind(dataclasses.replace(entry, metadata=swapped), pair)
    assert bind(entry, pair) is not None


def test_a_call_by_keyword_takes_the_staged_path(score_entry) -> None:
    bound = bind(score_entry, score)
    x = jnp.ones((3, 4), jnp.float32)
    np.testing.assert_array_equal(np.asarray(bound(x=x)), np.asarray(score(x)))
    np.testing.assert_array_equal(np.asarray(bound(x=x)), np.asarray(score(x)))
    assert bound.ppy_stats.fallbacks == {}
    assert len(bound.ppy_stats.executables) == 1


def test_a_call_that_does_not_bind_raises_what_the_jitted_function_raises(score_entry) -> None:
    bound = bind(score_entry, score)
    x = jnp.ones((3, 4), jnp.float32)
    with pytest.raises(TypeError) as jitted:
        score(x, x)
    with pytest.raises(TypeError) as staged:
        bound(x, x)
    assert str(staged.value) == str(jitted.value)
    assert bound.ppy_stats.fallbacks == {"signature": 1}


def test_executables_are_cached_and_a_damaged_one_rebuilt(score_entry, cache_dir: Path) -> None:
    x = jnp.ones((3, 4), jnp.float32)
    first = bind(score_entry, score, cache=None)
    with capture_logs() as events:
        first(x)
        behind.drain()  # the executable is written behind the call
    assert [e["event"] for e in events] == ["cache.miss", "cache.write"]
    assert ExecutableCache().stats()[0] == 1

    second = bind(score_entry, score, cache=None)
    expected = np.asarray(score(x))  # the original's own compile is logged too
    with capture_logs() as events:
        np.testing.assert_array_equal(np.asarray(second(x)), expected)
    assert [e["event"] for e in events] == ["cache.hit"]
    assert list(second.ppy_stats.executables.values()) == ["cache"]

    (path,) = cache_dir.glob("*.exe")
    raw = path.read_bytes()
    path.write_bytes(raw[:-10] + b"0123456789")
    third = bind(score_entry, score, cache=None)
    with capture_logs() as events:
        np.testing.assert_array_equal(np.asarray(third(x)), np.asarray(score(x)))
        behind.drain()
    assert [e["event"] for e in events] == ["cache.corrupt", "cache.write"]
    assert list(third.ppy_stats.executables.values()) == ["compiled"]
    assert ExecutableCache().get(path.stem) is not None


def test_a_process_that_never_closes_the_runtime_still_writes_its_executable(
    cache_dir: Path,
) -> None:
    """ppy used as a library: a script binds and calls, and exits without
    closing the runtime; what was queued for the cache is written at exit."""
    driver = textwrap.dedent(
        """
        import os
        from tests.runtime_pjrt.test_export import BATCH, score
        from tests.runtime_pjrt.exports import make_entry
        from ppy_runtime_pjrt.export import ExportRuntime
        import jax.numpy as jnp

        bound = ExportRuntime().bind(make_entry(score, BATCH), score)
        print(bound(jnp.ones((3, 4), jnp.float32)))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", driver],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        env={**os.environ, "PPY_CACHE_DIR": str(cache_dir)},
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert ExecutableCache().stats()[0] == 1
    assert not list(cache_dir.glob(".tmp-*"))


def test_an_entry_breaking_the_contract_is_not_bound_and_says_which_field(score_entry) -> None:
    metadata = {k: v for k, v in score_entry.metadata.items() if k != "jaxlib_version"}
    entry = dataclasses.replace(score_entry, metadata=metadata)
    with pytest.raises(NotBound, match=r"metadata\.jaxlib_version is missing; rebuild"):
        bind(entry, score)
    older = dataclasses.replace(score_entry, metadata={**metadata, "calling_convention": 0})
    with pytest.raises(NotBound, match=r"metadata\.calling_convention is 0"):
        bind(older, score)
