"""Put staged functions in place of the originals as their modules execute.

Binding happens right after each staged function is defined: the module is
compiled from its AST, and after the top-level statement that last binds a
name with an entry in the artifact (its decorated ``def``, or a
``name = jax.jit(function)``) one statement is inserted::

    name = __ppy_bind__("name", name)

on that statement's own line, so that line numbers, and therefore tracebacks,
stay those of the source. Module-level code and ``main()`` then find the
bound function under its name. The ``.ppy`` modules of the project that the
program imports are bound the same way by a finder placed just ahead of
``ppy._hook.PpyFinder``.

A staged function that no module-level statement binds -- a jitted def
inside a function, or under ``if __name__ == "__main__":``, or a
``name = jax.jit(...)`` inside a function -- is bound where the program makes
it, in ``jax.jit`` (``ppy.run.made``), each time it is made: a def by its
code, a call by the lines that make it (``want_made``).

An entry is not bound -- the original stays, and ``run.unbound`` says why --
when its module's source changed since the build, when no runtime is
installed for its kind, or when the runtime raises ``NotBound``.

This module does not import jax: the runtimes do, when they bind.
``ppy.run.program`` runs the program itself with a ``Binder``.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from ppy._hook import PpyFinder, find_ppy_source
from ppy.discovery.names import (
    RETURNED,
    called_jits,
    called_name,
    function_statements,
    module_statements,
)
from ppy.layout import module_name
from ppy.run.made import MadeJits
from ppy.runtime import NotBound, Runtime

if TYPE_CHECKING:
    from ppy.artifact.entry import Entry
    from ppy.artifact.model import Artifact

__all__ = [
    "BIND_NAME",
    "Binder",
    "BindingFinder",
    "Binds",
    "BoundSource",
    "bind_source",
    "want_made",
]

#: The name the inserted statements call; a dunder, so no program uses it.
BIND_NAME = "__ppy_bind__"


def _log() -> Any:
    from ppy.log import get_logger

    return get_logger()


@dataclass(frozen=True)
class BoundSource:
    """A module compiled to bind its staged functions (``bind_source``)."""

    code: CodeType
    #: The staged names a module-level statement binds.
    named: frozenset[str]
    #: Each staged ``owner.<locals>.name`` that ``name = jax.jit(...)`` makes in
    #: the top-level function ``owner``: (``owner``, the lines of the call).
    sites: dict[str, tuple[str, tuple[int, ...]]]


def bind_source(source: bytes, filename: str, staged: frozenset[str]) -> BoundSource:
    """Compile ``source`` with a bind statement after each staged name's last
    top-level binding: its ``def``, or a ``name = jax.jit(function)``; with the
    staged names so bound, and the calls inside functions that make others
    (the rest are defs made where no statement names them).

    The last one also deletes ``__ppy_bind__``, so the program's ``globals()``
    hold no name of ppy's once its staged functions are defined.
    """
    tree = ast.parse(source, filename)
    sites = _call_sites(tree, staged)
    final = {
        name: index
        for index, statement in enumerate(tree.body)
        if (name := _bound_name(statement)) is not None and name in staged
    }
    body: list[ast.stmt] = []
    last = None
    for index, statement in enumerate(tree.body):
        body.append(statement)
        name = _bound_name(statement)
        if name is not None and final.get(name) == index:
            body.append(_bind_statement(name, statement))
            last = len(body)
    if last is not None:
        body.insert(last, _located(ast.Delete([ast.Name(BIND_NAME, ast.Del())]), body[last - 1]))
    tree.body = body
    code = compile(tree, filename, "exec", dont_inherit=True)
    return BoundSource(code, frozenset(final), sites)


def _call_sites(tree: ast.Module, staged: frozenset[str]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """``BoundSource.sites``: the lines of each staged jit made by a call,
    by the function that makes it (``<module>`` for module-level code).
    Discovery took only calls whose name is assigned once in its function,
    a function's one ``return jax.jit(...)``, and a jit called where it is
    made, the only one on its line."""
    found: dict[str, tuple[str, tuple[int, ...]]] = {}
    # ``name = jax.jit(...)`` at module level inside a block (the main guard,
    # a loop): no statement after it binds the name at the top level, so
    # its line does, where the module's code calls jax.jit.
    top = {id(statement) for statement in tree.body}
    for statement in module_statements(tree.body):
        name = _bound_name(statement)
        if name in staged and isinstance(statement, ast.Assign) and id(statement) not in top:
            found[name] = ("<module>", _lines(statement.value))
    if not any(".<locals>." in name for name in staged):
        return found
    for owner in _top_level_defs(tree.body):
        for statement in function_statements(owner.body):
            returned = isinstance(statement, ast.Return) and isinstance(statement.value, ast.Call)
            name = RETURNED if returned else _bound_name(statement)
            qualname = f"{owner.name}.<locals>.{name}"
            made = statement.value if isinstance(statement, ast.Assign | ast.Return) else None
            if qualname in staged and made is not None:
                # A function returns one jit at most (discovery): the lines of
                # its other returns never call jax.jit themselves.
                lines = found.get(qualname, (owner.name, ()))[1]
                found[qualname] = (owner.name, (*lines, *_lines(made)))
            for call in called_jits(statement):
                # A jit called where it is made, named by its line (discovery).
                qualname = f"{owner.name}.<locals>.{called_name(call.lineno)}"
                if qualname in staged:
                    found[qualname] = (owner.name, _lines(call))
    return found


def _lines(node: ast.expr) -> tuple[int, ...]:
    """The lines an expression spans: jax.jit is called from one of them."""
    return tuple(range(node.lineno, (node.end_lineno or node.lineno) + 1))


def _top_level_defs(body: Sequence[ast.stmt]) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The functions a module defines at its top level, under the main guard too."""
    found: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
    for statement in body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            found.append(statement)
        elif isinstance(statement, ast.If | ast.Try):
            found.extend(_top_level_defs([*statement.body, *statement.orelse]))
    return found


