"""One ``@xla.jit`` function to IR: its parameters, its body, what it reads.

Importing this module imports every module that registers a lowering in the
tables of ``expressions`` and ``statements`` (calls, loops), so a trace
always has the whole language.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ppy_plugin_xla.errors import unsupported
from ppy_plugin_xla.front import calls, loops
from ppy_plugin_xla.front.emit import Emitter
from ppy_plugin_xla.front.frame import Frame, Shared, annotation
from ppy_plugin_xla.ir import Block, Function, Var
from ppy_plugin_xla.scope import ModuleScope

__all__ = ["Traced", "trace"]

#: The modules that register lowerings, imported for that.
_REGISTERING = (calls, loops)


@dataclass(frozen=True)
class Traced:
    """A function's IR, and the module-level names its body reads when it runs
    (``metadata.reads``: name -> what the build compiled it as)."""

    function: Function
    reads: dict[str, str]


def trace(scope: ModuleScope, name: str) -> Traced:
    """The IR of the module-level ``@xla.jit`` function ``name``.

    Raises ``CompileError`` naming the first construct (by line) outside the
    language, or the first type error.
    """
    node = scope.functions[name]
    for decorator in node.decorator_list:
        text = ast.unparse(decorator)
        if text.rpartition(".")[2] != "jit":
            raise unsupported(decorator, f"the decorator @{text} besides @xla.jit")
    params = calls.parameters(node)
    annotation(node.returns, node, f"the return of {name}()")
    emit = Emitter()
    shared = Shared(emit, scope, [name])
    values = [Var(kind) for _, kind in params]
    args = {p: value for (p, _), value in zip(params, values, strict=True)}
    result, err = calls.run(Frame(shared, node, args, emit.true(), emit.false()))
    body = Block(tuple(values), tuple(emit.stmts), (result, err))
    function = Function(name, tuple(p for p, _ in params), body)
    return Traced(function, dict(sorted(shared.reads.items())))
