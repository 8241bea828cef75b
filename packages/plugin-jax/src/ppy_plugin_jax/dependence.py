"""Does a trace ask a symbolic dim anything whose answer depends on its size?

A symbolic dim (``B``) is a claim that the function computes the same thing
at every size. jax keeps that claim for arithmetic on dims, and decides
what it can prove (``B >= 1``), but Python code can ask a dim questions that
jax cannot answer for every size, and some it answers all the same:

- ``B == 16`` and ``B != 16`` (and with another dim it cannot relate):
  jax's ``__eq__`` may not raise, so it answers unequal;
- ``SCALES.get(B)``, ``B in {16, 32}``, a dict or set keyed by sizes: the
  lookup goes by ``hash(B)``, which is no size's hash, so nothing is found;
- ``bool(B - 8)``, ``if B % 2:``: a dim has no ``__bool__``, so every one is
  true, where the size can make it 0;
- ``B > 8``, ``int(B)``: jax raises ``InconclusiveDimensionOperation``,
  which the code may catch and go on;
- ``str(B)``, ``f"{B}"``: the text ``B`` where the run has ``16``.

At the size the question singles out, the jitted function computes one
thing and the export another, silently. So the export's trace is watched
(``watched``): for its duration each of those methods of jax's dim class
notes the line that asked, where the answer depends on the size. jax asks
such questions too (its caches hash shapes, its checks compare them), and
answers them soundly or raises; a question is the program's when the first
frame that is not jax's dim code, code made at run time (a dataclass's
``__hash__``) or Python's own library is outside jax, jaxlib and ppy: the
program's own modules, and the libraries it calls (which the export traces
as much as the program). The watch costs a trace nothing measurable.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["Use", "watched"]

#: The comparison methods jax decides or raises on, and how each reads.
_ORDER: Final = {"__lt__": "<", "__le__": "<=", "__gt__": ">", "__ge__": ">="}


@dataclass(frozen=True)
class Use:
    """One question a trace asked of a symbolic dim whose answer depends on its size."""

    filename: str
    line: int
    #: What was asked, in the program's words: ``compares B with 16``.
    asked: str
    #: Why the export's answer is not the jitted function's at every size.
    why: str


def _inconclusive(error: BaseException) -> bool:
    return any(c.__name__ == "InconclusiveDimensionOperation" for c in type(error).__mro__)


class _Watch:
    """The uses one trace made, and how to tell the program's from jax's."""

    def __init__(self, dim_file: str, inside: tuple[str, ...]) -> None:
        self.dim_file = dim_file
        self.inside = inside
        #: Python's own library: a question asked there is its caller's.
        self.standard = os.path.dirname(os.path.abspath(os.__file__)) + os.sep
        self.found: list[Use] = []
        #: Set while a watched method runs: what it calls in turn is jax's.
        self.busy = False

    def caller(self) -> Any:
        """The program's frame that asked, or None where jax (or ppy) asked."""
        frame: Any = sys._getframe(2)
        while frame is not None and self.passed(frame.f_code.co_filename):
            frame = frame.f_back
        if frame is None or frame.f_code.co_filename.startswith(self.inside):
            return None
        return frame

    def passed(self, filename: str) -> bool:
        """Whether a frame of ``filename`` asks for its caller: jax's dim code
        (``__ne__`` calls ``__eq__``), this module, code made at run time
        (the ``__hash__`` and ``__eq__`` of a dataclass, and jax's hold dims),
        and Python's own library (``collections.Counter``, ``functools``)."""
        if filename in (self.dim_file, __file__) or filename.startswith("<"):
            return True
        return filename.startswith(self.standard) and "-packages" not in filename

    def note(self, frame: Any, asked: str, why: str) -> None:
        self.found.append(Use(frame.f_code.co_filename, frame.f_lineno, asked, why))

    def around(self, original: Callable[..., Any], ask: Callable[..., Any]) -> Callable[..., Any]:
        """``original`` with ``ask(frame, self, *args)`` called first for the
        program's questions; ``ask`` returns the answer, or raises as jax does."""
        watch = self

        def method(self: Any, *args: Any) -> Any:
            if watch.busy:
                return original(self, *args)
            frame = watch.caller()
            if frame is None:
                return original(self, *args)
            watch.busy = True
            try:
                return ask(frame, original, self, *args)
            finally:
                watch.busy = False

        return method


