"""``from ppy import xla``: the ``@xla.jit`` marker for scalar functions.

The marker is inert: under plain ``python`` the function stays the function.
``ppy build`` finds it in the source and the xla plugin compiles the body to
StableHLO; ``ppy run`` binds the compiled form in its place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["jit"]

F = TypeVar("F", bound=Callable[..., object])


def jit(function: F) -> F:
    """Mark ``function`` for the xla scalar compiler; returns it unchanged."""
    return function
