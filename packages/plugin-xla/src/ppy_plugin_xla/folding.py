"""Predicates folded where an operand is a constant, alike in both passes.

The front folds the predicates of statements (``if False:``, the code after
a ``return``) so that control flow known at compile time never reaches the
module; the lowering rules fold the conditions they build from constants.
Both fold by these same methods, over their own values (the IR's ``Var``,
the text writer's ``Value``), so what one pass folds the other would have
folded too, and a module's text does not depend on which pass saw the
constant first.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar

__all__ = ["Folding", "Scalar"]

#: A scalar as either pass holds it: its Python type, and its value where constant.
Constant = float | int | bool


class Scalar(Protocol):
    @property
    def type(self) -> str: ...

    @property
    def const(self) -> Constant | None: ...


V = TypeVar("V", bound=Scalar)


class Folding(ABC, Generic[V]):
    """``and``, ``or``, ``not``, ``select``, ``compare`` and ``convert``, folded
    on constants; ``_op`` writes what does not fold."""

    @abstractmethod
    def const(self, kind: str, value: Constant) -> V:
        """A constant of the scalar type ``kind``."""

    @abstractmethod
    def _op(self, name: str, operands: Sequence[V], kind: str, direction: str = "") -> V:
        """One of the operations above, unfolded (``direction`` for ``compare``)."""

    def true(self) -> V:
        return self.const("bool", True)

    def false(self) -> V:
        return self.const("bool", False)

    def and_(self, a: V, b: V) -> V:
        if a.const is not None:
            return b if a.const else a
        if b.const is not None:
            return a if b.const else b
        return self._op("and", [a, b], "bool")

    def or_(self, a: V, b: V) -> V:
        if a.const is not None:
            return a if a.const else b
        if b.const is not None:
            return b if b.const else a
        return self._op("or", [a, b], "bool")

    def not_(self, a: V) -> V:
        if a.const is not None:
            return self.const("bool", not a.const)
        return self._op("not", [a], "bool")

    def select(self, p: V, a: V, b: V) -> V:
        if p.const is not None:
            return a if p.const else b
        if a is b:
            return a
        return self._op("select", [p, a, b], a.type)

    def compare(self, direction: str, a: V, b: V) -> V:
        """The comparison of two values of one type, as the hardware does it."""
        if a.const is not None and b.const is not None and a.type == b.type == "bool":
            x, y = bool(a.const), bool(b.const)
            folded = {"EQ": x == y, "NE": x != y}.get(direction)
            if folded is not None:
                return self.const("bool", folded)
        return self._op("compare", [a, b], "bool", direction)

    def convert(self, a: V, kind: str) -> V:
        if a.type == kind:
            return a
        return self._op("convert", [a], kind)
