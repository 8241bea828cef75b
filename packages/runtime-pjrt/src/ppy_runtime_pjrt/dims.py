"""Symbolic dims as the input description writes them, solved from a call's shapes.

A staged input's dim is an int, a symbol (``"B"``) or a jax dimension
expression of symbols (``"2*B"``, ``"B + 1"``, ``"B*C"``, ``"max(B, 1)"``,
what ``ppy.Shape`` accepts). The export is one program for every value of
its symbols, but it takes the staged path only when some values of them give
exactly the call's sizes. ``solve`` finds those values the way jax's own
``shape_poly.solve_dim_vars`` does, without jax: a dim that is a symbol binds
it; an expression whose symbols are bound is checked; an expression with one
unbound symbol, linear in it (``2*B``, ``B + 1``, ``C*B`` with ``C`` bound),
is solved for it, and must divide evenly to a value >= 1. What cannot be
solved, or does not fit, is a ``Fallback`` with the reason, never an error.

This module is the slow path of the guard: it runs once per new signature.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["DimExpr", "Unfit", "Use", "parse_dim", "solve"]

#: A polynomial: monomial (sorted symbols, repeated for powers) -> coefficient.
Polynomial = dict[tuple[str, ...], int]

_BINARY: Mapping[type[ast.operator], Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_CALLS: Mapping[str, Callable[[int, int], int]] = {"max": max, "min": min}


@dataclass(frozen=True)
class DimExpr:
    """One symbolic dim: its text, its symbols, and its polynomial where it is one."""

    text: str
    tree: ast.expr
    symbols: frozenset[str]
    #: ``None`` where the expression uses ``//``, ``%``, ``max`` or ``min``:
    #: it can be checked once its symbols are known, not solved for them.
    polynomial: Polynomial | None

    @property
    def symbol(self) -> str | None:
        """The symbol's name where the dim is one symbol alone, else None."""
        return self.tree.id if isinstance(self.tree, ast.Name) else None

    def value(self, values: Mapping[str, int]) -> int:
        """The dim's size for ``values`` of all its symbols."""
        return _evaluate(self.tree, values)

    def linear(self, symbol: str, values: Mapping[str, int]) -> tuple[int, int] | None:
        """``(a, c)`` with the dim equal to ``a*symbol + c`` given ``values`` for the
        other symbols, or None if it is not of that form (or ``a`` is 0)."""
        if self.polynomial is None:
            return None
        a = c = 0
        for monomial, coefficient in self.polynomial.items():
            degree = monomial.count(symbol)
            term = coefficient
            for other in monomial:
                if other != symbol:
                    term *= values[other]
            if degree == 0:
                c += term
            elif degree == 1:
                a += term
            else:
                return None
        return (a, c) if a else None


