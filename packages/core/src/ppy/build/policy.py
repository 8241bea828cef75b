"""The policy engine: may a candidate function be staged, and if not, why not.

Policy is a pure function of the configuration, the plugin's declared
requirements and what discovery read from the source, so ``ppy build`` and
``ppy explain`` give the same answer without importing the project. Every rule
is evaluated, passed or not, into the decision's trail: a user who is missing
two settings learns both from one build, not one per build. The rule that
decides is the first that fails, in the order of ``RULES``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Any, Final

from ppy.annotations import format_like_axes
from ppy.config import Config, remedy_for
from ppy.decision import Check, Decision, Outcome
from ppy.discovery.records import ArraySpec, FunctionInfo, ModuleInfo, Parameter
from ppy.plugin import KNOWN_DECORATORS, Plugin
from ppy.record.generalise import Described
from ppy.spec import TensorSpec, format_signature

__all__ = ["RULES", "decide", "decide_module", "signature", "stageable_decorator"]

#: Rule id -> what it checks, in the order rules decide. A plugin's own rules
#: (``Plugin.check``) come after these, under the ids the plugin gives them.
RULES: Final[Mapping[str, str]] = {
    "library-jit": "the function is jitted by jax.jit, not by a model library's own jit "
    "(eqx.filter_jit, nnx.jit), which splits its arguments at each call",
    "no-plugin": "a plugin that stages the decorator is installed",
    "build-execution": (
        'the project allows running its code at build time ([tool.ppy] build-execution = "allow")'
    ),
    "plugin-permission": (
        "the plugin's own permission is granted in [tool.ppy.plugins.<name>] (e.g. "
        "allow-build-export = true)"
    ),
    "package-init": "the function is not in a package's __init__.ppy, which import never runs",
    "redefined": "the function's name is bound once at module level",
    "invalid-spec": "every description on a parameter (ppy.Shape, ppy.DType, ppy.Like, a "
    "jaxtyping annotation) is valid and literal",
    "missing-shape": "every traced parameter is described: an array's dims, a pytree's "
    "example or class",
    "missing-dtype": "every array parameter has an element type",
    "differentiated": "the function is differentiated only by transforms the plugin serves "
    "with a staged VJP",
    "allowed": "every rule passed: the plugin may stage the function",
}

_NOUNS: Final[Mapping[str, str]] = {"exported": "export", "compiled": "compilation"}

#: Model libraries' own jits: never staged, always listed, with the jax.jit
#: pattern that stages the same computation. Decorator -> (what it does, remedy).
LIBRARY_JITS: Final[Mapping[str, tuple[str, str]]] = {
    "equinox.filter_jit": (
        "@eqx.filter_jit splits its arguments into arrays and static Python values at "
        "each call, and a fixed export cannot hold the static part",
        "stage the array part with jax.jit: params, static = eqx.partition(model, "
        "eqx.is_array) once; a @jax.jit function of params, described as "
        "Annotated[Any, ppy.Like(example)], that calls eqx.combine(params, static)",
    ),
    "flax.nnx.jit": (
        "@nnx.jit splits its Module arguments into a graph and a state at each call, and "
        "a fixed export cannot hold the graph",
        "stage the state with jax.jit: graphdef, state = nnx.split(model) once; a "
        "@jax.jit function of state, described as Annotated[Any, ppy.Like(example)], "
        "that calls nnx.merge(graphdef, state)",
    ),
}


def stageable_decorator(function: FunctionInfo, plugins: Mapping[str, Plugin]) -> str | None:
    """The first decorator an installed plugin stages, or that core knows, else None."""
    for decorator in function.decorators:
        name = decorator.name
        if name in plugins or name in KNOWN_DECORATORS or name in LIBRARY_JITS:
            return name
    return None


def _stays(decorator: str) -> str:
    """What the function stays, in the user's words: ``an ordinary jitted call``."""
    return "an ordinary jitted call" if decorator.endswith(".jit") else "the ordinary call"


def _positional(function: FunctionInfo) -> list[Parameter]:
    """The inputs a staged call receives, by position or keyword; a method's
    receiver is not one of them."""
    parameters = [p for p in function.parameters if p.kind in ("positional", "keyword_only")]
    if function.scope == "method" and parameters and parameters[0].name in ("self", "cls"):
        parameters = parameters[1:]
    return parameters


def _traced(function: FunctionInfo) -> list[Parameter]:
    """The inputs the trace sees as values: the static ones are not among them."""
    static = function.static
    return [p for p in _positional(function) if p.name not in static]


_ARRAY_ANNOTATIONS: Final = frozenset({"jax.Array", "jnp.ndarray", "np.ndarray", "Array"})
_VALUE_ANNOTATIONS: Final = frozenset({"bool", "int", "float", "str", "complex"})


