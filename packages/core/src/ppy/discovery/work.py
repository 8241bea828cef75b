"""The work a module does when it is imported, told from its source.

The build imports a module to trace its functions, so whatever the module
does at import runs once more at build time: a program that appends to a
log, renames a file or deletes one at module level would do it twice. Such
work is found here before anything is imported. Work is a module-level
``with``, a loop, or a statement that calls something for its effect
(``main()``, ``os.rename(...)``), other than the setup that only touches the
process (``print``, ``jax.config.update``, ``os.environ``, ``sys.path``,
warnings and print options). Definitions (``def``, ``class``, imports,
assignments such as ``model = MLP()``) are not work, and neither is what
runs under ``if __name__ == "__main__":``, which an import skips.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from typing import Final

from ppy.discovery.names import Names, is_main_guard
from ppy.discovery.records import ModuleInfo

__all__ = ["SETUP", "importing_work", "work"]

#: Calls that set the process up and leave nothing behind it.
SETUP: Final = frozenset(
    {
        "print",
        "jax.config.update",
        "os.environ.setdefault",
        "os.environ.update",
        "sys.path.insert",
        "sys.path.append",
        "sys.setrecursionlimit",
        "warnings.filterwarnings",
        "warnings.simplefilter",
        "logging.basicConfig",
        "numpy.set_printoptions",
        "jax.numpy.set_printoptions",
        "numpy.random.seed",
        "random.seed",
    }
)
#: How many statements a module's work is named by.
_SHOWN: Final = 3


def work(tree: ast.Module, names: Names) -> tuple[str, ...]:
    """The first statements of the module's work, as ``line N: source``."""
    found = []
    for statement in _work(tree.body, names):
        text = ast.unparse(statement).splitlines()[0]
        found.append(f"line {statement.lineno}: {text if len(text) <= 60 else text[:57] + '...'}")
        if len(found) == _SHOWN:
            break
    return tuple(found)


def _work(body: Sequence[ast.stmt], names: Names) -> Iterator[ast.stmt]:
    for statement in body:
        if isinstance(statement, ast.If):
            if not is_main_guard(statement.test):
                yield from _work(statement.body, names)
                yield from _work(statement.orelse, names)
        elif isinstance(statement, ast.Try):
            for block in (statement.body, statement.orelse, statement.finalbody):
                yield from _work(block, names)
            for handler in statement.handlers:
                yield from _work(handler.body, names)
        elif _is_work(statement, names):
            yield statement


def _is_work(statement: ast.stmt, names: Names) -> bool:
    if isinstance(statement, ast.With | ast.AsyncWith | ast.For | ast.AsyncFor | ast.While):
        return True
    return isinstance(statement, ast.Expr) and _effect(statement.value, names)


def _effect(value: ast.expr, names: Names) -> bool:
    if isinstance(value, ast.Await):
        return True
    if not isinstance(value, ast.Call):
        return False
    return names.resolve(value.func) not in SETUP


def importing_work(modules: Sequence[ModuleInfo]) -> dict[str, tuple[str, str]]:
    """For each module whose import runs work, its own or that of a project
    module it imports (at any depth): that module's name and its first work."""
    by_name = {m.name: m for m in modules}
    found: dict[str, tuple[str, str]] = {}
    for module in modules:
        queue, seen = [module.name], {module.name}
        while queue:
            current = by_name[queue.pop(0)]
            if current.work:
                found[module.name] = (current.name, current.work[0])
                break
            for name in sorted(current.imports):
                if name in by_name and name not in seen:
                    seen.add(name)
                    queue.append(name)
    return found
