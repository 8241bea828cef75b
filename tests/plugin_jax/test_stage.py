"""The jax plugin's ``stage`` on a real project: one call, real worker processes.

Every case lives in one project and one ``stage`` call, so the worker starts
once, and once more after the module that kills it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export
from ppy.artifact.entry import Entry
from ppy.discovery.module import discover_module
from ppy.kinds.jax_export import JaxExport
from ppy.plugin import StageFailure, StageRequest, StageTarget
from ppy_plugin_jax.plugin import JaxExportPlugin

HEADER = """\
    from typing import Annotated

    import jax
    import jax.numpy as jnp
    import ppy
    """

FILES = {
    # A module in a package, imported as "pkg.helpers"; its __main__ block must not run.
    "pkg/helpers.ppy": HEADER
    + """
    Pair = Annotated[jax.Array, ppy.Shape("B", 2), ppy.DType("float32")]

    @jax.jit
    def halve(x: Pair) -> jax.Array:
        return x / 2

    if __name__ == "__main__":
        raise SystemExit("the __main__ block ran")
    """,
    # One module importing another .ppy module through the import hook.
    "model.ppy": HEADER
    + """
    from pkg.helpers import halve

    @jax.jit
    def twice_halved(x: Annotated[jax.Array, ppy.Shape("B", 2), ppy.DType("float32")]):
        return halve(x) * 2

    @jax.jit
    def loud(x: Annotated[jax.Array, ppy.Shape(3), ppy.DType("float32")]):
        print("tracing loud")
        return x + 1

    @jax.jit
    def refuses(x: Annotated[jax.Array, ppy.Shape(3), ppy.DType("float32")]):
        print("refusing now")
        raise ValueError("this function refuses to trace")

    @jax.jit
    def inconclusive(x: Annotated[jax.Array, ppy.Shape("B"), ppy.DType("float32")]):
        return x.reshape(3, -1)
    """,
    # The alias is rebound after the source was read: the live annotation disagrees.
    "rebound.ppy": "    from __future__ import annotations\n"
    + HEADER
    + """
    Vec = Annotated[jax.Array, ppy.Shape("N"), ppy.DType("float32")]

    @jax.jit
    def mean(x: Vec):
        return jnp.mean(x)

    globals()["Vec"] = Annotated[jax.Array, ppy.Shape("N", 2), ppy.DType("int32")]
    """,
    # ppy.Like with axes: one marked right, and each way an example can refuse a mark.
    "likes.ppy": "    from __future__ import annotations\n"
    + HEADER
    + """
    from typing import Any

    def make_batch():
        return {"x": jnp.zeros((32, 4), jnp.float32), "y": jnp.zeros(32, jnp.int32)}

    def make_odd():
        return {"x": jnp.zeros((32, 4), jnp.float32), "y": jnp.zeros(16, jnp.int32)}

    def make_none():
        return {}

    Batch = Annotated[Any, ppy.Like(make_batch, axes={0: "B"})]
    Rebound = Annotated[Any, ppy.Like(make_batch, axes={0: "B"})]

    @jax.jit
    def weigh(batch: Batch, w: Annotated[jax.Array, ppy.Shape("B"), ppy.DType("float32")]):
        return (batch["x"].sum(axis=1) + batch["y"]) * w

    @jax.jit
    def no_axis(batch: Annotated[Any, ppy.Like(make_batch, axes={1: "T"})]):
        return batch["x"]

    @jax.jit
    def two_sizes(batch: Annotated[Any, ppy.Like(make_odd, axes={0: "B"})]):
        return batch["x"]

    @jax.jit
    def one_axis_twice(batch: Annotated[Any, ppy.Like(make_batch, axes={0: "B", -1: "T"})]):
        return batch["x"]

    @jax.jit
    def no_leaves(batch: Annotated[Any, ppy.Like(make_none, axes={0: "B"})]):
        return jnp.zeros(())

    @jax.jit
    def rebound(batch: Rebound):
        return batch["x"]

    globals()["Rebound"] = Annotated[Any, ppy.Like(make_batch, axes={0: "N"})]
    """,
    # The worker dies while exporting the second function: the first is kept.
    "crash.ppy": HEADER
    + """
    import os

    @jax.jit
    def fine(x: Annotated[jax.Array, ppy.Shape(2), ppy.DType("float32")]):
        return -x

    @jax.jit
    def fatal(x: Annotated[jax.Array, ppy.Shape(2), ppy.DType("float32")]):
        print("going down", flush=True)
        os._exit(9)
    """,
    # After the crash a fresh worker exports what is left.
    "zlast.ppy": HEADER
    + """
    @jax.jit
    def last(x: Annotated[jax.Array, ppy.Shape("B"), ppy.DType("int32")]):
        return x * 10
    """,
}

ORDER = ("pkg/helpers.ppy", "model.ppy", "rebound.ppy", "likes.ppy", "crash.ppy", "zlast.ppy")


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> Mapping[str, Entry | StageFailure]:
    import textwrap

    root = tmp_path_factory.mktemp("stage")
    for name, text in FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    plugin = JaxExportPlugin()
    settings = plugin.validate_settings({"allow-build-export": True}, "pyproject.toml")
    targets = []
    for name in ORDER:
        module = discover_module(root, root / name)
        functions = tuple(
            f for f in module.functions if any(d.name == "jax.jit" for d in f.decorators)
        )
        targets.append(StageTarget(module, functions))
    request = StageRequest(root, settings, tuple(targets))
    results: Sequence[Entry | StageFailure] = plugin.stage(request)
    expected = [f"{t.module.name}.{f.qualname}" for t in targets for f in t.functions]
    assert [f"{r.module}.{r.qualname}" for r in results] == expected
    return {f"{r.module}.{r.qualname}": r for r in results}


def _entry(staged: Mapping[str, Entry | StageFailure], key: str) -> Entry:
    result = staged[key]
    assert isinstance(result, Entry), f"{key} failed: {result}"
    return result


def _failure(staged: Mapping[str, Entry | StageFailure], key: str) -> StageFailure:
    result = staged[key]
    assert isinstance(result, StageFailure), f"{key} was staged"
    return result


def _call(entry: Entry) -> Callable[..., object]:
    """The export, called as the function: it returns the leaves of the
    output, here a single array."""
    exported = export.deserialize(bytearray(entry.payload["export"]))
    assert JaxExport.read(entry).variants[0].out_tree == "*"
    return lambda *args: exported.call(*args)[0]


def test_a_package_module_is_imported_under_its_name_without_its_main_block(
    staged: Mapping[str, Entry | StageFailure],
) -> None:
    halve = _entry(staged, "pkg.helpers.halve")
    assert halve.module == "pkg.helpers" and halve.kind == "jax.export"
    assert halve.signature == "halve(x: float32[B,2]) -> float32[B,2]"
    x = jnp.arange(6, dtype=jnp.float32).reshape(3, 2)
    assert np.array_equal(np.asarray(_call(halve)(x)), np.asarray(x) / 2)


def test_one_ppy_module_imports_another_and_the_export_runs(
    staged: Mapping[str, Entry | StageFailure],
) -> None:
    entry = _entry(staged, "model.twice_halved")
    x = jnp.ones((5, 2), jnp.float32)
    assert np.array_equal(np.asarray(_call(entry)(x)), np.ones((5, 2)))
    assert entry.platforms == (jax.default_backend(),)
    assert entry.metadata["variants"][0]["uses_shape_polymorphism"] is True
    assert entry.metadata["jax_version"] == jax.__version__
    assert "module @jit_twice_halved" in entry.payload["stablehlo"].decode()
    assert entry.decision is None


def test_prints_while_tracing_are_captured_and_keep_the_function_unstaged(
    staged: Mapping[str, Entry | StageFailure],
) -> None:
    loud = _failure(staged, "model.loud")
    assert (loud.rule, loud.deliberate) == ("trace-side-effect", True)
    assert "tracing loud" in loud.reason and loud.output == "tracing loud\n"
    assert _entry(staged, "model.twice_halved")  # the protocol went on unharmed


def test_an_error_in_the_function_or_from_jax_is_the_reason(
    staged: Mapping[str, Entry | StageFailure],
) -> None:
    refuses = _failure(staged, "model.refuses")
    assert refuses.rule == "export-failed"
    assert "ValueError" in refuses.reason and "this function refuses to trace" in refuses.reason
    assert " at model.ppy:" in refuses.reason
    inconclusive = _failure(staged, "model.inconclusive")
    assert inconclusive.rule == "export-failed"
    assert "InconclusiveDimensionOperation" in inconclusive.reason
    assert "refusing now" in refuses.output and "tracing loud" not in refuses.output


def test_an_annotation_that_changes_at_run_time_is_not_exported(
    staged: Mapping[str, Entry | StageFailure],
) -> None:
    mean = _failure(staged, "rebound.mean")
    assert mean.rule == "annotation-mismatch"
    assert "parameter x is int32[N,2] at run time" in mean.reason and "float32[N]" in mean.reason
    assert mean.remedy


def test_like_axes_make_the_example_batch_symbolic_and_share_it_with_a_shape(
    staged: Mapping[str, Entry | StageFailure],
) -> None:
    weigh = _entry(staged, "likes.weigh")
    assert [(s.name, s.dims) for s in weigh.inputs] == [
        ("batch['x']", ("B", 4)),
        ("batch['y']", ("B",)),
        ("w", ("B",)),
    ]
    exported = export.deserialize(bytearray(weigh.payload["export"]))
    for n in (32, 3):  # the example's size, and one it never had
        x, y = jnp.ones((n, 4), jnp.float32), jnp.arange(n, dtype=jnp.int32)
        (out,) = exported.call(x, y, jnp.full(n, 2.0, jnp.float32))
        assert np.asarray(out).tolist() == [(4.0 + i) * 2 for i in range(n)]


@pytest.mark.parametrize(
    ("function", "reason", "remedy"),
    [
        (
            "no_axis",
            "batch: ppy.Like(make_batch, axes={1: 'T'}) marks axis 1 of every leaf, but "
            "batch['y'] is int32[32], which has no axis 1",
            "mark only axes that every leaf of the example has",
        ),
        (
            "two_sizes",
            "batch: ppy.Like(make_odd, axes={0: 'B'}) makes B one size, but the example gives "
            "batch['x'] 32 on the axis named B and batch['y'] 16 (int32[16])",
            "make the example give every axis named B the same size",
        ),
        (
            "one_axis_twice",
            "batch: ppy.Like(make_batch, axes={0: 'B', -1: 'T'}) names axis 0 of batch['y'] "
            "(int32[32]) both B and T",
            "give each axis one name",
        ),
        (
            "no_leaves",
            "batch: ppy.Like(make_none, axes={0: 'B'}) marks axes of every leaf, but "
            "make_none() gives no array leaves",
            "describe the parameter with ppy.Like(example) alone",
        ),
        (
            "rebound",
            "parameter batch is ppy.Like(make_batch, axes={0: 'N'}) at run time but the "
            "source reads ppy.Like(make_batch, axes={0: 'B'})",
            "",
        ),
    ],
)
def test_like_axes_an_example_cannot_have_are_refused_with_a_remedy(
    staged: Mapping[str, Entry | StageFailure], function: str, reason: str, remedy: str
) -> None:
    failure = _failure(staged, f"likes.{function}")
    rule = "annotation-mismatch" if function == "rebound" else "invalid-spec"
    assert (failure.rule, failure.reason) == (rule, reason)
    assert failure.remedy and failure.remedy.startswith(remedy)


def test_a_worker_that_dies_mid_module_keeps_what_was_done_and_a_new_one_goes_on(
    staged: Mapping[str, Entry | StageFailure],
) -> None:
    fine = _entry(staged, "crash.fine")
    assert np.array_equal(np.asarray(_call(fine)(jnp.ones(2, jnp.float32))), -np.ones(2))
    fatal = _failure(staged, "crash.fatal")
    assert "exited with code 9" in fatal.reason and "crash.ppy" in fatal.reason and fatal.remedy
    assert "going down" in fatal.output
    last = _entry(staged, "zlast.last")
    out = _call(last)(jnp.array([1, 2, 3], jnp.int32))
    assert np.asarray(out).tolist() == [10, 20, 30]


def test_platforms_setting_exports_for_each(
    tmp_path: Path,
) -> None:
    """Separate from the shared project: a second call with other settings."""
    root = tmp_path
    (root / "two.ppy").write_text(
        "from typing import Annotated\nimport jax, ppy\n\n"
        "@jax.jit\n"
        "def f(x: Annotated[jax.Array, ppy.Shape('B'), ppy.DType('bool')]):\n"
        "    return ~x\n"
    )
    plugin = JaxExportPlugin()
    settings = plugin.validate_settings(
        {"allow-build-export": True, "platforms": ["cuda", "cpu"]}, "pyproject.toml"
    )
    module = discover_module(root, root / "two.ppy")
    (result,) = plugin.stage(StageRequest(root, settings, (StageTarget(module, module.functions),)))
    assert isinstance(result, Entry), result
    assert result.platforms == ("cpu", "cuda")
    exported = export.deserialize(bytearray(result.payload["export"]))
    assert exported.platforms == ("cpu", "cuda")
    (out,) = exported.call(jnp.array([True, False]))  # the output's leaves
    assert np.asarray(out).tolist() == [False, True]
