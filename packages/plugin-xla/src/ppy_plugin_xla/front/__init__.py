"""Pass 1: a function's AST to the typed scalar IR (``ir.Function``).

``trace`` reads one ``@xla.jit`` function with the module's scope and writes
its IR, callees inlined, or raises ``CompileError`` naming the first
construct outside the language, or the first type error, by line. The
modules, one job each: ``frame`` (the state of a body: locals, predicates,
flags), ``arith`` (Python's typing of operators), ``expressions``,
``calls``, ``statements``, ``loops`` (each a table from AST node to the
function that lowers it), ``emit`` (where the IR is written).
"""

from __future__ import annotations

from ppy_plugin_xla.front.function import Traced, trace

__all__ = ["Traced", "trace"]
