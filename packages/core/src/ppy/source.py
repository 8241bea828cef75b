"""Records of what static discovery reads from a ``.ppy`` module.

Discovery (``ppy.discovery``) fills these from the AST alone; policy and the
plugins read them. They hold source facts only, never live objects, so they
can be built and tested without importing the user's code or jax.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "ArraySpec",
    "Decorator",
    "Differentiation",
    "FunctionInfo",
    "ModuleInfo",
    "Parameter",
]

ParameterKind = Literal["positional", "keyword_only", "var_positional", "var_keyword"]
Scope = Literal["module", "method", "nested"]


@dataclass(frozen=True)
class ArraySpec:
    """The ppy metadata found on one annotation.

    ``shape`` and ``dtype`` are None when the annotation has no ``ppy.Shape``
    or ``ppy.DType``; ``problems`` holds the messages for ones that are
    present but invalid (a bad dim, an unknown dtype name, a non-literal).
    """

    shape: tuple[int | str, ...] | None
    dtype: str | None
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class Parameter:
    name: str
    kind: ParameterKind
    #: The annotation as written in the source, or None.
    annotation: str | None
    #: ppy metadata resolved through ``Annotated`` and module-level aliases.
    spec: ArraySpec
    has_default: bool = False


@dataclass(frozen=True)
class Decorator:
    #: Resolved dotted name: ``import jax as j; @j.jit`` gives ``"jax.jit"``;
    #: ``@partial(jax.jit, ...)`` and ``@jax.jit(...)`` give ``"jax.jit"`` too.
    name: str
    lineno: int
    #: Keyword arguments given to the decorator, e.g. ``("static_argnums",)``.
    keywords: tuple[str, ...] = ()
    #: Positional arguments given beyond the function (``partial(jax.jit, f)``).
    called: bool = False


@dataclass(frozen=True)
class Differentiation:
    """Why discovery considers a function differentiated."""

    transform: str  # resolved name, e.g. "jax.grad"
    lineno: int
    #: How the transform reaches the function: ["loss", "score"] when
    #: ``jax.grad(loss)`` and ``loss`` calls ``score``.
    via: tuple[str, ...] = ()


@dataclass(frozen=True)
class FunctionInfo:
    module: str
    qualname: str
    path: str
    lineno: int
    decorators: tuple[Decorator, ...]
    parameters: tuple[Parameter, ...]
    returns: str | None
    scope: Scope = "module"
    differentiated: Differentiation | None = None
    #: For a module-level function, the other lines that bind its name at
    #: module level (another def, an assignment, an import, a ``global``).
    rebound: tuple[int, ...] = ()

    @property
    def name(self) -> str:
        return self.qualname.rpartition(".")[2]

    @property
    def location(self) -> str:
        return f"{self.path}:{self.lineno}"


@dataclass(frozen=True)
class ModuleInfo:
    #: Dotted module name relative to the project root (``pkg/helpers.ppy`` is
    #: ``pkg.helpers``).
    name: str
    #: Path relative to the project root, with forward slashes.
    path: str
    source: str
    sha256: str
    functions: tuple[FunctionInfo, ...] = ()
    #: Set when the module does not parse; it then has no functions.
    syntax_error: str | None = None
    aliases: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    #: Every module the source imports, anywhere in it, by dotted name
    #: (``from pkg import layers`` gives ``pkg`` and ``pkg.layers``).
    imports: frozenset[str] = frozenset()
