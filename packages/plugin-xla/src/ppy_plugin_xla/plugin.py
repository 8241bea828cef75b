"""The ``xla`` plugin: ``@xla.jit`` scalar functions compiled to StableHLO from source.

It reads the module's AST and writes StableHLO text itself: no import of jax,
no trace, no execution of project code, so it needs no build-execution
permission. ``check`` compiles the function (pure and fast) and reports the
first unsupported construct or type error with its file:line, then whether
staging pays for the call (``worth``); ``stage`` returns the module text
compiled then.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from ppy.kinds.xla_scalar import SCALAR_DTYPES, XlaScalar
from ppy.plugin import (
    Check,
    Entry,
    FunctionInfo,
    ModuleInfo,
    Plugin,
    Requirements,
    Setting,
    StageFailure,
    StageRequest,
    TensorSpec,
    validate_table,
)

from ppy_plugin_xla import __version__
from ppy_plugin_xla.errors import CompileError
from ppy_plugin_xla.lower import CompiledFunction, compile_function
from ppy_plugin_xla.scope import read_scope
from ppy_plugin_xla.worth import STAGED_CALL_US, Work, estimate

__all__ = ["DECORATOR", "XlaScalarPlugin", "compile_in_module"]

DECORATOR = "ppy.xla.jit"
#: The revision of the module text the compiler writes for the same source.
#: Part of the fingerprint, so that an artifact written by an earlier
#: compiler (one whose modules XLA could still rewrite) is compiled again.
EMITTER = 2
#: ``[tool.ppy.plugins.xla] force-staging = true`` stages functions that do
#: not pay for a staged call too.
FORCE = "force-staging"

SETTINGS: Mapping[str, Setting] = {
    FORCE: Setting(
        (bool,), False, "stage functions whose calls do too little work to pay for a staged call"
    ),
}


def _jit_names(module: ModuleInfo) -> set[str]:
    return {
        f.qualname
        for f in module.functions
        if f.scope == "module" and any(d.name == DECORATOR for d in f.decorators)
    }


@lru_cache(maxsize=256)
def _compile(source: str, names: frozenset[str], qualname: str) -> CompiledFunction | CompileError:
    try:
        scope = read_scope(source, set(names))
    except SyntaxError as error:
        return CompileError("xla-unsupported", f"the module does not parse: {error}", 0)
    if qualname not in scope.functions:
        return CompileError(
            "xla-unsupported",
            f"{qualname} is not a module-level function bound once",
            0,
            "define @xla.jit functions at module level, once",
        )
    try:
        return compile_function(scope, qualname)
    except CompileError as error:
        return error
    except RecursionError:
        return CompileError("xla-unsupported", "the function nests too deeply to compile", 0)


def compile_in_module(module: ModuleInfo, qualname: str) -> CompiledFunction | CompileError:
    """Compile one function of ``module``; memoised on the source text."""
    return _compile(module.source, frozenset(_jit_names(module)), qualname)


@lru_cache(maxsize=256)
def _work(source: str, names: frozenset[str], qualname: str) -> Work:
    return estimate(read_scope(source, set(names)), qualname)


def work_in_module(module: ModuleInfo, qualname: str) -> Work:
    """What one call of a function of ``module`` that compiles does."""
    return _work(module.source, frozenset(_jit_names(module)), qualname)


class XlaScalarPlugin:
    name = "xla"
    kind = XlaScalar.KIND
    verb = "compiled"
    #: The ``ppy.plugin.CONTRACT`` it was written for.
    contract = (1, 0)
    decorators = frozenset({DECORATOR})
    requirements = Requirements(build_execution=False)
    version = __version__

    def validate_settings(self, table: Mapping[str, Any], path: str) -> Mapping[str, Any]:
        return validate_table(table, SETTINGS, path=path, prefix="tool.ppy.plugins.xla")

    def fingerprint(self, settings: Mapping[str, Any]) -> str:
        return (
            f"ppy-plugin-xla {__version__} emitter {EMITTER} convention {XlaScalar.CONVENTION} "
            f"{FORCE} {bool(settings.get(FORCE))}"
        )

    def check(
        self, function: FunctionInfo, module: ModuleInfo, settings: Mapping[str, Any]
    ) -> Sequence[Check]:
        if function.scope != "module":
            return [
                Check(
                    "xla-unsupported",
                    False,
                    f"{function.location}: @xla.jit on a {function.scope} function",
                    "define it at module level",
                )
            ]
        others = [d for d in function.decorators if d.name != DECORATOR]
        if others:
            # The compiled module is the body alone: whatever another decorator
            # does to the function (call it twice, cache it, time it) would be lost.
            return [
                Check(
                    "xla-unsupported",
                    False,
                    f"{function.path}:{others[0].lineno}: the decorator @{others[0].name} "
                    "besides @xla.jit",
                    "remove the other decorator, or @xla.jit; the function stays Python as it is",
                )
            ]
        result = compile_in_module(module, function.qualname)
        if isinstance(result, CompileError):
            line = result.lineno or function.lineno
            return [
                Check(
                    result.rule, False, f"{function.path}:{line}: {result.message}", result.remedy
                )
            ]
        compiles = Check(
            "xla-compilable",
            True,
            "compiles to StableHLO from the source alone; needs no build-time execution",
        )
        return [compiles, _worth(function, work_in_module(module, function.qualname), settings)]

    def stage(self, request: StageRequest) -> Sequence[Entry | StageFailure]:
        results: list[Entry | StageFailure] = []
        for target in request.targets:
            for function in target.functions:
                compiled = compile_in_module(target.module, function.qualname)
                if isinstance(compiled, CompileError):
                    line = compiled.lineno or function.lineno
                    results.append(
                        StageFailure(
                            target.module.name,
                            function.qualname,
                            compiled.rule,
                            f"{function.path}:{line}: {compiled.message}",
                            compiled.remedy,
                        )
                    )
                    continue
                results.append(entry_for(target.module.name, compiled))
        return results


def _worth(function: FunctionInfo, work: Work, settings: Mapping[str, Any]) -> Check:
    if settings.get(FORCE):
        return Check("not-worth-staging", True, f"staged whatever it does ({FORCE} = true)")
    if work.pays:
        found = "a loop of a trip count no literal fixes" if work.unbounded else work.describe()
        return Check("not-worth-staging", True, f"{found}: one call does enough work to pay")
    return Check(
        "not-worth-staging",
        False,
        f"{function.qualname}() {work.describe()}: a staged call costs about {STAGED_CALL_US} µs "
        "(a PJRT dispatch, measured), far more than its Python body; it stays Python",
        f"set [tool.ppy.plugins.xla] {FORCE} = true to stage it anyway",
    )


def entry_for(module: str, compiled: CompiledFunction) -> Entry:
    contract = XlaScalar(
        param_names=tuple(compiled.param_names),
        param_types=tuple(compiled.param_types),
        result_type=compiled.result_type,
        plugin_version=__version__,
        stablehlo=compiled.text.encode(),
        reads=compiled.reads,
    )
    inputs = tuple(
        TensorSpec((), SCALAR_DTYPES[t], name)
        for name, t in zip(contract.param_names, contract.param_types, strict=True)
    )
    outputs = (
        TensorSpec((), SCALAR_DTYPES[contract.result_type], "result"),
        TensorSpec((), "bool", "fallback"),
    )
    return Entry(
        module=module,
        qualname=compiled.qualname,
        kind=XlaScalar.KIND,
        inputs=inputs,
        outputs=outputs,
        platforms=("cpu",),
        payload=contract.to_payload(),
        metadata=contract.to_metadata(),
    )


#: It satisfies core's contract; mypy checks this line.
_: type[Plugin] = XlaScalarPlugin