def parse_dim(text: str) -> DimExpr:
    """The ``DimExpr`` of ``text``; ValueError if it is not a dim expression."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise ValueError(f"{text!r} is not a dimension expression") from None
    symbols = frozenset(_symbols(tree, text))
    try:
        polynomial: Polynomial | None = _polynomial(tree)
    except _NotPolynomial:
        polynomial = None
    return DimExpr(text, tree, symbols, polynomial)


def _symbols(node: ast.expr, text: str) -> list[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return []
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _symbols(node.left, text) + _symbols(node.right, text)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _symbols(node.operand, text)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _CALLS
        and len(node.args) == 2
        and not node.keywords
    ):
        return _symbols(node.args[0], text) + _symbols(node.args[1], text)
    raise ValueError(f"{text!r} is not a dimension expression")


class _NotPolynomial(Exception):
    pass


def _polynomial(node: ast.expr) -> Polynomial:
    if isinstance(node, ast.Name):
        return {(node.id,): 1}
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return {(): node.value} if node.value else {}
    if isinstance(node, ast.UnaryOp):
        return {m: -c for m, c in _polynomial(node.operand).items()}
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mult):
        left, right = _polynomial(node.left), _polynomial(node.right)
        result: Polynomial = {}
        if isinstance(node.op, ast.Mult):
            for lm, lc in left.items():
                for rm, rc in right.items():
                    key = tuple(sorted(lm + rm))
                    result[key] = result.get(key, 0) + lc * rc
        else:
            sign = 1 if isinstance(node.op, ast.Add) else -1
            result = dict(left)
            for m, c in right.items():
                result[m] = result.get(m, 0) + sign * c
        return {m: c for m, c in result.items() if c}
    raise _NotPolynomial


def _evaluate(node: ast.expr, values: Mapping[str, int]) -> int:
    if isinstance(node, ast.Name):
        return values[node.id]
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp):
        return -_evaluate(node.operand, values)
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left, values), _evaluate(node.right, values)
        if isinstance(node.op, ast.FloorDiv | ast.Mod) and right == 0:
            raise ZeroDivisionError(f"division by zero in {ast.unparse(node)}")
        return _BINARY[type(node.op)](left, right)
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    return _CALLS[node.func.id](_evaluate(node.args[0], values), _evaluate(node.args[1], values))


@dataclass(frozen=True)
class Use:
    """One symbolic dim of one argument, with the size the call gave it."""

    dim: DimExpr
    size: int
    #: The argument's name (``x``, ``argument 1``) and the axis, for reasons.
    name: str
    axis: int


@dataclass(frozen=True)
class Unfit:
    """Why the sizes fit no values of the symbols: a ``Fallback`` category and a sentence."""

    category: str
    detail: str


def _named(values: Mapping[str, int], symbols: frozenset[str]) -> str:
    return ", ".join(f"{s} = {values[s]}" for s in sorted(symbols))


def solve(uses: Sequence[Use]) -> dict[str, int] | Unfit:
    """The value of every symbol in ``uses``, or why there is none."""
    values: dict[str, int] = {}
    source: dict[str, str] = {}
    # Plain symbols first, in argument order: they bind directly, and a
    # disagreement between two of them reads best in their own words.
    for use in uses:
        symbol = use.dim.symbol
        if symbol is None:
            continue
        if use.size < 1:
            return Unfit(
                "size",
                f"{use.name} has {use.size} for {symbol} in dim {use.axis}; "
                f"staged for {symbol} >= 1",
            )
        if symbol in values and values[symbol] != use.size:
            return Unfit(
                "symbolic",
                f"{symbol} is {values[symbol]} in {source[symbol]} but {use.size} in {use.name}",
            )
        values.setdefault(symbol, use.size)
        source.setdefault(symbol, use.name)
    pending = [u for u in uses if u.dim.symbol is None]
    while pending:
        progressed = False
        for use in list(pending):
            unknown = use.dim.symbols - values.keys()
            if len(unknown) > 1:
                continue
            if unknown:
                (symbol,) = unknown
                line = use.dim.linear(symbol, values)
                if line is None:
                    continue
                a, c = line
                value, remainder = divmod(use.size - c, a)
                if remainder or value < 1:
                    return Unfit(
                        "size",
                        f"{use.name} has {use.size} in dim {use.axis}, which is "
                        f"{use.dim.text} for no whole {symbol} >= 1",
                    )
                values[symbol] = value
                source[symbol] = use.name
            else:
                try:
                    size = use.dim.value(values)
                except ZeroDivisionError as error:
                    return Unfit("size", f"{use.dim.text} in {use.name}: {error}")
                if size != use.size:
                    return Unfit(
                        "symbolic",
                        f"{use.dim.text} is {size} for {_named(values, use.dim.symbols)} "
                        f"but {use.name} has {use.size} in dim {use.axis}",
                    )
            pending.remove(use)
            progressed = True
        if not progressed:
            texts = ", ".join(sorted({u.dim.text for u in pending}))
            names = sorted(frozenset().union(*(u.dim.symbols for u in pending)) - values.keys())
            return Unfit(
                "symbolic",
                f"{', '.join(names)} cannot be solved from the shapes ({texts}): "
                "only a dim linear in one unknown symbol is solved",
            )
    return values