def _bound_name(statement: ast.stmt) -> str | None:
    """The name a top-level ``def`` or single-target assignment binds."""
    if isinstance(statement, ast.FunctionDef):
        return statement.name
    if (
        isinstance(statement, ast.Assign)
        and len(statement.targets) == 1
        and isinstance(statement.targets[0], ast.Name)
    ):
        return statement.targets[0].id
    return None


def _bind_statement(name: str, definition: ast.stmt) -> ast.stmt:
    call = ast.Call(
        func=ast.Name(BIND_NAME, ast.Load()),
        args=[ast.Constant(name), ast.Name(name, ast.Load())],
        keywords=[],
    )
    statement = ast.Assign(targets=[ast.Name(name, ast.Store())], value=call)
    return _located(statement, definition)


def _located(statement: ast.stmt, at: ast.stmt) -> ast.stmt:
    """``statement`` on ``at``'s line: a traceback through it points there."""
    for node in ast.walk(statement):
        node.lineno = node.end_lineno = at.lineno  # type: ignore[attr-defined]
        node.col_offset = node.end_col_offset = at.col_offset  # type: ignore[attr-defined]
    return statement


class Binder:
    """Decides, module by module, which entries to bind, and binds them."""

    def __init__(
        self,
        artifact: Artifact | None,
        runtimes: Mapping[str, Runtime],
        root: Path,
    ) -> None:
        self.artifact = artifact
        self.runtimes = runtimes
        self.root = root
        self.jits = MadeJits()

    def modules(self) -> set[str]:
        """The modules that have something to bind."""
        return {e.module for e in self.artifact.entries} if self.artifact is not None else set()

    def entries(self, module: str | None, source: bytes) -> dict[str, Entry]:
        """The entries of ``module`` that may be bound, by qualname."""
        if self.artifact is None or module is None:
            return {}
        found = {e.qualname: e for e in self.artifact.entries if e.module == module}
        if not found:
            return {}
        record = self.artifact.module(module)
        current = hashlib.sha256(source).hexdigest()
        if record is None or record.sha256 != current:
            for entry in found.values():
                self._unbound(entry, "source changed since the build")
            return {}
        return found

    def binder(self, entries: Mapping[str, Entry]) -> Callable[[str, Any], Any]:
        """The ``__ppy_bind__`` of one module."""

        def bind(qualname: str, original: Any) -> Any:
            entry = entries[qualname]
            runtime = self.runtimes.get(entry.kind)
            if runtime is None:
                self._unbound(entry, f"no runtime for entry kind {entry.kind!r} is installed")
                return original
            try:
                bound = runtime.bind(entry, original)
            except NotBound as refusal:
                self._unbound(entry, refusal.reason)
                return original
            except Exception as error:
                self._unbound(
                    entry, f"the {entry.kind} runtime failed: {type(error).__name__}: {error}"
                )
                return original
            _log().info("run.bind", module=entry.module, function=entry.qualname, kind=entry.kind)
            return bound

        return bind

    def _unbound(self, entry: Entry, reason: str) -> None:
        _log().warning("run.unbound", module=entry.module, function=entry.qualname, reason=reason)

    def code(
        self, path: str, module: str | None
    ) -> tuple[CodeType, Callable[[str, Any], Any] | None]:
        """The module's code, named ``path``, and the ``__ppy_bind__`` it calls
        (None: it binds nothing)."""
        source = Path(path).read_bytes()
        entries = self.entries(module, source)
        bound = bind_source(source, path, frozenset(entries))
        if not entries:
            return bound.code, None
        bind = self.binder(entries)
        want_made(self.jits, path, frozenset(entries), bound, bind)
        return bound.code, bind