def _remedies(missing: Sequence[Parameter]) -> str:
    """How to describe ``missing``: one line for all the unannotated ones (a
    recording describes them all at once), each annotation's own otherwise;
    what a recording could not describe, by what does."""
    unrecorded = [p for p in missing if p.unrecorded is not None]
    bare = [
        p
        for p in missing
        if not (p.annotation or "").strip() and p.spec.dtype is None and p not in unrecorded
    ]
    others = [
        f"{p.name}: {p.unrecorded}" if p in unrecorded else _describe_remedy(p)
        for p in missing
        if p not in bare
    ]
    if len(bare) > 1:
        names = ", ".join(p.name for p in bare)
        others.insert(
            0,
            "run `ppy record FILE` to describe them from a real run (docs/recording.md), or "
            f"annotate {names}: arrays as Annotated[jax.Array, ppy.Shape(...), "
            'ppy.DType(...)] or with jaxtyping (Float32[Array, "B 4"]), pytrees with '
            "ppy.Like(example)",
        )
    elif bare:
        others.insert(0, _describe_remedy(bare[0]))
    return "; ".join(others)


def _describe_remedy(parameter: Parameter) -> str:
    """How to describe one parameter, in the form its annotation suggests."""
    array = (
        f"annotate {parameter.name} as Annotated[jax.Array, ppy.Shape(...), ppy.DType(...)] "
        'or with jaxtyping (Float32[Array, "B 4"])'
    )
    tree = (
        f"describe the pytree {parameter.name} as Annotated[Any, ppy.Like(example)], with "
        "example a module-level function that builds one, or as a NamedTuple or dataclass "
        "whose fields are described"
    )
    annotation = (parameter.annotation or "").strip()
    spec = parameter.spec
    arrayish = annotation in _ARRAY_ANNOTATIONS or "Array" in annotation or "ndarray" in annotation
    if arrayish or spec.shape is not None or spec.dtype is not None:
        return array
    if annotation in _VALUE_ANNOTATIONS or annotation.startswith("Literal"):
        return (
            f"{parameter.name} is a Python value: name it in static_argnames and annotate it "
            "bool or Literal[...] so each value is staged"
        )
    if not annotation:
        return (
            f"run `ppy record FILE` to describe it from a real run (docs/recording.md), or "
            f"{array}; or, if it is a pytree, {tree.removeprefix('describe the pytree ')}"
        )
    return tree


def _names(parameters: Sequence[Parameter]) -> str:
    return ", ".join(repr(p.name) for p in parameters)


def _written(spec: ArraySpec, marker: str) -> bool:
    """Whether the marker is on the annotation but invalid (invalid-spec reports it)."""
    return any(f": {marker}" in problem for problem in spec.problems)


def _render(parameter: Parameter) -> str:
    spec = parameter.spec
    if parameter.like is not None:
        if parameter.like_axes:
            axes = format_like_axes(parameter.like_axes)
            return f"{parameter.name}: Like({parameter.like}, axes={axes})"
        return f"{parameter.name}: Like({parameter.like})"
    if parameter.nest is not None:
        return f"{parameter.name}: {Described(nest=json.loads(parameter.nest)).rendered()}"
    if parameter.tree is not None:
        return f"{parameter.name}: {parameter.tree}"
    written = parameter.annotation or "?"
    undescribed = spec.shape is None and spec.dtype is None
    if (undescribed and (not spec.problems or "Literal[" in written)) or (
        spec.weak and parameter.annotation is not None  # ``step: int``, as written
    ):
        return f"{parameter.name}: {written}"
    dims = spec.shape if spec.shape is not None else ("?",)
    tensor = TensorSpec(tuple(dims), spec.dtype or "?", parameter.name, weak=spec.weak)
    return f"{tensor.name}: {tensor}"


def signature(function: FunctionInfo) -> str:
    """``score(x: float32[B,4])``; what discovery cannot tell is shown as ``?``;
    ``[recorded: 12 calls in 2 runs]`` after it where a recording described it."""
    written = _signature(function)
    return f"{written} [{function.recorded}]" if function.recorded else written


def _signature(function: FunctionInfo) -> str:
    parameters = _positional(function)
    arrays = all(
        p.spec.shape is not None and p.spec.dtype is not None and not p.spec.weak
        for p in parameters
    )
    if arrays and not function.static:
        inputs = [
            TensorSpec(tuple(p.spec.shape or ()), p.spec.dtype or "?", p.name) for p in parameters
        ]
        return format_signature(function.qualname, inputs)
    return f"{function.qualname}({', '.join(_render(p) for p in parameters)})"


