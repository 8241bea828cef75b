"""The functions and classes a module defines, with what their signatures describe.

Functions are read at every depth (module level, methods, functions defined
inside functions) and named as Python names them (``minimize.<locals>.update``),
so policy can say why a nested one stays; classes at module level, with the
form (NamedTuple, TypedDict, dataclass) that makes their fields a pytree.
"""

from __future__ import annotations

import ast
import dataclasses
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from ppy.discovery.names import (
    RETURNED,
    Names,
    called_jits,
    called_name,
    function_statements,
    is_main_guard,
    module_statements,
    nested_blocks,
)
from ppy.discovery.records import (
    ArraySpec,
    ClassInfo,
    Decorator,
    Differentiation,
    FunctionInfo,
    Parameter,
    ParameterKind,
    Scope,
)
from ppy.discovery.specs import Specs

__all__ = ["PARTIAL", "Definition", "Definitions"]

#: ``functools.partial(f, ...)`` hands on ``f``: decorators and transforms see through it.
PARTIAL: Final = frozenset({"functools.partial"})

#: jax's transforms whose function takes the inputs of the one they wrap
#: (their outputs differ, which the export reads from the trace)...
_SAME_INPUTS: Final = frozenset(
    {
        "jax.grad",
        "jax.value_and_grad",
        "jax.jacfwd",
        "jax.jacrev",
        "jax.hessian",
        "jax.checkpoint",
        "jax.remat",
    }
)
#: ... and those whose inputs are another shape (a batch axis more), so that
#: only a recording describes them.
_NEW_INPUTS: Final = frozenset({"jax.vmap"})
_CLASS_VAR: Final = frozenset({"typing.ClassVar", "typing_extensions.ClassVar"})
_NAMED_TUPLE: Final = frozenset({"typing.NamedTuple", "typing_extensions.NamedTuple"})
_TYPED_DICT: Final = frozenset({"typing.TypedDict", "typing_extensions.TypedDict"})
_STATIC_KEYWORDS: Final = ("static_argnums", "static_argnames")
_DONATE_KEYWORDS: Final = ("donate_argnums", "donate_argnames")


@dataclass
class Definition:
    """One function definition, kept with its node so differentiation can walk its body."""

    node: ast.FunctionDef | ast.AsyncFunctionDef
    qualname: str
    scope: Scope
    #: Names of functions defined directly in this function's body.
    local: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Made:
    """A module-level function, and what was made of it on the way to jit,
    innermost first: ``(form, positional arguments bound, keywords bound)``."""

    function: str
    steps: tuple[tuple[str, int, frozenset[str]], ...] = ()
    #: The lines of the variables it was read through (``f = partial(g, 1)``
    #: before ``jit(f)``), outermost first.
    via: tuple[int, ...] = ()
    #: A lambda written in the expression (``jax.jit(jax.vmap(lambda v: ...))``),
    #: which is the function itself: no def names it.
    written: ast.Lambda | None = None

    def parameters(self, parameters: tuple[Parameter, ...]) -> tuple[Parameter, ...]:
        """The parameters of what jit wraps: a partial's bound ones left out,
        a vmap's without their descriptions (they are batched)."""
        for form, positional, keywords in self.steps:
            if form == "partial":
                leading = [p for p in parameters if p.kind == "positional"][:positional]
                parameters = tuple(
                    p for p in parameters if p not in leading and p.name not in keywords
                )
            elif form == "new":
                parameters = tuple(
                    Parameter(p.name, p.kind, None, ArraySpec(None, None), p.has_default)
                    for p in parameters
                )
        return parameters


