"""``@tabulate(lo, hi)``: a function of one int, answered from a table made at build time.

Under plain Python the decorator does nothing. ``ppy build`` (with the
project's permission) calls the function for every n in ``range(lo, hi)`` in a
child process and stores the results as a ``tabulate.table`` entry; ``ppy
run`` binds a lookup that answers from the table and calls the function for
anything else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["tabulate"]

F = TypeVar("F", bound=Callable[..., object])


def tabulate(lo: int, hi: int) -> Callable[[F], F]:
    """Mark a function of one int for tabulation over ``range(lo, hi)``."""

    def mark(function: F) -> F:
        return function

    return mark
