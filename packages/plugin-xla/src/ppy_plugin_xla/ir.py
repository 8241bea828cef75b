"""The typed scalar IR between the two passes: what a function computes, in ops.

jax traces a function to a jaxpr and lowers each equation by the rule its
primitive registered; the compiler here does the same at its scale. The
front (``front/``) reads the AST and writes a ``Function`` of ops on typed
scalars, having settled everything about Python the source decides: which
statements run under which predicate, which names are which values, what
each local's type is, where a loop's state is carried. The lowering
(``lowering/``) writes each op as StableHLO through the rule registered for
it, with CPython's arithmetic, and knows nothing of the AST.

An op is CPython's (``int.floordiv`` is Python's ``//`` on two ints, with
its signs and its errors) or the hardware's (``compare`` and ``select`` on
one type). An op that can meet an input where CPython would raise, or give
what the module cannot (an int beyond int64, a subnormal float), carries a
``Guard``: the predicate it runs under and the fallback flag before and
after it, so the flag is state the IR passes along explicitly, as a loop's
locals are. An ``if`` is no region of its own: the front predicates both
arms, and the IR holds the ``select`` of their values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from ppy_plugin_xla.folding import Constant

__all__ = [
    "OPS",
    "Block",
    "Eqn",
    "Function",
    "Guard",
    "Loop",
    "Stmt",
    "Var",
    "ops_used",
    "show",
]


@dataclass(frozen=True, eq=False)
class Var:
    """One value: its Python type (``float``, ``int``, ``bool``), and its value
    when the front knows it. Compared by identity, as SSA values are."""

    type: str
    const: Constant | None = None


@dataclass(frozen=True)
class Guard:
    """Where an op records an error CPython would raise: the predicate it runs
    under (``pred``), and the fallback flag before it and after it."""

    pred: Var
    before: Var
    after: Var


@dataclass(frozen=True)
class Eqn:
    """``out = op(args)``; ``param`` is a comparison's direction, or empty."""

    op: str
    args: tuple[Var, ...]
    out: Var
    param: str = ""
    guard: Guard | None = None


@dataclass(frozen=True)
class Block:
    """Straight-line ops over ``params``; what it gives is ``results``."""

    params: tuple[Var, ...]
    stmts: tuple[Stmt, ...]
    results: tuple[Var, ...]


@dataclass(frozen=True)
class Loop:
    """A while loop over the state it carries: ``init`` goes in, ``cond``
    maps the state to whether to go on, ``body`` to the next state, ``out``
    is the state after the last iteration."""

    init: tuple[Var, ...]
    cond: Block
    body: Block
    out: tuple[Var, ...]


Stmt = Eqn | Loop


@dataclass(frozen=True)
class Function:
    """One ``@xla.jit`` function, callees inlined: ``body`` takes the
    parameters and gives the result and the fallback flag."""

    name: str
    param_names: tuple[str, ...]
    body: Block

    @property
    def result(self) -> Var:
        return self.body.results[0]


Raises = Callable[[Sequence[Var]], bool]


def _always(args: Sequence[Var]) -> bool:
    return True


def _never(args: Sequence[Var]) -> bool:
    return False


def _unless_divisor_is_constant(args: Sequence[Var]) -> bool:
    """``//`` and ``%`` by a constant other than 0 and -1 cannot fail."""
    return args[1].const is None or args[1].const in (0, -1)


#: Every op, and whether it may set the fallback flag for these operands. An
#: op that may gets a ``Guard``; one that cannot has none, and its lowering
#: rule has no flag to set. The front folds ``x + 0``, ``x * 1``, ``x ** 1``
#: and the like before they become ops, so the int operators always may.
OPS: Mapping[str, Raises] = {
    # the hardware's, on one type
    "const": _never,
    "and": _never,
    "or": _never,
    "not": _never,
    "select": _never,
    "compare": _never,
    "convert": _never,
    # CPython's int operators
    "int.add": _always,
    "int.sub": _always,
    "int.mul": _always,
    "int.div": _always,
    "int.floordiv": _unless_divisor_is_constant,
    "int.mod": _unless_divisor_is_constant,
    "int.pow": _always,
    "int.neg": _always,
    "int.abs": _always,
    # CPython's float operators
    "float.add": _always,
    "float.sub": _always,
    "float.mul": _always,
    "float.div": _always,
    "float.floordiv": _always,
    "float.mod": _always,
    "float.pow": _always,
    "float.neg": _never,
    "float.abs": _never,
    # comparison and conversions across types
    "compare.int_float": _never,
    "float.to_int": _always,
    "math.floor": _always,
    "math.ceil": _always,
    "math.trunc": _always,
    # math
    "math.sqrt": _always,
    "math.cbrt": _never,
    "math.tan": _always,
    "math.atan2": _always,
    "math.copysign": _always,
    "math.fmod": _always,
    "math.isnan": _never,
    "math.isinf": _never,
    "math.isfinite": _never,
    # a range loop's next index
    "range.next": _never,
}


def _walk(block: Block) -> Iterator[Stmt]:
    for stmt in block.stmts:
        yield stmt
        if isinstance(stmt, Loop):
            yield from _walk(stmt.cond)
            yield from _walk(stmt.body)


def ops_used(function: Function) -> set[str]:
    """The ops ``function`` is written in (``while`` for a loop)."""
    return {stmt.op if isinstance(stmt, Eqn) else "while" for stmt in _walk(function.body)}


def show(function: Function) -> str:
    """The IR as text, one op a line, for reading (not parsed back)."""
    names: dict[Var, str] = {}

    def name(var: Var) -> str:
        if var.const is not None:
            return repr(var.const)
        if var not in names:
            names[var] = f"%{len(names)}"
        return names[var]

    def typed(var: Var) -> str:
        return f"{name(var)}:{var.type}"

    def block(body: Block, indent: str) -> list[str]:
        lines = []
        for stmt in body.stmts:
            if isinstance(stmt, Loop):
                outs = ", ".join(typed(v) for v in stmt.out)
                init = ", ".join(name(v) for v in stmt.init)
                lines.append(f"{indent}{outs} = while({init})")
                for label, region in (("cond", stmt.cond), ("body", stmt.body)):
                    params = ", ".join(typed(v) for v in region.params)
                    lines.append(f"{indent}  {label}({params}):")
                    lines += block(region, indent + "    ")
                continue
            args = ", ".join(name(v) for v in stmt.args)
            param = f"[{stmt.param}]" if stmt.param else ""
            out = typed(stmt.out)
            guard = ""
            if stmt.guard is not None:
                g = stmt.guard
                guard = f"  ; {name(g.after)} = {name(g.before)} | {name(g.pred)} & fails"
            lines.append(f"{indent}{out} = {stmt.op}{param}({args}){guard}")
        results = ", ".join(name(v) for v in body.results)
        return [*lines, f"{indent}-> {results}"]

    params = ", ".join(typed(v) for v in function.body.params)
    return "\n".join([f"{function.name}({params}):", *block(function.body, "  ")]) + "\n"