class Definitions:
    """Every function definition of a module, in source order, and its classes."""

    def __init__(
        self, tree: ast.Module, names: Names, specs: Specs, *, module: str, path: str
    ) -> None:
        self.tree = tree
        self.names = names
        self.specs = specs
        self.module = module
        self.path = path
        self.defs: list[Definition] = []
        #: Module-level function name -> its qualname (the first definition wins).
        self.module_functions: dict[str, str] = {}
        #: The definitions under ``if __name__ == "__main__":``, by id.
        self._main = {
            id(node)
            for block in tree.body
            if isinstance(block, ast.If) and is_main_guard(block.test)
            for node in ast.walk(block)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        #: The lines of the statements under the main guard: the build's
        #: import does not run them.
        self._guarded = {
            node.lineno
            for block in tree.body
            if isinstance(block, ast.If) and is_main_guard(block.test)
            for node in module_statements(block.body)
        }
        self._collect(tree.body, prefix="", scope="module", owner=None)

    def resolve(self, node: ast.expr) -> str | None:
        return self.names.resolve(node)

    def _collect(
        self, body: Sequence[ast.stmt], *, prefix: str, scope: Scope, owner: Definition | None
    ) -> None:
        statements = module_statements(body) if scope == "module" else iter(body)
        for statement in statements:
            if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
                qualname = f"{prefix}{statement.name}"
                main = scope == "module" and id(statement) in self._main
                record = Definition(statement, qualname, "main" if main else scope)
                self.defs.append(record)
                if scope == "module":
                    self.module_functions.setdefault(statement.name, qualname)
                if owner is not None:
                    owner.local.setdefault(statement.name, qualname)
                inner = f"{qualname}.<locals>."
                self._collect(statement.body, prefix=inner, scope="nested", owner=record)
            elif isinstance(statement, ast.ClassDef):
                inner_scope: Scope = "method" if scope == "module" else "nested"
                self._collect_class(statement, f"{prefix}{statement.name}.", inner_scope)
            elif (lambda_ := _named_lambda(statement)) is not None:
                # ``predict = lambda inputs: ...``, which ``jax.jit(predict)``
                # may make a jit of: a def of that name, as discovery reads one.
                record = Definition(lambda_, f"{prefix}{lambda_.name}", scope)
                self.defs.append(record)
                if scope == "module":
                    self.module_functions.setdefault(lambda_.name, record.qualname)
                if owner is not None:
                    owner.local.setdefault(lambda_.name, record.qualname)
            elif scope != "module":
                for child in nested_blocks(statement):
                    self._collect(child, prefix=prefix, scope=scope, owner=owner)

    def _collect_class(self, node: ast.ClassDef, prefix: str, scope: Scope) -> None:
        for statement in _class_statements(node.body):
            if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
                qualname = f"{prefix}{statement.name}"
                record = Definition(statement, qualname, scope)
                self.defs.append(record)
                self._collect(
                    statement.body, prefix=f"{qualname}.<locals>.", scope="nested", owner=record
                )
            elif isinstance(statement, ast.ClassDef):
                self._collect_class(statement, f"{prefix}{statement.name}.", scope)

    def functions(self, differentiated: Mapping[str, Differentiation]) -> tuple[FunctionInfo, ...]:
        """Each function, module-level ones first, then in source order; a
        module-level ``f = jax.jit(g)`` is a function ``f`` with ``g``'s signature."""
        found = [self._function(d, differentiated.get(d.qualname)) for d in self.defs]
        for statement, name, record, made in self._jitted_by_call():
            jitted = self._jitted(statement, name, record, made, differentiated)
            if statement.lineno in self._guarded:
                # Made under the main guard: no name holds it once the build
                # imports the module; the call is made again, or recorded
                # where it reads what only the guard binds.
                reads = {n.id for n in ast.walk(statement.value) if isinstance(n, ast.Name)}
                jitted = dataclasses.replace(
                    jitted,
                    scope="main",
                    made=ast.unparse(statement.value),
                    reads=tuple(sorted(n for n in reads if self._guard_only(n))),
                )
            found.append(jitted)
        for owner in self.defs:
            if owner.scope in ("module", "main"):
                local = _locals(owner.node)
                for making, name, record, made in self._jitted_inside(owner):
                    jitted = self._jitted(making, name, record, made, {})
                    assert making.value is not None
                    reads = {n.id for n in ast.walk(making.value) if isinstance(n, ast.Name)}
                    found.append(
                        dataclasses.replace(
                            jitted,
                            qualname=f"{owner.qualname}.<locals>.{name}",
                            scope="nested",
                            rebound=(),
                            made=ast.unparse(making.value),
                            reads=tuple(sorted(reads & local)),
                        )
                    )
        order = {"module": 0, "method": 1, "nested": 1, "main": 1}
        return tuple(sorted(found, key=lambda f: (order[f.scope], f.lineno)))

    def _guard_only(self, name: str) -> bool:
        """Whether only statements under the main guard bind ``name``."""
        lines = self.names.bindings.get(name, [])
        return bool(lines) and all(line in self._guarded for line in lines)

    def _jitted_by_call(self) -> Iterator[tuple[ast.Assign, str, Definition, _Made]]:
        """Module-level ``name = jax.jit(made, ...)``, where ``made`` is a
        module-level def, or one wrapped by ``functools.partial`` and jax's
        transforms (``jax.vmap``, ``jax.grad``, ...)."""
        for statement in module_statements(self.tree.body):
            found = self._jit_assignment(statement)
            if found is not None:
                assert isinstance(statement, ast.Assign)
                yield statement, *found

    def _jit_assignment(
        self, statement: ast.stmt, owner: Definition | None = None
    ) -> tuple[str, Definition, _Made] | None:
        """(the name, the def, what is made of it) where ``statement`` is
        ``name = jax.jit(made, ...)`` of a module-level def, or of a def of
        ``owner``'s own, or in ``owner``, ``return jax.jit(made, ...)``
        (named ``RETURNED``); else None."""
        if (
            isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
        ):
            name = statement.targets[0].id
        elif isinstance(statement, ast.Return) and owner is not None:
            name = RETURNED
        else:
            return None
        if not (
            isinstance(statement.value, ast.Call)
            and self.resolve(statement.value.func) == "jax.jit"
            and len(statement.value.args) == 1
        ):
            return None
        made = self._made(statement.value.args[0], self._scope_variables(statement, owner))
        if made is None:
            return None
        if made.written is not None:
            prefix = f"{owner.qualname}.<locals>." if owner is not None else ""
            scope: Scope = "nested" if owner is not None else "module"
            node = _lambda_def(made.written, made.function)
            return name, Definition(node, f"{prefix}{name}", scope), made
        own = owner.local.get(made.function) if owner is not None else None
        qualname = own or self.module_functions.get(made.function)
        for record in self.defs:
            if record.qualname == qualname and (own is not None or record.scope == "module"):
                return name, record, made
        return None

    def _jitted_inside(
        self, owner: Definition
    ) -> Iterator[tuple[ast.Assign | ast.Return, str, Definition, _Made]]:
        """``name = jax.jit(made, ...)`` in the body of the module-level
        function ``owner``, as ``_jitted_by_call`` finds them at module level,
        or of a def of ``owner``'s own. Where every name the call reads is the
        module's, the build evaluates it over the module's globals; a call
        that reads ``owner``'s variables (``jax.jit(partial(gram, kernel))``
        with ``kernel`` its parameter) only the running program can make, and
        ``ppy record`` exports it from there (``FunctionInfo.reads``). A name
        assigned twice in ``owner`` is left out, as the run could bind either,
        and so are returned jits where ``owner`` returns more than one. A jit
        called where it is made (``jax.jit(loss)(w, x)``) is named by its line
        (``called_name``), where it is the line's only one."""
        statements = function_statements(owner.node.body)
        jits = self._jit_lines(owner.node)
        found = [
            (statement, jitted)
            for statement in (s for own in statements for s in (own, *self._called(own, jits)))
            if (jitted := self._jit_assignment(statement, owner)) is not None
        ]
        returned = sum(1 for _, (name, _, _) in found if name == RETURNED)
        for statement, (name, record, made) in found:
            if name == RETURNED:
                once = returned
            elif name == called_name(statement.lineno):
                once = 1
            else:
                once = _assignments(owner.node, name)
            if once == 1:
                assert isinstance(statement, ast.Assign | ast.Return)
                yield statement, name, record, made

    def _called(self, statement: ast.stmt, jits: Counter[int]) -> Iterator[ast.Assign]:
        """Each ``jax.jit(made)`` that ``statement`` calls where it makes it, as
        the assignment ``<jit-LINE> = jax.jit(made)`` at its place, where it
        is the function's only ``jax.jit`` on its line (``jits``): the run
        knows a call site by its line alone, and python 3.12 runs a list
        comprehension's code in the function's own frame."""
        for call in called_jits(statement):
            if self.resolve(call.func) == "jax.jit" and jits[call.lineno] == 1:
                target = ast.Name(called_name(call.lineno), ast.Store())
                yield ast.copy_location(ast.Assign(targets=[target], value=call), call)

    def _jit_lines(self, node: ast.AST) -> Counter[int]:
        """How many calls of ``jax.jit`` each line of ``node`` holds."""
        return Counter(
            call.lineno
            for call in ast.walk(node)
            if isinstance(call, ast.Call) and self.resolve(call.func) == "jax.jit"
        )

    def _scope_variables(
        self, statement: ast.Assign | ast.Return, owner: Definition | None
    ) -> Callable[[str], ast.Assign | None]:
        """Where ``statement``'s scope (``owner``'s body, or the module) sets
        a variable once, before ``statement``: ``f = partial(g, 1)`` read by
        ``jit(f)``. A variable bound anywhere else too (but by ``statement``
        itself: ``f = jax.jit(f)``) is None: the run could read either value."""
        if owner is not None:
            node = owner.node
            body = list(function_statements(node.body))
        else:
            body = list(module_statements(self.tree.body))

        def bound(name: str) -> int:
            if owner is not None:
                return _assignments(node, name)
            return len(self.names.bindings.get(name, ()))

        target = statement.targets[0] if isinstance(statement, ast.Assign) else None

        def variable(name: str) -> ast.Assign | None:
            found = [
                s
                for s in body
                if isinstance(s, ast.Assign)
                and s is not statement
                and len(s.targets) == 1
                and isinstance(s.targets[0], ast.Name)
                and s.targets[0].id == name
            ]
            itself = isinstance(target, ast.Name) and target.id == name
            if len(found) != 1 or bound(name) != 1 + itself:
                return None
            return found[0] if found[0].lineno < statement.lineno else None

        return variable

    def _made(
        self,
        node: ast.expr,
        variable: Callable[[str], ast.Assign | None] = lambda name: None,
        seen: frozenset[str] = frozenset(),
    ) -> _Made | None:
        """What a jitted expression makes of a function, or None for anything
        else (a call of the program's own). A
        name that is no def but a ``variable`` of the scope is read through
        its value (``marginal_likelihood = partial(gp, ...)``); one that holds
        a lambda is that lambda's def (``_named_lambda``), as is a lambda
        written in the expression."""
        if isinstance(node, ast.Lambda):
            return _Made("<lambda>", written=node)
        if isinstance(node, ast.Name):
            held = None if node.id in seen else variable(node.id)
            if held is None:  # a def
                return _Made(node.id)
            if isinstance(held.value, ast.Lambda):  # a def by another spelling
                return _Made(node.id, via=(held.lineno,))
            through = self._made(held.value, variable, seen | {node.id})
            if through is None:
                return None
            return dataclasses.replace(through, via=(held.lineno, *through.via))
        if not (isinstance(node, ast.Call) and node.args):
            return None
        inner = self._made(node.args[0], variable, seen)
        func = self.resolve(node.func)
        if inner is None or func is None:
            return None
        if func in PARTIAL:
            bound = frozenset(k.arg for k in node.keywords if k.arg is not None)
            if any(k.arg is None for k in node.keywords) or any(
                isinstance(a, ast.Starred) for a in node.args
            ):
                return None  # what **kwargs or *args bind is not known from the source
            step = ("partial", len(node.args) - 1, bound)
            return dataclasses.replace(inner, steps=(*inner.steps, step))
        if func in _SAME_INPUTS:
            return dataclasses.replace(inner, steps=(*inner.steps, ("same", 0, frozenset())))
        if func in _NEW_INPUTS:
            return dataclasses.replace(inner, steps=(*inner.steps, ("new", 0, frozenset())))
        return None

    def _jitted(
        self,
        statement: ast.Assign | ast.Return,
        name: str,
        record: Definition,
        made: _Made,
        differentiated: Mapping[str, Differentiation],
    ) -> FunctionInfo:
        assert isinstance(statement.value, ast.Call)
        call = ast.copy_location(
            ast.Call(func=statement.value.func, args=[], keywords=statement.value.keywords),
            statement,
        )
        # What is staged is the jitted object bound to ``name``: differentiated
        # where it (or a function calling it) is handed to a transform. What
        # happens to ``record``'s Python function elsewhere does not reach it.
        wrapped = self._function(record, differentiated.get(name))
        # ``g = jax.jit(g)`` binds g twice by design: the def and this line,
        # as ``f = partial(g, 1)`` then ``f = jax.jit(f)`` binds f.
        own = {statement.lineno, record.node.lineno, *made.via}
        return dataclasses.replace(
            wrapped,
            qualname=name,
            lineno=statement.lineno,
            decorators=(self._decorator(call),),
            parameters=made.parameters(wrapped.parameters),
            rebound=tuple(line for line in self.names.bindings.get(name, []) if line not in own),
        )

    def _function(self, record: Definition, differentiated: Differentiation | None) -> FunctionInfo:
        node = record.node
        return FunctionInfo(
            module=self.module,
            qualname=record.qualname,
            path=self.path,
            lineno=node.lineno,
            decorators=tuple(self._decorator(d) for d in node.decorator_list),
            parameters=tuple(self._parameters(node.args)),
            returns=ast.unparse(node.returns) if node.returns is not None else None,
            scope=record.scope,
            differentiated=differentiated,
            rebound=self._rebound(record),
        )

    def _rebound(self, record: Definition) -> tuple[int, ...]:
        if record.scope != "module":
            return ()
        lines = self.names.bindings.get(record.node.name, [])
        return tuple(line for line in lines if line != record.node.lineno)

    def _decorator(self, node: ast.expr) -> Decorator:
        if isinstance(node, ast.Call):
            func = self.resolve(node.func)
            keywords = tuple(k.arg or "**" for k in node.keywords)
            given = {
                "static": _argnums(node, _STATIC_KEYWORDS),
                "donated": _argnums(node, _DONATE_KEYWORDS),
            }
            if func in PARTIAL and node.args:
                inner = self.resolve(node.args[0]) or ast.unparse(node.args[0])
                return Decorator(inner, node.lineno, keywords, called=len(node.args) > 1, **given)
            name = func or ast.unparse(node.func)
            return Decorator(name, node.lineno, keywords, called=bool(node.args), **given)
        return Decorator(self.resolve(node) or ast.unparse(node), node.lineno)

    def _parameters(self, args: ast.arguments) -> Iterator[Parameter]:
        positional = [*args.posonlyargs, *args.args]
        first_default = len(positional) - len(args.defaults)
        for index, arg in enumerate(positional):
            yield self._parameter(arg, "positional", index >= first_default)
        if args.vararg is not None:
            yield self._parameter(args.vararg, "var_positional", False)
        for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
            yield self._parameter(arg, "keyword_only", default is not None)
        if args.kwarg is not None:
            yield self._parameter(args.kwarg, "var_keyword", False)

    def _parameter(self, arg: ast.arg, kind: ParameterKind, has_default: bool) -> Parameter:
        return self.specs.describe(arg.arg, kind, arg.annotation, has_default, scalar=True)

    def classes(self) -> dict[str, ClassInfo]:
        """Every module-level class, with the form that makes its fields a tree."""
        found: dict[str, ClassInfo] = {}
        for statement in module_statements(self.tree.body):
            if isinstance(statement, ast.ClassDef):
                found.setdefault(statement.name, self._class(statement))
        return found

    def _class(self, node: ast.ClassDef) -> ClassInfo:
        bases = {self.resolve(base) for base in node.bases}
        decorators = {
            self.resolve(d.func if isinstance(d, ast.Call) else d) or ""
            for d in node.decorator_list
        }
        form: Literal["namedtuple", "typeddict", "dataclass"] | None = None
        if bases & _NAMED_TUPLE:
            form = "namedtuple"
        elif bases & _TYPED_DICT:
            form = "typeddict"
        elif any(name.rpartition(".")[2] == "dataclass" for name in decorators):
            form = "dataclass"
        fields = tuple(
            self.specs.describe(s.target.id, "positional", s.annotation, s.value is not None)
            for s in _class_statements(node.body)
            if isinstance(s, ast.AnnAssign)
            and isinstance(s.target, ast.Name)
            and self.resolve(_unsubscript(s.annotation)) not in _CLASS_VAR
        )
        return ClassInfo(node.name, node.lineno, form, fields)


def _argnums(call: ast.Call, keywords: tuple[str, ...]) -> tuple[int | str, ...]:
    """The literal numbers and names a decorator call gives under ``keywords``
    (``static_argnums`` and ``static_argnames``, say)."""
    found: list[int | str] = []
    for keyword in call.keywords:
        if keyword.arg not in keywords:
            continue
        try:
            value = ast.literal_eval(keyword.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        items = value if isinstance(value, tuple | list) else [value]
        found.extend(v for v in items if isinstance(v, int | str) and not isinstance(v, bool))
    return tuple(found)


def _named_lambda(statement: ast.stmt) -> ast.FunctionDef | None:
    """``name = lambda args: body`` as the def it stands for, at its place."""
    if not (
        isinstance(statement, ast.Assign)
        and len(statement.targets) == 1
        and isinstance(statement.targets[0], ast.Name)
        and isinstance(statement.value, ast.Lambda)
    ):
        return None
    return ast.copy_location(_lambda_def(statement.value, statement.targets[0].id), statement)


def _lambda_def(value: ast.Lambda, name: str) -> ast.FunctionDef:
    """A lambda as the def it stands for, at the lambda's place."""
    since_312: dict[str, Any] = (
        {"type_params": []} if "type_params" in ast.FunctionDef._fields else {}
    )
    node = ast.FunctionDef(
        name=name,
        args=value.args,
        body=[ast.copy_location(ast.Return(value.body), value)],
        decorator_list=[],
        returns=None,
        **since_312,
    )
    return ast.copy_location(node, value)


def _locals(node: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """The names a function binds for itself: its parameters, and whatever
    its body assigns, defines or imports (less what it declares global)."""
    args = node.args
    found = {
        a.arg
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
        if a is not None
    }
    declared: set[str] = set()
    for child in ast.walk(node):
        if child is node:
            continue
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store | ast.Del):
            found.add(child.id)
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(child.name)
        elif isinstance(child, ast.Import | ast.ImportFrom):
            found.update((a.asname or a.name).partition(".")[0] for a in child.names)
        elif isinstance(child, ast.Global):
            declared.update(child.names)
    return found - declared


def _assignments(node: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> int:
    """How many places in a function store to ``name``."""
    return sum(
        1
        for child in ast.walk(node)
        if isinstance(child, ast.Name) and child.id == name and isinstance(child.ctx, ast.Store)
    )


def _class_statements(body: Sequence[ast.stmt]) -> Iterator[ast.stmt]:
    for statement in body:
        yield statement
        if isinstance(statement, ast.If | ast.Try):
            for block in nested_blocks(statement):
                yield from _class_statements(block)


def _unsubscript(node: ast.expr) -> ast.expr:
    return node.value if isinstance(node, ast.Subscript) else node