def want_made(
    jits: MadeJits,
    path: str,
    staged: frozenset[str],
    bound: BoundSource,
    bind: Callable[[str, Any], Any],
) -> None:
    """Have ``bind(qualname, jitted)`` called each time the program makes a jit
    of a ``staged`` qualname that no module-level statement binds: a def found
    by its code, a ``name = jax.jit(...)`` in a function by the lines of its call."""
    for qualname in sorted(staged - bound.named - set(bound.sites)):
        jits.want(path, qualname, functools.partial(bind, qualname))
    for qualname, (owner, lines) in sorted(bound.sites.items()):
        jits.want_site(path, owner, lines, functools.partial(bind, qualname))


class Binds(Protocol):
    """What ``BindingFinder`` and ``run_program`` need of a binder: a ``Binder``,
    or ``ppy record``'s recorder, which wraps functions instead; each with the
    jits it wants where the program makes them (``jits``)."""

    root: Path
    jits: MadeJits

    def modules(self) -> set[str]: ...

    def code(
        self, path: str, module: str | None
    ) -> tuple[CodeType, Callable[[str, Any], Any] | None]:
        """The code of the module at ``path`` (the filename its code carries),
        and the ``__ppy_bind__`` it calls, or None."""


class _BindingLoader(importlib.machinery.SourceFileLoader):
    """Executes a project ``.ppy`` module with its staged functions bound.

    The module is executed by importlib's own ``exec_module``, which runs the
    code ``get_code`` gives through ``_call_with_frames_removed``: an error
    in the module's code reaches the program with importlib's frames taken
    out, as python takes them out for a module it loads itself. The code is
    made, and ``__ppy_bind__`` put in the module, as the module is created.
    """

    def __init__(self, binder: Binds, fullname: str, path: str, module: str) -> None:
        super().__init__(fullname, path)
        self.binder = binder
        self.module = module

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        try:
            code, bind = self.binder.code(self.path, self.module)
        except SyntaxError:
            # importlib's own get_code raises it again, from frames python takes out.
            return None
        # On the instance, and only here: where the source does not compile,
        # the class's get_code (importlib's own) raises the SyntaxError again,
        # with no frame of ppy's between importlib's.
        vars(self)["get_code"] = lambda fullname: code
        module = ModuleType(spec.name)
        if bind is not None:
            module.__dict__[BIND_NAME] = bind
        return module


class BindingFinder(importlib.abc.MetaPathFinder):
    """Finds the project's ``.ppy`` modules that have entries in the artifact."""

    def __init__(self, binder: Binds) -> None:
        self.binder = binder
        self.modules = binder.modules()
        #: The file stems those modules can be found under. Every import that
        #: the ordinary finders miss (jax tries dozens of optional ones) comes
        #: here; only these names are worth a look on disk.
        self.stems = {name.rpartition(".")[2] for name in self.modules}

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.rpartition(".")[2] not in self.stems:
            return None
        source = find_ppy_source(fullname, path)
        if source is None:
            return None
        name = module_name(self.binder.root.resolve(), Path(source).resolve())
        if name not in self.modules:
            return None  # nothing to bind: the ordinary .ppy finder loads it
        loader = _BindingLoader(self.binder, fullname, source, name)
        return importlib.util.spec_from_file_location(fullname, source, loader=loader)

    def install(self) -> None:
        """Go just ahead of the plain ``.ppy`` finder, which would load unbound."""
        for index, existing in enumerate(sys.meta_path):
            if isinstance(existing, PpyFinder):
                sys.meta_path.insert(index, self)
                return
        sys.meta_path.append(self)

    def remove(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)
