"""Which functions a module differentiates: handed to a jax transform, directly or
through the functions that call them.

A plugin stages such a function only with a VJP of its own, for the
transforms it serves (``Requirements.differentiable``); policy reads the
route and the transforms found here (``score is differentiated (handed to
jax.jacrev at model.ppy:30 via loss)``) to say why one stays.
"""

from __future__ import annotations

import ast
import dataclasses
from collections import deque
from collections.abc import Iterator
from typing import Final

from ppy.discovery.definitions import PARTIAL, Definition, Definitions
from ppy.discovery.names import Names
from ppy.discovery.records import Differentiation

__all__ = ["TRANSFORMS", "differentiated"]

#: jax transforms that differentiate the function handed to them.
TRANSFORMS: Final[frozenset[str]] = frozenset(
    f"jax.{name}"
    for name in (
        "grad",
        "value_and_grad",
        "vjp",
        "jvp",
        "jacfwd",
        "jacrev",
        "hessian",
        "linearize",
    )
)


def differentiated(names: Names, definitions: Definitions) -> dict[str, Differentiation]:
    """Qualname -> how the module differentiates it, for each function it does."""
    return _Differentiation(names, definitions).find()


class _Differentiation:
    """Which functions the module hands to a jax transform, directly or through calls."""

    def __init__(self, names: Names, definitions: Definitions) -> None:
        self.names = names
        self.definitions = definitions
        self.by_qualname = {d.qualname: d for d in definitions.defs}

    def find(self) -> dict[str, Differentiation]:
        seeds: list[tuple[int, str, str, tuple[str, ...]]] = []
        for call, scope in self._calls():
            transform = self._transform_of(call)
            if transform is None:
                continue
            target = call.args[0] if call.args else _keyword(call, "fun")
            if target is None:
                continue
            for qualname, via in self._targets(target, scope, seen=frozenset()):
                seeds.append((call.lineno, transform, qualname, via))
        for record in self.definitions.defs:
            for decorator in record.node.decorator_list:
                transform = self._decorator_transform(decorator)
                if transform is not None:
                    seeds.append((decorator.lineno, transform, record.qualname, ()))
        result: dict[str, Differentiation] = {}
        reached: dict[str, set[str]] = {}
        for lineno, transform, qualname, via in sorted(seeds):
            self._spread(Differentiation(transform, lineno, via), qualname, result, reached)
        return {
            qualname: dataclasses.replace(found, transforms=tuple(sorted(reached[qualname])))
            for qualname, found in result.items()
        }

    def _spread(
        self,
        found: Differentiation,
        start: str,
        result: dict[str, Differentiation],
        reached: dict[str, set[str]],
    ) -> None:
        queue: deque[tuple[str, tuple[str, ...]]] = deque([(start, found.via)])
        visited: set[str] = set()
        while queue:
            qualname, via = queue.popleft()
            if qualname in visited:
                continue
            visited.add(qualname)
            reached.setdefault(qualname, set()).add(found.transform)
            known = result.get(qualname)
            if known is None or len(via) < len(known.via):
                result[qualname] = Differentiation(found.transform, found.lineno, via)
            record = self.by_qualname.get(qualname)
            if record is None:
                # A module-level name bound to what a call made of functions
                # (``f = jax.jit(g)``): differentiating it differentiates them.
                value = self.names.values.get(qualname)
                if value is not None:
                    for callee, _ in self._targets(value, None, frozenset({qualname})):
                        queue.append((callee, (*via, qualname)))
                continue
            name = record.qualname.rpartition(".")[2]
            for callee in self._referenced(record):
                queue.append((callee, (*via, name)))

    def _referenced(self, record: Definition) -> list[str]:
        """Functions a function's body refers to: its calls and what it passes on."""
        names: list[str] = []
        for statement in record.node.body:
            for node in ast.walk(statement):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    qualname = self._lookup(node.id, record)
                    if qualname is not None and qualname != record.qualname:
                        names.append(qualname)
        return names

    def _lookup(self, name: str, scope: Definition | None) -> str | None:
        """The def a name refers to, or the module-level name itself where an
        assignment binds it to a call's result (``f = jax.jit(g)`` is staged
        under ``f``)."""
        found = self._def(name, scope)
        if found is None and isinstance(self.names.values.get(name), ast.Call):
            return name
        return found

    def _def(self, name: str, scope: Definition | None) -> str | None:
        if scope is not None and name in scope.local:
            return scope.local[name]
        return self.definitions.module_functions.get(name)

    def _calls(self) -> Iterator[tuple[ast.Call, Definition | None]]:
        """Every call in the module with the function it appears in (None at module level)."""
        owners: dict[int, Definition] = {}
        for record in sorted(self.definitions.defs, key=lambda d: d.qualname.count(".")):
            for node in ast.walk(record.node):
                owners[id(node)] = record
        for node in ast.walk(self.names.tree):
            if isinstance(node, ast.Call):
                yield node, owners.get(id(node))

    def _transform_of(self, call: ast.Call) -> str | None:
        name = self.names.resolve(call.func)
        if name in TRANSFORMS:
            return name
        func = call.func
        if isinstance(func, ast.Call) and self.names.resolve(func.func) in PARTIAL and func.args:
            inner = self.names.resolve(func.args[0])
            if inner in TRANSFORMS:
                return inner
        return None

    def _decorator_transform(self, node: ast.expr) -> str | None:
        if isinstance(node, ast.Call):
            if self.names.resolve(node.func) in PARTIAL and node.args:
                node = node.args[0]
            else:
                node = node.func
        name = self.names.resolve(node)
        return name if name in TRANSFORMS else None

    def _targets(
        self, node: ast.expr, scope: Definition | None, seen: frozenset[str]
    ) -> Iterator[tuple[str, tuple[str, ...]]]:
        if isinstance(node, ast.Name):
            qualname = self._def(node.id, scope)
            if qualname is not None:
                yield qualname, ()
                return
            value = self.names.values.get(node.id)
            if value is not None and node.id not in seen:
                if isinstance(value, ast.Call):
                    yield node.id, ()
                yield from self._targets(value, None, seen | {node.id})
        elif isinstance(node, ast.Lambda):
            for child in ast.walk(node.body):
                if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load):
                    qualname = self._lookup(child.id, scope)
                    if qualname is not None:
                        yield qualname, ("<lambda>",)
        elif isinstance(node, ast.Call) and node.args:
            # functools.partial(score, ...), jax.jit(score), jax.vmap(score): the
            # function handed on is the first argument.
            yield from self._targets(node.args[0], scope, seen)


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    return None