def _permission_checks(
    function: FunctionInfo,
    decorator: str,
    plugin: Plugin,
    config: Config,
    settings: Mapping[str, Any],
) -> list[Check]:
    requirements = plugin.requirements
    staging = f"build-time {_NOUNS.get(plugin.verb, 'staging')}"
    stays = f"stays {_stays(decorator)}: {staging} is off because"
    key = requirements.permission
    table = f"tool.ppy.plugins.{plugin.name}"
    permitted = key is None or settings.get(key) is True
    checks: list[Check] = []
    if not requirements.build_execution:
        checks.append(Check("build-execution", True, f"{plugin.name} runs no project code"))
    elif config.build_execution:
        checks.append(Check("build-execution", True, '[tool.ppy] build-execution is "allow"'))
    else:
        # The rule that decides names the plugin's permission too where it is
        # missing as well: one build says every setting to add.
        missing = f'{stays} [tool.ppy] build-execution is not "allow"'
        also: tuple[tuple[str, str], ...] = ()
        if not permitted:
            missing += f" and [{table}] {key} is not true"
            also = ((table, f"{key} = true"),)
        checks.append(
            Check(
                "build-execution",
                False,
                missing,
                remedy_for(config, table="tool.ppy", line='build-execution = "allow"', also=also),
            )
        )
    if key is None:
        checks.append(Check("plugin-permission", True, f"{plugin.name} needs no permission"))
    elif permitted:
        checks.append(Check("plugin-permission", True, f"[{table}] {key} is true"))
    else:
        checks.append(
            Check(
                "plugin-permission",
                False,
                f"{stays} [{table}] {key} is not true",
                remedy_for(config, table=table, line=f"{key} = true"),
            )
        )
    return checks


def _spec_checks(function: FunctionInfo, plugin: Plugin) -> list[Check]:
    if not plugin.requirements.array_specs:
        reason = f"{plugin.name} does not need ppy.Shape and ppy.DType"
        return [
            Check(rule, True, reason) for rule in ("invalid-spec", "missing-shape", "missing-dtype")
        ]
    parameters = _traced(function)
    problems = [problem for p in function.parameters for problem in p.spec.problems]
    checks = [
        Check("invalid-spec", False, "; ".join(problems), "fix the annotation as the message says")
        if problems
        else Check("invalid-spec", True, "every description is valid")
    ]
    arrays = [p for p in parameters if p.like is None and p.tree is None and p.nest is None]
    for rule, marker, attribute, what, candidates in (
        ("missing-shape", "ppy.Shape", "shape", "dims", arrays),
        ("missing-dtype", "ppy.DType", "dtype", "element type", arrays),
    ):
        missing = [
            p
            for p in candidates
            if getattr(p.spec, attribute) is None and not _written(p.spec, marker)
        ]
        if not missing:
            checks.append(Check(rule, True, f"every traced parameter has its {what}"))
            continue
        noun = "parameter" if len(missing) == 1 else "parameters"
        verb = "is" if len(missing) == 1 else "are"
        undescribed = rule == "missing-shape" and any(p.spec.dtype is None for p in missing)
        has = "has" if len(missing) == 1 else "have"
        detail = (
            f"{noun} {_names(missing)} {verb} not described; the trace needs each input's {what}"
            if undescribed
            else f"{noun} {_names(missing)} {has} no {marker}; the trace needs each input's {what}"
        )
        unrecorded = [p for p in missing if p.unrecorded is not None]
        if unrecorded:
            detail += f"; the recording could not describe {_names(unrecorded)}"
        remedy = _remedies(missing)
        checks.append(Check(rule, False, detail, remedy))
    return checks


def _package_check(function: FunctionInfo) -> Check:
    """``import pkg`` finds the folder before ppy's hook looks for ``.ppy``
    files: python makes it a namespace package, and ``__init__.ppy`` never
    runs, under python as under ``ppy run``."""
    path = PurePath(function.path)
    if path.name != "__init__.ppy":
        return Check("package-init", True, f"{path.name} is a module import runs")
    return Check(
        "package-init",
        False,
        f"{function.path} is never run by import {function.module}: python takes the folder "
        "for a namespace package before ppy's hook looks for .ppy files, so the function "
        "does not exist in the program",
        f"move it into a module of the package ({path.parent.as_posix()}/model.ppy), "
        "or rename the file __init__.py",
    )


