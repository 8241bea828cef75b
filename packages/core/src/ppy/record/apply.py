"""Recorded descriptions into discovery's records, for the build to decide on.

A parameter the source does not describe takes its recorded description: an
array's dims and dtype, or a static parameter's recorded values. Where the
source describes a parameter, the annotation wins, and a recording that
disagrees with it (another dtype, another fixed dim) is reported. Every rule
that decides a described function then decides this one unchanged: the
recording only stands in for the annotation.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence

from ppy.discovery.records import ArraySpec, FunctionInfo, ModuleInfo, Parameter
from ppy.record.format import Signatures
from ppy.record.generalise import Described, generalise

__all__ = ["apply_recording", "unknown_functions"]


def apply_recording(module: ModuleInfo, signatures: Signatures | None) -> ModuleInfo:
    """``module`` with each function's undescribed parameters described as recorded."""
    if signatures is None or module.syntax_error:
        return module
    functions = []
    changed = False
    for function in module.functions:
        calls = signatures.for_function(module.name, function.qualname)
        if calls is None or (function.scope == "method" and not function.static_method):
            functions.append(function)
            continue
        general = generalise(calls.signatures())
        runs = signatures.runs
        served = f"{general.calls} of " if general.calls < calls.calls else ""
        note = f"recorded: {served}{calls.calls} call{'s' if calls.calls != 1 else ''}"
        note += f" in {runs} run{'s' if runs != 1 else ''}"
        parameters = tuple(
            _described(module, function, p, general.parameters.get(p.name))
            for p in function.parameters
        )
        held = json.dumps(general.closure, sort_keys=True) if general.closure is not None else None
        sizes = json.dumps(list(general.sizes)) if general.sizes else None
        gradients = json.dumps(calls.gradient_calls()) if calls.gradients else None
        functions.append(
            dataclasses.replace(
                function,
                parameters=parameters,
                recorded=note,
                closure=held,
                sizes=sizes,
                gradients=gradients,
            )
        )
        changed = True
    return dataclasses.replace(module, functions=tuple(functions)) if changed else module


def _described(
    module: ModuleInfo, function: FunctionInfo, parameter: Parameter, recorded: Described | None
) -> Parameter:
    if recorded is None:
        return parameter
    if parameter.tree is not None and recorded.nest is not None and not _fields(module, parameter):
        # ``params: Params`` names the class; its fields say nothing of their dims.
        return dataclasses.replace(parameter, tree=None, nest=json.dumps(recorded.nest))
    if parameter.name in function.static:
        if parameter.choices is None and recorded.choices is not None:
            return dataclasses.replace(parameter, choices=recorded.choices)
        return parameter
    written = parameter.spec.shape is not None or parameter.spec.dtype is not None
    if recorded.nest is not None and not (
        parameter.described or written or parameter.spec.problems
    ):
        return dataclasses.replace(parameter, nest=json.dumps(recorded.nest))
    if recorded.dims is None or recorded.dtype is None:
        if recorded.why_not is not None and not parameter.described:
            return dataclasses.replace(parameter, unrecorded=recorded.why_not)
        return parameter
    if parameter.described or parameter.spec.problems:
        _disagreement(function, parameter, recorded)
        return parameter
    if parameter.spec.shape is not None or parameter.spec.dtype is not None:
        return parameter  # half described: the annotation's own remedy says what is missing
    spec = ArraySpec(
        recorded.dims, recorded.dtype, recorded=True, weak=recorded.weak, weakly=recorded.weakly
    )
    return dataclasses.replace(parameter, spec=spec)


def _fields(module: ModuleInfo, parameter: Parameter) -> bool:
    """Whether the class a parameter is annotated with describes every field."""
    info = module.classes.get(str(parameter.tree))
    return (
        info is not None
        and info.form is not None
        and all(f.described or f.has_default for f in info.fields)
    )


def _disagreement(function: FunctionInfo, parameter: Parameter, recorded: Described) -> None:
    """Log where the annotation and the recording say different things."""
    spec = parameter.spec
    if spec.shape is None or spec.dtype is None or recorded.dims is None:
        return
    fixed_differ = len(spec.shape) != len(recorded.dims) or any(
        isinstance(a, int) and isinstance(r, int) and a != r
        for a, r in zip(spec.shape, recorded.dims, strict=False)
    )
    if spec.dtype == recorded.dtype and not fixed_differ:
        return
    from ppy.log import get_logger

    get_logger().warning(
        "build.recording_disagrees",
        module=function.module,
        function=function.qualname,
        parameter=parameter.name,
        annotated=f"{spec.dtype}[{','.join(str(d) for d in spec.shape)}]",
        recorded=recorded.rendered(),
        remedy="the annotation is used; fix it, or record again with `ppy record --replace`",
    )


def unknown_functions(
    signatures: Signatures | None, modules: Sequence[ModuleInfo]
) -> Iterator[str]:
    """The recorded functions that no module defines any more."""
    if signatures is None:
        return
    defined = {f"{m.name}.{f.qualname}" for m in modules for f in m.functions}
    yield from sorted(name for name in signatures.functions if name not in defined)
