"""Why a function cannot be compiled, with the line that says so.

``CompileError`` is what ``plugin.py`` reports; ``unsupported``, ``type_error``
and ``describe`` build it from the AST node at fault. They live here, not in
the lowering, because both halves of it (``lower.py`` for statements,
``expressions.py`` for expressions) refuse constructs with the same words.
"""

from __future__ import annotations

import ast

__all__ = ["TYPE_ERROR", "UNSUPPORTED", "CompileError", "describe", "type_error", "unsupported"]

#: The function stays Python as written: a construct outside the compiled language.
UNSUPPORTED = "xla-unsupported"
#: The types do not fit the compiled language.
TYPE_ERROR = "xla-type"


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


#: What each construct outside the language is called in messages.
_NODE_WORDS = {
    ast.List: "a list",
    ast.Tuple: "a tuple",
    ast.Dict: "a dict",
    ast.Set: "a set",
    ast.ListComp: "a list comprehension",
    ast.GeneratorExp: "a generator",
    ast.DictComp: "a dict comprehension",
    ast.SetComp: "a set comprehension",
    ast.Lambda: "a lambda",
    ast.JoinedStr: "an f-string",
    ast.Subscript: "subscripting",
    ast.Starred: "a starred expression",
    ast.NamedExpr: "an assignment expression",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.YieldFrom: "yield from",
    ast.FunctionDef: "a nested function",
    ast.ClassDef: "a class",
    ast.With: "a with block",
    ast.Try: "a try block",
    ast.Raise: "raise",
    ast.Assert: "assert",
    ast.Delete: "del",
    ast.Global: "a global statement",
    ast.Nonlocal: "a nonlocal statement",
    ast.Import: "an import",
    ast.ImportFrom: "an import",
    ast.Match: "a match statement",
    ast.AsyncFunctionDef: "an async function",
    ast.AsyncFor: "async for",
    ast.AsyncWith: "async with",
}


def unsupported(node: ast.AST, what: str, remedy: str | None = None) -> CompileError:
    """``node`` is outside the compiled language: the function stays Python."""
    return CompileError(UNSUPPORTED, what, getattr(node, "lineno", 0), remedy)


def type_error(node: ast.AST, what: str, remedy: str | None = None) -> CompileError:
    """The types at ``node`` do not fit the compiled language."""
    return CompileError(TYPE_ERROR, what, getattr(node, "lineno", 0), remedy)


def describe(node: ast.AST) -> str:
    """What ``node`` is, in words a message can use (``a list``, ``a str literal``)."""
    for kind, word in _NODE_WORDS.items():
        if isinstance(node, kind):
            return word
    if isinstance(node, ast.Constant):
        return f"a {type(node.value).__name__} literal"
    return f"{type(node).__name__}"
