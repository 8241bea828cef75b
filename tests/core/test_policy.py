"""The policy engine over real discovery output and a real pyproject.toml.

The plugin is a small double of the ``ppy.plugin.Plugin`` contract defined
here, so each rule can be switched on alone.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from ppy.artifact.entry import Entry
from ppy.build.policy import RULES, decide, decide_module, stageable_decorator
from ppy.config import Config, load_config
from ppy.decision import Check, Decision, Outcome
from ppy.discovery.module import discover_source
from ppy.discovery.records import FunctionInfo, ModuleInfo
from ppy.plugin import Plugin, Requirements, StageFailure, StageRequest

JAX_NO_VJP = "a serialized export carries no VJP"


@dataclass
class FakePlugin:
    name: str = "jax"
    kind: str = "jax.export"
    verb: str = "exported"
    decorators: frozenset[str] = frozenset({"jax.jit"})
    requirements: Requirements = field(
        default_factory=lambda: Requirements(
            build_execution=True,
            permission="allow-build-export",
            array_specs=True,
            differentiation=JAX_NO_VJP,
        )
    )
    version: str = "0"
    contract: tuple[int, int] = (1, 0)
    own_checks: Sequence[Check] = ()

    def validate_settings(self, table: Mapping[str, Any], path: str) -> Mapping[str, Any]:
        return dict(table)

    def fingerprint(self, settings: Mapping[str, Any]) -> str:
        return self.version

    def check(
        self, function: FunctionInfo, module: ModuleInfo, settings: Mapping[str, Any]
    ) -> Sequence[Check]:
        if function.scope != "module":
            return [Check("jax-scope", False, f"{function.scope} functions stay")]
        return list(self.own_checks)

    def stage(self, request: StageRequest) -> Sequence[Entry | StageFailure]:
        return []


ALLOW = '[tool.ppy]\nbuild-execution = "allow"\n[tool.ppy.plugins.jax]\nallow-build-export = true\n'
GRANTED = {"jax": {"allow-build-export": True}}

MODEL = """\
from typing import Annotated

import jax
import jax.numpy as jnp

import ppy

Batch = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]


@jax.jit
def score(x: Batch) -> jax.Array:
    return jnp.sum(x, axis=-1)
