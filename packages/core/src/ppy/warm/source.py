"""What a program's source says that a warm server cannot serve faithfully.

jax reads its ``JAX_*`` variables when it is imported, numpy its ``NPY_*``
ones. In a direct run a program that sets one before ``import jax``
(``os.environ["JAX_ENABLE_X64"] = "1"``) gets it; a warm child's jax was
imported by the server. The check that decides is the child's, when the
program first imports jax (``ppy.warm.watch``): it sees every way of setting
a variable. This one is only the early answer for the common form, a literal
name written in the program's own file, which sends the run cold before a
server is even asked. Variables read when the backend starts (``XLA_FLAGS``)
are fine: the server never starts it.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Final

__all__ = ["IMPORT_TIME_PREFIXES", "environment_write"]

#: Variables read when jax (its configuration flags) or numpy is imported.
IMPORT_TIME_PREFIXES: Final = ("JAX_", "NPY_")


def environment_write(program: Path) -> str | None:
    """Why ``program`` cannot be served warm because of what it writes to the
    environment, or None."""
    try:
        tree = ast.parse(program.read_bytes(), filename=str(program))
    except (OSError, SyntaxError, ValueError):
        return None  # the run reports it as python would
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 1)
        for key in _written_keys(node):
            if key is not None and key.startswith(IMPORT_TIME_PREFIXES):
                return (
                    f"{program.name}:{line} sets {key}, which is read when jax or numpy "
                    "is imported; the server imported them already"
                )
    return None


def _is_environ(node: ast.expr) -> bool:
    """``os.environ`` or a bare ``environ``."""
    if isinstance(node, ast.Attribute):
        return node.attr == "environ"
    return isinstance(node, ast.Name) and node.id == "environ"


def _key(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _written_keys(node: ast.AST) -> list[str | None]:
    """The keys ``node`` writes to ``os.environ`` (None for one not known from
    the source)."""
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [
            _key(target.slice)
            for target in targets
            if isinstance(target, ast.Subscript) and _is_environ(target.value)
        ]
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return []
    method, owner = node.func.attr, node.func.value
    if method == "putenv" and isinstance(owner, ast.Name) and owner.id == "os":
        return [_key(node.args[0]) if node.args else None]
    if not _is_environ(owner):
        return []
    if method in ("setdefault", "__setitem__"):
        return [_key(node.args[0]) if node.args else None]
    if method == "update":
        keys: list[str | None] = [keyword.arg for keyword in node.keywords]
        for argument in node.args:
            if isinstance(argument, ast.Dict):
                keys += [_key(k) for k in argument.keys]
            else:
                keys.append(None)
        return keys
    return []
