"""Records of what static discovery reads from a ``.ppy`` module.

Discovery (``ppy.discovery``) fills these from the AST alone; policy and the
plugins read them. They hold source facts only, never live objects, so they
can be built and tested without importing the user's code or jax.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ppy.spec import Axis

__all__ = [
    "ArraySpec",
    "ClassInfo",
    "Decorator",
    "Differentiation",
    "FunctionInfo",
    "ModuleInfo",
    "Parameter",
]

ParameterKind = Literal["positional", "keyword_only", "var_positional", "var_keyword"]
#: Where a function is defined: at module level, as a method, inside another
#: function, or under ``if __name__ == "__main__":`` (``main``), which runs
#: only when the module is the program.
Scope = Literal["module", "method", "nested", "main"]


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
    #: Read from a jaxtyping annotation rather than ``ppy.Shape``/``ppy.DType``.
    jaxtyping: bool = False
    #: ``ppy.Sharding``'s entries (a ``PartitionSpec``), or None where it has none.
    sharding: tuple[Axis, ...] | None = None
    #: Read from recorded calls (``ppy record``), not from an annotation.
    recorded: bool = False
    #: A Python scalar (``int``, ``float``): weakly typed, as jit traces one.
    weak: bool = False
    #: Recorded weakly typed in some calls: the recording's kinds of weak types
    #: (``ppy.record.generalise.General.kinds``) it is weak in, each exported
    #: as a variant of its own beside the strongly typed one.
    weakly: tuple[int, ...] = ()


@dataclass(frozen=True)
class Parameter:
    """A function's parameter, or a field of a class that describes a pytree.

    One of four descriptions may hold: ``spec`` with a shape and a dtype (an
    array, from ``ppy.Shape``/``ppy.DType`` or a jaxtyping annotation);
    ``like`` (``ppy.Like``: the name of a function that builds an example);
    ``tree`` (a class whose fields are described, by the name the
    annotation gives it); or ``choices`` (``bool`` or ``Literal[...]``: the
    values a static parameter may take).
    """

    name: str
    kind: ParameterKind
    #: The annotation as written in the source, or None.
    annotation: str | None
    #: ppy metadata resolved through ``Annotated`` and module-level aliases.
    spec: ArraySpec
    has_default: bool = False
    #: ``ppy.Like(example)``: the example function's name.
    like: str | None = None
    #: ``ppy.Like(example, axes={0: "B"})``: the axes of every leaf the example
    #: leaves symbolic, as sorted ``(axis, name)`` pairs.
    like_axes: tuple[tuple[int, str], ...] = ()
    #: A class annotation, as written (``Params``, ``types.Params``).
    tree: str | None = None
    #: ``bool`` gives ``(False, True)``; ``Literal["a", 1]`` its values.
    choices: tuple[object, ...] | None = None
    #: Recorded plain lists, tuples and dicts of arrays (``ppy record``): the
    #: structure as JSON, each array leaf ``{"dims": [...], "dtype": ...}``.
    nest: str | None = None
    #: Why the recorded calls did not describe it, where they could not (an
    #: array laid out over several devices), with what describes it instead.
    unrecorded: str | None = None

    @property
    def described(self) -> bool:
        """Whether the annotation (or a recording) says what a traced input looks like."""
        array = self.spec.shape is not None and self.spec.dtype is not None
        return array or self.like is not None or self.tree is not None or self.nest is not None


@dataclass(frozen=True)
class ClassInfo:
    """A module-level class that may describe a pytree input by its fields."""

    name: str
    lineno: int
    #: ``namedtuple``, ``typeddict``, ``dataclass`` (any decorator named
    #: ``dataclass``: the standard one, flax.struct's, chex's), or None.
    form: Literal["namedtuple", "typeddict", "dataclass"] | None
    #: Annotated fields in order, ``ClassVar`` left out.
    fields: tuple[Parameter, ...] = ()


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
    #: ``static_argnums`` and ``static_argnames`` as written: ints and names.
    static: tuple[int | str, ...] = ()
    #: ``donate_argnums`` and ``donate_argnames`` as written: ints and names.
    donated: tuple[int | str, ...] = ()


@dataclass(frozen=True)
class Differentiation:
    """Why discovery considers a function differentiated."""

    transform: str  # resolved name, e.g. "jax.grad"
    lineno: int
    #: How the transform reaches the function: ["loss", "score"] when
    #: ``jax.grad(loss)`` and ``loss`` calls ``score``.
    via: tuple[str, ...] = ()
    #: Every transform the module reaches the function by, sorted: a plugin
    #: that serves some transforms with a staged VJP stages the function only
    #: where it serves all of them.
    transforms: tuple[str, ...] = ()


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
    #: Where a description came from a recording (``ppy record``): how many
    #: calls in how many runs, such as ``recorded: 12 calls in 2 runs``.
    recorded: str | None = None
    #: Where a recording generalised dims into symbols: the sets of sizes it
    #: saw, most called first, as JSON ``[{"B": 64}, {"B": 24}]``; the build
    #: exports these where a symbol would not be faithful (``ppy record``).
    sizes: str | None = None
    #: Where a recording saw calls under ``jax.grad``: each call's leaves,
    #: perturbed leaves, static values and cotangent patterns, as JSON
    #: (``ppy.record.format``'s ``gradients``); the build exports jit's own
    #: programs for them (``ppy.kinds.linearized``).
    gradients: str | None = None
    #: For a function defined inside another, what a recording saw it read
    #: of that one: JSON ``{name: {"static": literal} | {"ref": "module:name"}}``.
    closure: str | None = None
    #: For a jit a function makes by a call (``gram_ = jax.jit(partial(gram,
    #: kernel))`` in ``train``), the call's source: the build evaluates it over
    #: the module's globals, the run binds what it makes at that statement.
    made: str | None = None
    #: The variables of the function around it that call reads
    #: (``("kernel",)``): only the running program has them, so only a
    #: recording (``ppy record``) exports what it makes.
    reads: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.qualname.rpartition(".")[2]

    @property
    def location(self) -> str:
        return f"{self.path}:{self.lineno}"

    @property
    def static_method(self) -> bool:
        """A method under ``@staticmethod``: its class hands on what is under
        the decorator as it is, so ``Net.forward`` is the jit itself, reached
        with no instance."""
        outer = [d.name for d in self.decorators[:1]]
        return self.scope == "method" and outer == ["staticmethod"]

    @property
    def static(self) -> frozenset[str]:
        """The parameters a decorator makes static, by name (numbers resolved
        against the positional parameters, as jax resolves them)."""
        return self._named([i for d in self.decorators for i in d.static])

    @property
    def donated(self) -> frozenset[str]:
        """The parameters a decorator donates, by name."""
        return self._named([i for d in self.decorators for i in d.donated])

    def _named(self, items: list[int | str]) -> frozenset[str]:
        positional = [p.name for p in self.parameters if p.kind == "positional"]
        names: set[str] = set()
        for item in items:
            if isinstance(item, str):
                names.add(item)
            elif -len(positional) <= item < len(positional):
                names.add(positional[item])
        return frozenset(names)


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
    #: Module-level classes by name, with their annotated fields.
    classes: dict[str, ClassInfo] = field(default_factory=dict, compare=False, hash=False)
    #: The work the module does when imported (``ppy.discovery.work``), as
    #: ``line N: source``; empty for a module that only defines.
    work: tuple[str, ...] = ()