def _methods(
    watch: _Watch, expression: Any, constant: Callable[[Any], bool]
) -> dict[str, Callable[..., Any]]:
    """What each watched method of jax's dim class (``expression``) asks, by
    name; ``constant`` is jax's test for a dim that is a plain size."""

    def hashed(frame: Any, original: Callable[..., Any], dim: Any) -> Any:
        watch.note(
            frame,
            f"looks {dim} up by its hash (a dict key or a set member)",
            "which is no size's hash: where the size is a key, the jitted function finds "
            "its entry, and the export does not",
        )
        return original(dim)

    def equal(frame: Any, original: Callable[..., Any], dim: Any, other: Any) -> Any:
        answer = original(dim, other)
        undecided = dim.scope is other.scope if isinstance(other, expression) else constant(other)
        if not answer and undecided and isinstance(dim - other, expression):
            watch.note(
                frame,
                f"compares {dim} with {other}",
                "which jax decides as unequal without knowing the size: where "
                f"{dim} = {other} the jitted function takes the other branch, and the "
                "export does not",
            )
        return answer

    def truth(frame: Any, original: Callable[..., Any], dim: Any) -> Any:
        if not (_decided(expression.__ge__, dim, 1) or _decided(expression.__le__, dim, -1)):
            watch.note(
                frame,
                f"asks bool({dim})",
                f"which is true for the symbol, and false at the size where {dim} is 0",
            )
        return original(dim)

    def asked(symbol: str) -> Callable[..., Any]:
        def order(frame: Any, original: Callable[..., Any], dim: Any, other: Any) -> Any:
            try:
                return original(dim, other)
            except Exception as error:
                if _inconclusive(error):
                    watch.note(
                        frame,
                        f"asks whether {dim} {symbol} {other}",
                        "which holds at some sizes and not at others",
                    )
                raise

        return order

    def number(frame: Any, original: Callable[..., Any], dim: Any) -> Any:
        try:
            return original(dim)
        except Exception as error:
            if _inconclusive(error):
                watch.note(frame, f"asks int({dim})", "which has no one value")
            raise

    def text(frame: Any, original: Callable[..., Any], dim: Any, *spec: Any) -> Any:
        watch.note(
            frame,
            f"writes {dim} as text",
            f'which is "{dim}" in the export, and the size itself in the jitted function',
        )
        return original(dim, *spec)

    asks: dict[str, Callable[..., Any]] = {
        "__hash__": hashed,
        "__eq__": equal,
        "__bool__": truth,
        "__int__": number,
        "__str__": text,
        "__repr__": text,
        "__format__": text,
    }
    asks.update({name: asked(symbol) for name, symbol in _ORDER.items()})
    return asks


def _decided(compare: Callable[[Any, int], bool], dim: Any, bound: int) -> bool:
    """Whether jax proves ``compare(dim, bound)`` for every size."""
    try:
        return bool(compare(dim, bound))
    except Exception as error:
        if _inconclusive(error):
            return False
        raise


@contextlib.contextmanager
def watched() -> Iterator[list[Use]]:
    """Watch the trace run inside the block: the list fills with every
    question the program asked of a symbolic dim whose answer depends on its
    size. jax's dim class is as it was once the block ends."""
    import jax
    import jaxlib
    import ppy
    from jax._src import core
    from jax._src.export import shape_poly

    expression: Any = shape_poly._DimExpr
    inside = tuple(
        os.path.dirname(os.path.abspath(path)) + os.sep
        for path in (jax.__file__, jaxlib.__file__, ppy.__file__, __file__)
    )
    watch = _Watch(shape_poly.__file__, inside)
    asks = _methods(watch, expression, core.is_constant_dim)
    # What the class itself defines; ``__format__`` and ``__bool__`` it
    # inherits (format calls ``__str__``; every object is true).
    saved = {name: expression.__dict__.get(name) for name in asks}
    try:
        for name, ask in asks.items():
            original = saved[name] or (_true if name == "__bool__" else None)
            if original is not None:
                setattr(expression, name, watch.around(original, ask))
        yield watch.found
    finally:
        for name, original in saved.items():
            if original is None:
                with contextlib.suppress(AttributeError):
                    delattr(expression, name)
            else:
                setattr(expression, name, original)


def _true(dim: Any) -> bool:
    """What ``bool`` answers for a dim of a class with no ``__bool__``."""
    return True