def _redefinition_check(function: FunctionInfo) -> Check:
    if not function.rebound:
        return Check("redefined", True, f"{function.name} is bound once at module level")
    # Every line that binds the name, in the order the file has them: this
    # definition may be any of them.
    lines = [f"{function.path}:{line}" for line in sorted({function.lineno, *function.rebound})]
    listed = f"{', '.join(lines[:-1])} and {lines[-1]}"
    which = "neither" if len(lines) == 2 else "none"
    return Check(
        "redefined",
        False,
        f"{function.name} is bound {len(lines)} times at module level, at {listed}; which "
        f"definition a call reaches depends on when it is made, so {which} is staged",
        "give each definition a name of its own",
    )


def _differentiation_check(function: FunctionInfo, plugin: Plugin, decorator: str) -> Check:
    why = plugin.requirements.differentiation
    found = function.differentiated
    if why is None:
        return Check("differentiated", True, f"{plugin.name} stages differentiated functions")
    if found is None:
        return Check("differentiated", True, "the module does not differentiate it")
    served = plugin.requirements.differentiable
    others = [t for t in found.transforms or (found.transform,) if t not in served]
    if not others:
        return Check(
            "differentiated",
            True,
            f"differentiated by {' and '.join(found.transforms)}: staged with its VJP",
        )
    if served:
        why = f"{why}; it is differentiated by {', '.join(others)}"
    how = f"handed to {found.transform} at {function.path}:{found.lineno}"
    if found.via:
        how += f" via {' -> '.join(found.via)}"
    return Check(
        "differentiated",
        False,
        f"{function.qualname} is differentiated ({how}); {why}",
        f"nothing to do: it stays {_stays(decorator)}, which {found.transform} can differentiate",
    )


def _plugin_checks(
    function: FunctionInfo, module: ModuleInfo, plugin: Plugin, settings: Mapping[str, Any]
) -> list[Check]:
    try:
        return list(plugin.check(function, module, settings))
    except Exception as error:  # a plugin's bug decides this function, not the build
        return [
            Check(
                f"{plugin.name}.check",
                False,
                f"the {plugin.name} plugin's check failed: {error!r}",
                f"report it to the {plugin.name} plugin's authors",
            )
        ]


def decide(
    function: FunctionInfo,
    module: ModuleInfo,
    config: Config,
    plugins: Mapping[str, Plugin],
    settings: Mapping[str, Mapping[str, Any]],
) -> Decision | None:
    """The decision for one function, or None when no plugin stages its decorators.

    ``plugins`` maps decorator names to the plugin that stages them;
    ``settings`` holds each plugin's validated table, by plugin name.
    """
    decorator = stageable_decorator(function, plugins)
    if decorator is None:
        return None
    plugin = plugins.get(decorator)
    if decorator in LIBRARY_JITS and plugin is None:
        why, pattern = LIBRARY_JITS[decorator]
        trail: tuple[Check, ...] = (
            Check("library-jit", False, f"stays an ordinary call: {why}", pattern),
        )
        name, kind = "jax", None
    elif plugin is None:  # a decorator core knows, whose plugin is not installed
        name, distribution = KNOWN_DECORATORS[decorator]
        trail = (
            Check(
                "no-plugin",
                False,
                f"stays {_stays(decorator)}: no {name} export plugin is installed "
                f"(pip install {distribution})",
                f"pip install {distribution}",
            ),
        )
        kind = None
    else:
        name = plugin.name
        kind = plugin.kind
        own = settings.get(plugin.name, {})
        trail = (
            Check("no-plugin", True, f"@{decorator} is staged by the {plugin.name} plugin"),
            *_permission_checks(function, decorator, plugin, config, own),
            _package_check(function),
            _redefinition_check(function),
            *_spec_checks(function, plugin),
            _differentiation_check(function, plugin, decorator),
            *_plugin_checks(function, module, plugin, own),
        )
    failed = next((check for check in trail if not check.passed), None)
    remedy: str | None
    if failed is None:
        outcome, rule, reason, remedy = (
            Outcome.ALLOWED,
            "allowed",
            f"every rule passed; the {name} plugin stages it as {kind}",
            None,
        )
    else:
        outcome, rule, reason, remedy = Outcome.STAYS, failed.rule, failed.detail, failed.remedy
    return Decision(
        module=function.module,
        qualname=function.qualname,
        location=function.location,
        outcome=outcome,
        rule=rule,
        reason=reason,
        remedy=remedy,
        plugin=name,
        kind=kind,
        signature=signature(function),
        trail=trail,
    )


def decide_module(
    module: ModuleInfo,
    config: Config,
    plugins: Mapping[str, Plugin],
    settings: Mapping[str, Mapping[str, Any]],
) -> list[Decision]:
    """Decisions for every candidate of a module, in discovery's order."""
    if module.syntax_error:
        return []
    decisions = []
    for function in module.functions:
        decision = decide(function, module, config, plugins, settings)
        if decision is not None:
            decisions.append(decision)
    return decisions
