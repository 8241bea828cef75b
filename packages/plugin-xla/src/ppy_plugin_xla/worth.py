"""Whether staging a compiled function pays for its call.

A staged call is a PJRT dispatch: the arguments go to the device, the
executable runs on XLA's CPU runtime, the result comes back. That costs
``STAGED_CALL_US`` however little the function does, while CPython runs a
few arithmetic operations in well under a microsecond. So a function pays
for staging only when one call does enough work: when it loops. A loop whose
trip count is not a literal (``while``, ``range(n)``) can run any number of
times and is taken to pay; loops of literal ranges (``range(8)``) are
counted, nested ones multiplied, and pay only from ``MIN_ITERATIONS`` on.
Calls of other ``@xla.jit`` functions are compiled inline, so their loops
count too.

This is an estimate from the source alone, like the rest of the plugin: it
never runs the function. ``force-staging`` stages every function that
compiles.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ppy_plugin_xla.scope import ModuleScope

__all__ = ["MIN_ITERATIONS", "STAGED_CALL_US", "Work", "estimate"]

#: The per-call cost of a staged call of a trivial function, in µs, on a
#: 2-core x86 machine: 20-23 µs measured in one process (docs/plugin-xla.md,
#: "Speed"); the benchmark runner's full run, on a slower day, 29 µs.
STAGED_CALL_US = 20
#: Loop iterations, in all, from which a function of literal loops pays: a
#: loop iteration of CPython costs tens of ns, a staged call ``STAGED_CALL_US``.
MIN_ITERATIONS = 1000


@dataclass(frozen=True)
class Work:
    """What one call of a function does, as far as the source says."""

    #: Whether some loop runs a number of times no literal fixes.
    unbounded: bool
    #: Iterations of the literal loops, nested ones multiplied.
    iterations: int

    @property
    def pays(self) -> bool:
        return self.unbounded or self.iterations >= MIN_ITERATIONS

    def describe(self) -> str:
        if self.iterations == 0:
            return "has no loop"
        return f"loops only over literal ranges ({self.iterations} iterations in all)"


def _literal_int(node: ast.expr) -> int | None:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _literal_int(node.operand)
        return None if inner is None else -inner
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _trip_count(loop: ast.For) -> int | None:
    """``len(range(...))`` for a ``for`` over a range of literals, else None."""
    call = loop.iter
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
        return None
    bounds = [_literal_int(arg) for arg in call.args]
    if call.keywords or not 1 <= len(bounds) <= 3 or any(b is None for b in bounds):
        return None
    try:
        return len(range(*bounds))  # type: ignore[arg-type]
    except ValueError:  # range() arg 3 must not be zero: the body never runs
        return 0


class _Counter:
    def __init__(self, scope: ModuleScope) -> None:
        self.scope = scope
        self.unbounded = False
        self.counted: dict[str, int] = {}

    def function(self, name: str) -> int:
        if name not in self.counted:
            self.counted[name] = 0  # a recursive call (which does not compile) counts 0
            self.counted[name] = self.block(self.scope.functions[name].body)
        return self.counted[name]

    def calls(self, node: ast.AST | None) -> int:
        """The iterations of the ``@xla.jit`` functions ``node`` calls."""
        if node is None:
            return 0
        return sum(
            self.function(call.func.id)
            for call in ast.walk(node)
            if isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id in self.scope.functions
        )

    def block(self, statements: list[ast.stmt]) -> int:
        return sum(self.statement(s) for s in statements)

    def statement(self, stmt: ast.stmt) -> int:
        if isinstance(stmt, ast.While):
            self.unbounded = True
            return 0
        if isinstance(stmt, ast.For):
            trips = _trip_count(stmt)
            if trips is None:
                self.unbounded = True
                return 0
            return trips * max(1, self.block(stmt.body)) + self.block(stmt.orelse)
        if isinstance(stmt, ast.If):
            return self.calls(stmt.test) + max(self.block(stmt.body), self.block(stmt.orelse))
        return self.calls(stmt)


def estimate(scope: ModuleScope, name: str) -> Work:
    """The work one call of the module-level function ``name`` does."""
    counter = _Counter(scope)
    iterations = counter.function(name)
    return Work(counter.unbounded, iterations)
