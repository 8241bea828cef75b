"""Why a function cannot be compiled, with the line that says so."""

from __future__ import annotations

__all__ = ["CompileError"]


class CompileError(Exception):
    """A construct outside the compiled language, or a type error.

    ``rule`` is ``"xla-unsupported"`` (the function stays Python as written)
    or ``"xla-type"`` (the types do not fit the compiled language); ``lineno``
    is the line in the module's source.
    """

    def __init__(self, rule: str, message: str, lineno: int, remedy: str | None = None) -> None:
        super().__init__(message)
        self.rule = rule
        self.message = message
        self.lineno = lineno
        self.remedy = remedy
