"""The jax export plugin: what core needs to decide and stage ``@jax.jit`` functions.

This module is imported by every ``ppy build`` and must stay light: it never
imports jax. The trace itself happens in a worker process (``worker.py``)
started by ``stage``; see ``supervisor.py``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any, Final

from ppy.kinds.fingerprint import DEFAULT_LIMIT
from ppy.kinds.jax_export import JaxExport
from ppy.plugin import AXIS_TYPES, Check, MeshSpec, Plugin, Requirements, Setting, validate_table

if TYPE_CHECKING:
    from ppy.plugin import (
        Entry,
        FunctionInfo,
        LiveRequest,
        ModuleInfo,
        StageFailure,
        StageRequest,
    )

__all__ = ["PLATFORMS", "SETTINGS", "JaxExportPlugin"]

PLATFORMS = ("cpu", "cuda", "rocm", "tpu")

#: The most devices a mesh may have, over all its axes: beyond any machine's
#: (2**20), far below what the export's arithmetic would overflow at.
MAX_DEVICES: Final = 1 << 20

SETTINGS: Mapping[str, Setting] = {
    "allow-build-export": Setting(
        (bool,), False, "let the build import project modules and trace them with jax.export"
    ),
    "platforms": Setting(
        (list,),
        None,
        f"platforms to export for, any of {', '.join(PLATFORMS)}; "
        "default: the build machine's default jax backend",
    ),
    "export-timeout": Setting(
        (float,),
        120.0,
        "seconds a module may take to import and export before it is stopped",
        bounds=(0.1, 86400, "seconds"),
    ),
    "verify-sizes": Setting(
        (bool, str),
        True,
        "keep unstaged an export whose trace compares a symbolic dim in a way jax decides "
        'without knowing the size (x.shape[0] == 5); "sample" also runs each export against '
        "the jitted function at several sizes (two compiles per size)",
        (True, False, "sample"),
    ),
    "constraints": Setting(
        (list,),
        None,
        "what the export may assume of symbolic dims, as jax.export's symbolic constraints "
        '(["F <= N", "B >= 2"]); each applies to the functions whose dims name all its '
        "symbols, and a call where it does not hold takes the original path",
    ),
    "staged-vjp": Setting(
        (bool,),
        False,
        "export a function the program differentiates with its VJP, so that jax.grad, "
        "jax.value_and_grad and jax.vjp of it are served without tracing its body; XLA "
        "compiles the export's VJP otherwise than jit's gradient, which can then differ in "
        "the last bits at some inputs (the build compares them on drawn ones only)",
    ),
    "captured-array-limit": Setting(
        (int,),
        DEFAULT_LIMIT,
        "bytes of the largest array a function may read from module globals and still be "
        "exported (it is baked into the artifact); pass larger ones as parameters",
        bounds=(0, 1 << 30, "bytes"),
    ),
    "mesh": Setting(
        (dict,),
        None,
        "the mesh that ppy.Sharding descriptions lay inputs out over: axis name = size, in "
        "order, such as { data = 4 } or { data = 2, model = 2 }",
    ),
    "mesh-axis-types": Setting(
        (str, dict),
        "explicit",
        f"the mesh axes' jax.sharding.AxisType, one of {', '.join(AXIS_TYPES)}: for every "
        "axis, or a table by axis name; jax.make_mesh's default is explicit",
    ),
    "export-memory-limit": Setting(
        (int,),
        8192,
        "megabytes of memory the export worker may allocate (RLIMIT_DATA); "
        "beyond it the user's code gets a MemoryError",
        bounds=(128, 1 << 30, "megabytes"),
    ),
}

_STATIC_KEYWORDS = ("static_argnums", "static_argnames")
_DONATE_KEYWORDS = ("donate_argnums", "donate_argnames")

#: Distributions whose versions change what an export holds: jax itself and the
#: backend plugins that change the default platform.
_TOOLS = (
    "jax",
    "jaxlib",
    "jax-cuda12-plugin",
    "jax-cuda12-pjrt",
    "jax-cuda13-plugin",
    "jax-cuda13-pjrt",
    "jax-rocm6-plugin",
    "jax-rocm6-pjrt",
    "jax-rocm7-plugin",
    "jax-rocm7-pjrt",
    "libtpu",
)


#: What the worker exports for the same source and settings, counted: an
#: artifact whose entries an earlier count wrote is staged again, not reused.
#: 2: the traced parameters in the signature's order (they were in
#: alphabetical order where a constraint or a mesh remade their dims).
#: 3: a function the program differentiates is exported with its VJP.
_EXPORTS: Final = 3


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "absent"


class JaxExportPlugin:
    name = "jax"
    kind = JaxExport.KIND
    verb = "exported"
    #: The ``ppy.plugin.CONTRACT`` it was written for.
    contract = (1, 2)
    decorators = frozenset({"jax.jit"})
    requirements = Requirements(
        build_execution=True,
        permission="allow-build-export",
        array_specs=True,
        differentiation=(
            "its export carries a VJP, which serves reverse mode only (jax.grad, "
            "jax.value_and_grad, jax.vjp, jax.jacrev)"
        ),
        # Every transform of ppy.discovery.differentiation: reverse mode is
        # served by the export's VJP where the pullback gets concrete
        # cotangents, and by the original's VJP where it is batched (jacrev)
        # or traced; forward modes, linearize and grad under them take the
        # original path at run time (ppy_runtime_pjrt.differentiated).
        differentiable=frozenset(
            f"jax.{name}"
            for name in (
                "grad",
                "value_and_grad",
                "vjp",
                "jacrev",
                "jvp",
                "jacfwd",
                "hessian",
                "linearize",
            )
        ),
    )

    def __init__(self) -> None:
        self.version = _version("ppy-plugin-jax")

    def validate_settings(self, table: Mapping[str, Any], path: str) -> Mapping[str, Any]:
        from ppy.plugin import ConfigError

        settings = validate_table(table, SETTINGS, path=path, prefix="tool.ppy.plugins.jax")
        platforms = settings["platforms"]
        if platforms is not None:
            bad = [p for p in platforms if p not in PLATFORMS]
            if bad or not platforms:
                raise ConfigError(
                    f"platforms {platforms!r} must be a non-empty list of {', '.join(PLATFORMS)}",
                    path=path,
                    key="tool.ppy.plugins.jax.platforms",
                    remedy='write platforms = ["cpu"], say, or remove it for the default backend',
                )
            settings["platforms"] = sorted(set(platforms), key=PLATFORMS.index)
        settings["mesh"] = _mesh(settings["mesh"], settings.pop("mesh-axis-types"), path)
        settings["constraints"] = _constraints(settings["constraints"], path)
        return settings

    def fingerprint(self, settings: Mapping[str, Any]) -> str:
        versions = ",".join(f"{t}={_version(t)}" for t in _TOOLS)
        platforms = settings.get("platforms")
        chosen = ",".join(platforms) if platforms else "default"
        mesh = settings.get("mesh")
        constraints = ",".join(settings.get("constraints") or ())
        return (
            f"ppy-plugin-jax={self.version},exports={_EXPORTS},{versions};platforms={chosen};"
            f"convention={JaxExport.CONVENTION};mesh={mesh.to_json() if mesh else None};"
            f"constraints={constraints}"
        )

    def check(
        self, function: FunctionInfo, module: ModuleInfo, settings: Mapping[str, Any]
    ) -> Sequence[Check]:
        return (
            _static_args(function),
            _parameter_kind(function),
            _scope(function),
            _outermost(function),
        )

    def stage(self, request: StageRequest) -> Sequence[Entry | StageFailure]:
        from ppy_plugin_jax.supervisor import export_in_worker

        return export_in_worker(request)

    def export_live(self, request: LiveRequest) -> Entry | StageFailure:
        """Export a function in the process that recorded it (``ppy_plugin_jax.live``)."""
        from ppy_plugin_jax.live import export_live

        return export_live(request)


def _mesh(axes: Mapping[str, Any] | None, types: Any, path: str) -> MeshSpec | None:
    """``mesh`` and ``mesh-axis-types`` as one ``MeshSpec``, or ConfigError saying what is wrong."""
    from ppy.plugin import ConfigError

    key = "tool.ppy.plugins.jax.mesh"
    if axes is None:
        if isinstance(types, Mapping):
            raise ConfigError(
                "mesh-axis-types names axes, but there is no mesh",
                path=path,
                key=f"{key}-axis-types",
                remedy="write mesh = { data = 4 }, say, or remove mesh-axis-types",
            )
        return None
    if not axes:
        raise ConfigError(
            "mesh has no axes",
            path=path,
            key=key,
            remedy="write mesh = { data = 4 }, say, or remove it",
        )
    for name, size in axes.items():
        if not name.isidentifier() or type(size) is not int or not 1 <= size <= MAX_DEVICES:
            raise ConfigError(
                f"axis {name!r} = {size!r}: an axis is a name and a number of devices "
                f"from 1 to {MAX_DEVICES}",
                path=path,
                key=key,
                remedy="write mesh = { data = 4 } or { data = 2, model = 2 }",
            )
    if math.prod(axes.values()) > MAX_DEVICES:
        raise ConfigError(
            f"mesh has {math.prod(axes.values())} devices in all, more than {MAX_DEVICES}",
            path=path,
            key=key,
            remedy="give the axes the sizes of the devices the program runs on",
        )
    by_axis = types if isinstance(types, Mapping) else dict.fromkeys(axes, types)
    unknown = sorted(set(by_axis) - set(axes))
    bad = sorted(str(t) for t in by_axis.values() if t not in AXIS_TYPES)
    if unknown or bad:
        what = f"names axes the mesh lacks: {', '.join(unknown)}" if unknown else ""
        what = what or f"gives {', '.join(bad)}, not one of {', '.join(AXIS_TYPES)}"
        raise ConfigError(
            f"mesh-axis-types {what}",
            path=path,
            key=f"{key}-axis-types",
            remedy=f'write mesh-axis-types = "explicit" (or one of {", ".join(AXIS_TYPES)})',
        )
    return MeshSpec(
        tuple(axes),
        tuple(axes.values()),
        tuple(by_axis.get(name, "explicit") for name in axes),
    )


#: A symbolic constraint as jax.export takes it: two dim expressions and a comparison.
_CONSTRAINT = re.compile(r"[\w\s+*()\-,]+(>=|<=|==)[\w\s+*()\-,]+", re.ASCII)


def _constraints(value: Any, path: str) -> list[str]:
    """``constraints`` as a list of ``e1 >= e2``, ``e1 <= e2`` or ``e1 == e2``
    (jax parses the expressions when it exports), or ConfigError."""
    from ppy.plugin import ConfigError

    if value is None:
        return []
    bad = [c for c in value if not isinstance(c, str) or not _CONSTRAINT.fullmatch(c)]
    if bad:
        raise ConfigError(
            f"constraints {bad[0]!r} is not a comparison of two dim expressions",
            path=path,
            key="tool.ppy.plugins.jax.constraints",
            remedy='write constraints = ["F <= N"], say: >=, <= or == between dim expressions',
        )
    return [" ".join(c.split()) for c in value]


def _static_args(function: FunctionInfo) -> Check:
    keywords = [k for d in function.decorators if d.name == "jax.jit" for k in d.keywords]
    donating = [d for d in function.decorators if d.name == "jax.jit" and d.donated]
    if [k for k in keywords if k in _DONATE_KEYWORDS] and not donating:
        return Check(
            "static-args",
            False,
            "donate_argnums or donate_argnames is not a literal the build can read",
            "write it as a literal, such as donate_argnums=0",
        )
    static = function.static
    written = [d for d in function.decorators if d.name == "jax.jit" and d.static]
    unread = [k for k in keywords if k in _STATIC_KEYWORDS] and not written
    if unread:
        return Check(
            "static-args",
            False,
            "static_argnums or static_argnames is not a literal the build can read",
            'write it as a literal, such as static_argnames=("training",)',
        )
    parameters = {p.name: p for p in function.parameters}
    unknown = sorted(name for name in static if name not in parameters)
    if unknown:
        return Check(
            "static-args",
            False,
            f"static argument {', '.join(map(repr, unknown))} is not a parameter of "
            f"{function.name}",
            "name parameters the function has",
        )
    open_ended = [parameters[name] for name in sorted(static) if parameters[name].choices is None]
    if open_ended:
        names = ", ".join(repr(p.name) for p in open_ended)
        return Check(
            "static-args",
            False,
            f"static argument {names} may take any value, and each value is its own trace",
            f"annotate {', '.join(p.name for p in open_ended)} as bool or Literal[...] with the "
            "values the program passes: each is exported, and any other value takes the "
            "original path",
        )
    variants = 1
    for name in static:
        variants *= max(1, len(parameters[name].choices or ()))
    if variants > JaxExport.MAX_VARIANTS:
        return Check(
            "static-args",
            False,
            f"its static arguments take {variants} combinations of values; ppy exports at most "
            f"{JaxExport.MAX_VARIANTS}",
            "narrow the Literal[...] annotations to the values the program passes",
        )
    if static:
        return Check(
            "static-args", True, f"static arguments are exported once per value ({variants})"
        )
    if function.donated:
        return Check("static-args", True, "donated arguments are donated by the staged call too")
    return Check("static-args", True, "no static or donated arguments")


def _parameter_kind(function: FunctionInfo) -> Check:
    odd = [p for p in function.parameters if p.kind in ("var_positional", "var_keyword")]
    if not odd:
        return Check("parameter-kind", True, "named parameters only")
    words = {"var_positional": "*args", "var_keyword": "**kwargs"}
    named = ", ".join(f"{p.name} ({words[p.kind]})" for p in odd)
    return Check(
        "parameter-kind",
        False,
        f"only named parameters can be described for export: {named}",
        "give each input a parameter of its own, described by its annotation",
    )


def _outermost(function: FunctionInfo) -> Check:
    """``@jax.jit`` under another decorator: the name holds that decorator's
    wrapper, and binding the staged function there would drop what the
    wrapper does around each call (count it, log it, cache it)."""
    outer = [d.name for d in function.decorators]
    if not outer or outer[0] == "jax.jit":
        return Check("decorated", True, "@jax.jit is the outermost decorator")
    if function.static_method and outer[1:2] == ["jax.jit"]:
        return Check("decorated", True, "@staticmethod hands on the jit under it as it is")
    return Check(
        "decorated",
        False,
        f"@{outer[0]} wraps the jitted function, so the name holds its wrapper, not the jit; "
        "a staged function in its place would drop what the wrapper does on each call",
        "put @jax.jit outermost, or decorate a staged function under another name "
        "(counted_f = counted(f))",
    )


#: Where a function of each scope is made, for its build line.
_MADE = {
    "nested": "inside a function",
    "main": 'under the if __name__ == "__main__" guard',
}


def _scope(function: FunctionInfo) -> Check:
    """A module-level function is bound under its name; one made inside a
    function or under the main guard where ``jax.jit`` makes it, rebuilt at
    build from its code (the worker refuses one that reads its enclosing
    function's variables); a method is called through an instance the build
    does not have, but for a static method, which its class hands on."""
    if function.scope == "module":
        return Check("scope", True, "module-level function")
    if function.static_method:
        return Check("scope", True, "a static method, reached through its class")
    if function.scope == "method":
        return Check(
            "scope",
            False,
            "a method is called through an instance, which the build does not have; only "
            "functions are exported",
            "move it to module level",
        )
    where = _MADE[function.scope]
    if function.made is not None and function.reads:
        owner = function.qualname.rpartition(".<locals>.")[0] or "the main guard"
        return Check(
            "scope",
            False,
            f"it is made by {function.made}, which reads {', '.join(function.reads)} of "
            f"{owner}: {'it exists' if len(function.reads) == 1 else 'they exist'} only "
            f"while {owner} runs",
            "record the program (`ppy record FILE`): the recorded run exports it",
        )
    if function.made is not None:
        return Check("scope", True, f"made by {function.made} {where}: staged each time it runs")
    defaulted = [p.name for p in function.parameters if p.has_default]
    if defaulted:
        return Check(
            "scope",
            False,
            f"it is defined {where}, where its defaults ({', '.join(defaulted)}) are computed "
            "each time that code runs",
            "drop the defaults and pass the values, or move the function to module level",
        )
    return Check("scope", True, f"defined {where}: staged each time jax.jit makes it")


#: It satisfies core's contract; mypy checks this line.
_: type[Plugin] = JaxExportPlugin
