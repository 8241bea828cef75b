"""What a program's source does that a warm server cannot serve faithfully.

jax reads its ``JAX_*`` variables when it is imported. In a direct run a
program that sets one before ``import jax`` (``os.environ["JAX_ENABLE_X64"]
= "1"``) gets it; a warm child's jax was imported by the server, before the
program ran, and would silently keep the server's value. So a program whose
file writes such a variable, or a variable named only at run time, runs
cold. Variables read when the backend starts (``XLA_FLAGS``) are fine: the
server never starts it.

The program's own file is read, not the modules it imports; docs/warm-start.md
says so.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Final

__all__ = ["IMPORT_TIME_PREFIXES", "environment_write"]

#: Variables read when jax is imported (its configuration flags).
IMPORT_TIME_PREFIXES: Final = ("JAX_",)


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
            if key is None:
                return (
                    f"{program.name}:{line} sets an environment variable named at run "
                    "time, which jax may read at import; the server imported jax already"
                )
            if key.startswith(IMPORT_TIME_PREFIXES):
                return (
                    f"{program.name}:{line} sets {key}, which jax reads when it is "
                    "imported; the server imported jax already"
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
