"""From a function's AST to one StableHLO module, with CPython's semantics.

Two passes, as jax lowers a function: the front (``front/``) reads the AST
and writes the typed scalar IR (``ir.py``), where Python's control flow is
settled into predicated ops and loops with explicit state; the lowering
(``lowering/``) writes each op through the rule registered for it, with
CPython's arithmetic bit for bit. ``compile_function`` runs both.

The module's second result is the fallback flag. When it is set, CPython
would raise, or give a value outside what the module computes (an int beyond
int64, a subnormal float, a result of another type), and the runtime calls
the Python body instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ppy_plugin_xla.front import trace
from ppy_plugin_xla.lowering import lower
from ppy_plugin_xla.scope import ModuleScope

__all__ = ["CompiledFunction", "compile_function"]


@dataclass(frozen=True)
class CompiledFunction:
    qualname: str
    param_names: tuple[str, ...]
    param_types: tuple[str, ...]
    result_type: str
    #: The StableHLO module: @main(params...) -> (result, fallback flag).
    text: str
    #: The module-level names the body reads when it runs (``Traced.reads``).
    reads: dict[str, str] = field(default_factory=dict)


def compile_function(scope: ModuleScope, name: str) -> CompiledFunction:
    """The StableHLO module for the module-level ``@xla.jit`` function ``name``.

    Raises ``CompileError`` naming the first construct (by line) outside the
    language, or the first type error.
    """
    traced = trace(scope, name)
    function = traced.function
    return CompiledFunction(
        name,
        function.param_names,
        tuple(p.type for p in function.body.params),
        function.result.type,
        lower(function),
        traced.reads,
    )