"""


def config_for(tmp_path: Path, pyproject: str | None = ALLOW) -> Config:
    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(pyproject)
    return load_config(tmp_path)


def decide_one(
    source: str,
    config: Config,
    plugin: Plugin | None = None,
    settings: Mapping[str, Mapping[str, Any]] = GRANTED,
    name: str = "score",
) -> Decision:
    module = discover_source(textwrap.dedent(source), module="model", path="model.ppy")
    function = next(f for f in module.functions if f.qualname == name)
    plugins: dict[str, Plugin] = {}
    if plugin is not None:
        plugins = {d: plugin for d in plugin.decorators}
    decision = decide(function, module, config, plugins, settings)
    assert decision is not None
    return decision


def check(decision: Decision, rule: str) -> Check:
    return next(c for c in decision.trail if c.rule == rule)


def test_the_fake_plugin_meets_the_contract() -> None:
    assert isinstance(FakePlugin(), Plugin)


def test_allowed_when_every_rule_passes(tmp_path: Path) -> None:
    decision = decide_one(MODEL, config_for(tmp_path), FakePlugin())
    assert decision.outcome is Outcome.ALLOWED
    assert decision.rule == "allowed"
    assert decision.remedy is None
    assert (decision.plugin, decision.kind) == ("jax", "jax.export")
    assert decision.signature == "score(x: float32[B,4])"
    assert decision.location == "model.ppy:12"
    assert all(c.passed for c in decision.trail)
    rules = [c.rule for c in decision.trail]
    for rule in ("no-plugin", "build-execution", "plugin-permission", "invalid-spec"):
        assert rule in rules
    assert {"missing-shape", "missing-dtype", "differentiated"} <= set(rules)


def test_no_plugin_names_the_distribution(tmp_path: Path) -> None:
    decision = decide_one(MODEL, config_for(tmp_path), plugin=None)
    assert decision.outcome is Outcome.STAYS
    assert decision.rule == "no-plugin"
    assert decision.reason == (
        "stays an ordinary jitted call: no jax export plugin is installed "
        "(pip install ppy-plugin-jax)"
    )
    assert decision.remedy == "pip install ppy-plugin-jax"
    assert (decision.plugin, decision.kind) == ("jax", None)


def test_no_plugin_for_xla(tmp_path: Path) -> None:
    source = "from ppy import xla\n\n@xla.jit\ndef score(n: int) -> int:\n    return n\n"
    decision = decide_one(source, config_for(tmp_path), plugin=None)
    assert decision.rule == "no-plugin"
    assert "pip install ppy-plugin-xla" in decision.reason
    assert decision.signature == "score(n: int)"


def test_build_execution_missing(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    config = config_for(tmp_path, "[tool.ppy.plugins.jax]\nallow-build-export = true\n")
    decision = decide_one(MODEL, config, FakePlugin())
    assert decision.outcome is Outcome.STAYS
    assert decision.rule == "build-execution"
    assert decision.reason == (
        "stays an ordinary jitted call: build-time export is off because "
        '[tool.ppy] build-execution is not "allow"'
    )
    assert decision.remedy == (
        f'add build-execution = "allow" under [tool.ppy] in {pyproject.resolve()}'
    )
    assert check(decision, "plugin-permission").passed


def test_plugin_permission_missing(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    config = config_for(tmp_path, '[tool.ppy]\nbuild-execution = "allow"\n')
    decision = decide_one(MODEL, config, FakePlugin(), settings={"jax": {}})
    assert decision.rule == "plugin-permission"
    assert decision.reason == (
        "stays an ordinary jitted call: build-time export is off because "
        "[tool.ppy.plugins.jax] allow-build-export is not true"
    )
    assert decision.remedy == (
        f"add allow-build-export = true under [tool.ppy.plugins.jax] in {pyproject.resolve()}"
    )


def test_both_permissions_missing_are_both_in_the_trail(tmp_path: Path) -> None:
    decision = decide_one(MODEL, config_for(tmp_path, None), FakePlugin(), settings={})
    assert decision.rule == "build-execution"
    failed = [c for c in decision.trail if not c.passed]
    assert [c.rule for c in failed] == ["build-execution", "plugin-permission"]
    # The decision names both, so one round of edits is enough.
    assert decision.reason.endswith(
        '[tool.ppy] build-execution is not "allow" and '
        "[tool.ppy.plugins.jax] allow-build-export is not true"
    )
    assert decision.remedy is not None
    assert 'build-execution = "allow" under [tool.ppy] and ' in decision.remedy
    assert "allow-build-export = true under [tool.ppy.plugins.jax]" in decision.remedy
    if load_config(tmp_path).pyproject is None:
        assert failed[1].remedy == (
            f"create {tmp_path.resolve() / 'pyproject.toml'} with allow-build-export = true "
            "under [tool.ppy.plugins.jax]"
        )


def test_plugin_without_requirements_needs_no_permission(tmp_path: Path) -> None:
    plugin = FakePlugin(requirements=Requirements(build_execution=False))
    decision = decide_one(MODEL, config_for(tmp_path, None), plugin, settings={})
    assert decision.outcome is Outcome.ALLOWED


def test_missing_shape_names_the_parameter(tmp_path: Path) -> None:
    source = (
        MODEL + '\n@jax.jit\ndef pair(x: Batch, y: Annotated[jax.Array, ppy.DType("int32")]):\n'
    )
    source += "    return x\n"
    decision = decide_one(source, config_for(tmp_path), FakePlugin(), name="pair")
    assert decision.rule == "missing-shape"
    assert decision.reason == ("parameter 'y' has no ppy.Shape; the trace needs each input's dims")
    assert decision.remedy is not None and decision.remedy.startswith(
        "annotate y as Annotated[jax.Array, ppy.Shape(...), ppy.DType(...)]"
    )
    assert check(decision, "missing-dtype").passed
    assert decision.signature == "pair(x: float32[B,4], y: int32[?])"


def test_what_a_recording_could_not_describe_is_named_with_what_describes_it(
    tmp_path: Path,
) -> None:
    """Recorded calls that passed arrays laid out over several devices leave
    the parameters undescribed: the build says so, and points to ppy.Sharding
    and ppy.Like, not to a recording the program already has."""
    from ppy.record.apply import apply_recording
    from ppy.record.format import FunctionCalls, Signatures

    source = MODEL + "\n@jax.jit\ndef step(params, batch, scale):\n    return batch\n"
    module = discover_source(source, module="model", path="model.ppy")
    calls = FunctionCalls()
    array = {"array": "float32[8,4]", "sharded": True}
    calls.add(
        {"params": {"nest": {"list": [array]}}, "batch": array, "scale": {"array": "float32[]"}}, 5
    )
    recording = Signatures(runs=1)
    recording.functions["model.step"] = calls
    recorded = apply_recording(module, recording)
    step = next(f for f in recorded.functions if f.qualname == "step")
    plugins = {"jax.jit": FakePlugin()}
    decision = decide(step, recorded, config_for(tmp_path), plugins, GRANTED)
    assert decision is not None and decision.rule == "missing-shape"
    assert decision.reason == (
        "parameters 'params', 'batch' are not described; the trace needs each input's dims; "
        "the recording could not describe 'params', 'batch'"
    )
    assert decision.remedy is not None
    assert "ppy record" not in decision.remedy
    assert "batch: laid out over several devices; describe its sharding with ppy.Sharding" in (
        decision.remedy
    )
    assert "params: holds arrays laid out over several devices" in decision.remedy


def test_missing_dtype_names_every_parameter(tmp_path: Path) -> None:
    source = MODEL + "\n@jax.jit\ndef pair(x: Annotated[jax.Array, ppy.Shape(3)], y, *, k=1):\n"
    source += "    return x\n"
    decision = decide_one(source, config_for(tmp_path), FakePlugin(), name="pair")
    assert decision.rule == "missing-shape"
    # A keyword-only parameter is an input too: it can be passed by name.
    assert "parameters 'y', 'k' are not described" in decision.reason
    dtype = check(decision, "missing-dtype")
    assert not dtype.passed
    assert dtype.detail == (
        "parameters 'x', 'y', 'k' have no ppy.DType; the trace needs each input's element type"
    )
    assert decision.signature == "pair(x: ?[3], y: ?, k: ?)"


def test_missing_dtype_decides_when_shapes_are_there(tmp_path: Path) -> None:
    source = MODEL + "\n@jax.jit\ndef one(x: Annotated[jax.Array, ppy.Shape(3)]):\n    return x\n"
    decision = decide_one(source, config_for(tmp_path), FakePlugin(), name="one")
    assert decision.rule == "missing-dtype"
    assert decision.reason.startswith("parameter 'x' has no ppy.DType")


def test_invalid_spec_carries_the_problem(tmp_path: Path) -> None:
    source = MODEL.replace('ppy.DType("float32")', 'ppy.DType("float33")')
    decision = decide_one(source, config_for(tmp_path), FakePlugin())
    assert decision.rule == "invalid-spec"
    assert decision.reason.startswith("model.ppy:8: ppy.DType: 'float33' is not a dtype name")
    # the dtype is written, only wrong: not reported as missing as well
    assert check(decision, "missing-dtype").passed


def test_differentiated_says_why_and_how(tmp_path: Path) -> None:
    source = MODEL + "\n\ndef loss(x):\n    return score(x).sum()\n\n\ng = jax.grad(loss)\n"
    decision = decide_one(source, config_for(tmp_path), FakePlugin())
    assert decision.rule == "differentiated"
    assert decision.reason == (
        "score is differentiated (handed to jax.grad at model.ppy:20 via loss); "
        "a serialized export carries no VJP"
    )


def test_a_plugin_that_serves_some_transforms_stages_what_only_they_reach(
    tmp_path: Path,
) -> None:
    plugin = FakePlugin(
        requirements=Requirements(
            build_execution=True,
            permission="allow-build-export",
            differentiation="its VJP serves jax.grad only",
            differentiable=frozenset({"jax.grad"}),
        )
    )
    graded = decide_one(MODEL + "\ng = jax.grad(score)\n", config_for(tmp_path), plugin)
    assert graded.outcome is Outcome.ALLOWED
    assert (
        check(graded, "differentiated").detail == "differentiated by jax.grad: staged with its VJP"
    )
    source = MODEL + "\ng = jax.grad(score)\nj = jax.jacrev(score)\n"
    both = decide_one(source, config_for(tmp_path), plugin)
    assert (both.outcome, both.rule) == (Outcome.STAYS, "differentiated")
    assert both.reason == (
        "score is differentiated (handed to jax.grad at model.ppy:15); its VJP serves jax.grad "
        "only; it is differentiated by jax.jacrev"
    )


def test_plugin_that_stages_differentiated_functions(tmp_path: Path) -> None:
    source = MODEL + "\ng = jax.grad(score)\n"
    plugin = FakePlugin(
        requirements=Requirements(build_execution=True, permission="allow-build-export")
    )
    decision = decide_one(source, config_for(tmp_path), plugin)
    assert decision.outcome is Outcome.ALLOWED


def test_the_plugins_own_check_decides_last(tmp_path: Path) -> None:
    plugin = FakePlugin(own_checks=[Check("jax-static", False, "static_argnums is not supported")])
    decision = decide_one(MODEL, config_for(tmp_path), plugin)
    assert (decision.rule, decision.reason) == ("jax-static", "static_argnums is not supported")
    assert decision.trail[-1].rule == "jax-static"


def test_methods_get_a_decision_that_they_stay(tmp_path: Path) -> None:
    source = MODEL + "\n\nclass Model:\n    @jax.jit\n    def apply(self, x: Batch):\n"
    source += "        return x\n"
    decision = decide_one(source, config_for(tmp_path), FakePlugin(), name="Model.apply")
    assert decision.outcome is Outcome.STAYS
    assert (decision.rule, decision.reason) == ("jax-scope", "method functions stay")
    assert decision.signature == "Model.apply(x: float32[B,4])"


def test_a_failing_plugin_check_is_recorded_not_raised(tmp_path: Path) -> None:
    class Broken(FakePlugin):
        def check(
            self, function: FunctionInfo, module: ModuleInfo, settings: Mapping[str, Any]
        ) -> Sequence[Check]:
            raise RuntimeError("boom")

    decision = decide_one(MODEL, config_for(tmp_path), Broken())
    assert decision.rule == "jax.check"
    assert decision.reason == "the jax plugin's check failed: RuntimeError('boom')"


def test_not_a_candidate_and_decide_module(tmp_path: Path) -> None:
    source = MODEL + "\n\ndef helper(x):\n    return x\n"
    module = discover_source(source, module="model", path="model.ppy")
    plugin = FakePlugin()
    plugins = {"jax.jit": plugin}
    helper = next(f for f in module.functions if f.qualname == "helper")
    assert stageable_decorator(helper, plugins) is None
    assert decide(helper, module, config_for(tmp_path), plugins, GRANTED) is None
    decisions = decide_module(module, config_for(tmp_path), plugins, GRANTED)
    assert [d.qualname for d in decisions] == ["score"]
    broken = discover_source("def f(:\n", module="model", path="model.ppy")
    assert decide_module(broken, config_for(tmp_path), plugins, GRANTED) == []


def test_stageable_decorator_prefers_installed_plugins_then_known() -> None:
    source = "import shout\nimport jax\n\n@shout.loud\n@jax.jit\ndef f(x):\n    return x\n"
    module = discover_source(source, module="m", path="m.ppy")
    shout = FakePlugin(name="shout", decorators=frozenset({"shout.loud"}))
    assert stageable_decorator(module.functions[0], {"shout.loud": shout}) == "shout.loud"
    assert stageable_decorator(module.functions[0], {}) == "jax.jit"


@pytest.mark.parametrize("rule", sorted(RULES))
def test_every_rule_is_documented(rule: str) -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "policy.md").read_text()
    assert f"`{rule}`" in docs


@pytest.mark.parametrize(
    ("parameters", "remedy"),
    [
        ("params: dict", "describe the pytree params as Annotated[Any, ppy.Like(example)]"),
        ("params: Any", "describe the pytree params as Annotated[Any, ppy.Like(example)]"),
        ("training: bool", "training is a Python value: name it in static_argnames"),
        ("x: jax.Array", "annotate x as Annotated[jax.Array, ppy.Shape(...), ppy.DType(...)]"),
    ],
)
def test_a_remedy_fits_what_the_parameter_is(tmp_path: Path, parameters: str, remedy: str) -> None:
    source = MODEL + f"\nfrom typing import Any\n@jax.jit\ndef step({parameters}):\n    pass\n"
    decision = decide_one(source, config_for(tmp_path), FakePlugin(), name="step")
    assert decision.rule == "missing-shape"
    assert decision.remedy is not None and decision.remedy.startswith(remedy), decision.remedy
    if "jax.Array" not in parameters:  # never: annotate a pytree or a flag as an array
        assert "Annotated[jax.Array" not in decision.remedy


def test_a_static_flag_needs_no_description(tmp_path: Path) -> None:
    source = MODEL + (
        "\nimport functools\n"
        '@functools.partial(jax.jit, static_argnames=("training",))\n'
        "def step(x: Batch, training: bool):\n    pass\n"
    )
    decision = decide_one(source, config_for(tmp_path), FakePlugin(), name="step")
    assert decision.rule == "allowed", decision.reason
