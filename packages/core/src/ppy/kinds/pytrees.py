"""Tree structures of staged inputs and outputs, as plain data an artifact can hold.

A staged function of pytrees is exported flat: the export takes the leaves
of its inputs and returns the leaves of its outputs, so its own tree is a
tuple of arrays that needs no pytree serialization. What the tree around
those leaves was is kept here, in two forms:

- the inputs' structure as a digest (``structure``): the run-time guard
  compares a call's structure with it, so a call with another tree takes
  the original path;
- the outputs' structure as a recipe (``recipe``): JSON that rebuilds the
  tree in the running program (``rebuild``) from containers, named tuples
  found by name, and, for any custom node (an equinox Module, a flax struct,
  a FrozenDict), the subtree of the call's own inputs it was equal to at
  build time. A custom node the inputs do not hold cannot be rebuilt
  without tracing; ``Unrebuildable`` says so, and the function is not
  staged.

A class is named by its module and qualified name. The program's own module
runs as ``__main__`` under ``ppy run`` and was imported under its name at
build time; ``main`` is that name, and ``__main__`` reads as it.

This module needs no jax: a tree structure is read through its
``node_data()`` and ``children()``, and rebuilt through the functions the
caller passes.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ppy.kinds.fingerprint import Unreadable, fingerprint

__all__ = [
    "Unrebuildable",
    "class_name",
    "rebuild",
    "recipe",
    "reference",
    "resolve",
    "structure",
]

#: The leaf of a recipe.
LEAF = "*"


class Unrebuildable(Exception):
    """An output tree with a node the running program could not rebuild."""


def class_name(kind: type, main: str | None = None) -> str:
    """``module:qualname``, with ``__main__`` read as ``main``."""
    module = kind.__module__
    if module == "__main__" and main is not None:
        module = main
    return f"{module}:{kind.__qualname__}"


def reference(value: Any, main: str | None = None) -> str | None:
    """``module:name`` under which a module holds ``value`` itself (a class, a
    function, a sentinel such as equinox's ``Missing``), or None where no
    module does. Resolving it gives back the same object, or it is not given."""
    module, name = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if not (isinstance(module, str) and isinstance(name, str)):
        # An instance: a sentinel is found under a name of its class's module.
        module = type(value).__module__
        space = vars(sys.modules[module]) if module in sys.modules else {}
        name = next((key for key, item in space.items() if item is value), None)
    if name is None or resolve(f"{module}:{name}") is not value:
        return None
    return f"{main if module == '__main__' and main is not None else module}:{name}"


def resolve(ref: str) -> Any:
    """The object a ``module:qualname`` names, or None. Only modules already
    imported are looked in: a reference never imports (runs) anything."""
    module, _, name = ref.partition(":")
    found: Any = sys.modules.get(module)
    for part in name.split("."):
        found = getattr(found, part, None)
    return found


def structure(treedef: Any, *, main: str | None = None) -> str:
    """``sha256:HEX`` of a tree structure: each node's class and metadata.

    ``Unreadable`` when a node's metadata has no fingerprint (it holds an
    object ppy cannot compare).
    """
    digest = hashlib.sha256()
    _write_structure(treedef, digest, main)
    return f"sha256:{digest.hexdigest()}"


def _write_structure(treedef: Any, digest: Any, main: str | None) -> None:
    data = treedef.node_data()
    if data is None:
        digest.update(b"leaf;")
        return
    kind, aux = data
    try:
        aux_print = fingerprint(aux, limit=0, main=main)
    except Unreadable as error:
        raise Unreadable(f"its tree holds a {kind.__qualname__} whose metadata {error}") from None
    children = treedef.children()
    digest.update(f"{class_name(kind, main)}|{aux_print}|{len(children)};".encode())
    for child in children:
        _write_structure(child, digest, main)


def _is_namedtuple(kind: type) -> bool:
    return issubclass(kind, tuple) and hasattr(kind, "_fields")


def _subtrees(treedef: Any, path: tuple[int, ...] = ()) -> Any:
    yield path, treedef
    for index, child in enumerate(treedef.children()):
        yield from _subtrees(child, (*path, index))


def recipe(out_tree: Any, in_tree: Any, *, main: str | None = None) -> Any:
    """JSON that rebuilds ``out_tree`` given a call's ``in_tree`` (``rebuild``)."""
    inputs = [(path, sub) for path, sub in _subtrees(in_tree) if sub.node_data() is not None]
    return _recipe(out_tree, inputs, main)


def _recipe(node: Any, inputs: Sequence[tuple[tuple[int, ...], Any]], main: str | None) -> Any:
    data = node.node_data()
    if data is None:
        return LEAF
    kind, aux = data
    children = node.children()
    if kind is type(None):
        return None
    if kind in (tuple, list):
        return {kind.__name__: [_recipe(c, inputs, main) for c in children]}
    if kind is dict and all(isinstance(k, str | int) and not isinstance(k, bool) for k in aux):
        return {"dict": [[k, _recipe(c, inputs, main)] for k, c in zip(aux, children, strict=True)]}
    for path, subtree in inputs:
        if subtree == node:
            return {"input": list(path)}
    if _is_namedtuple(kind):
        return {
            "namedtuple": class_name(kind, main),
            "fields": [_recipe(c, inputs, main) for c in children],
        }
    raise Unrebuildable(
        f"its output holds a {kind.__module__}.{kind.__qualname__} that none of its inputs "
        "holds, which ppy cannot rebuild without tracing"
    )


def rebuild(
    plan: Any,
    in_tree: Any,
    *,
    unflatten: Callable[[Any, list[Any]], Any],
    structure_of: Callable[[Any], Any],
    main: str | None = None,
) -> Any:
    """The output tree structure ``plan`` (a ``recipe``) describes, for a call
    whose inputs have ``in_tree``; ``Unrebuildable`` where it cannot be.

    ``unflatten`` and ``structure_of`` are jax's ``tree_unflatten`` and
    ``tree_structure``: the tree is rebuilt as a value with placeholder
    leaves, whose structure is the answer.
    """
    leaf = object()
    return structure_of(_value(plan, in_tree, unflatten, leaf, main))


def _value(plan: Any, in_tree: Any, unflatten: Any, leaf: object, main: str | None) -> Any:
    if plan == LEAF:
        return leaf
    if plan is None:
        return None
    if not isinstance(plan, dict) or len(plan) not in (1, 2):
        raise Unrebuildable(f"the output recipe {plan!r} does not read")
    for container in ("tuple", "list"):
        if container in plan:
            items = [_value(p, in_tree, unflatten, leaf, main) for p in plan[container]]
            return tuple(items) if container == "tuple" else items
    if "dict" in plan:
        return {k: _value(p, in_tree, unflatten, leaf, main) for k, p in plan["dict"]}
    if "input" in plan:
        subtree = in_tree
        for index in plan["input"]:
            children = subtree.children()
            if not isinstance(index, int) or not 0 <= index < len(children):
                raise Unrebuildable("the call's inputs do not hold the tree the build saw")
            subtree = children[index]
        return unflatten(subtree, [leaf] * subtree.num_leaves)
    if "namedtuple" in plan:
        kind = _find_class(plan["namedtuple"], main)
        return kind(*(_value(p, in_tree, unflatten, leaf, main) for p in plan["fields"]))
    raise Unrebuildable(f"the output recipe {plan!r} does not read")


def _find_class(name: Any, main: str | None) -> Any:
    """A class the program has already imported; nothing is imported here."""
    module_name, _, qualname = str(name).partition(":")
    module = sys.modules.get(module_name)
    if module is None and module_name == main:
        module = sys.modules.get("__main__")
    found: Any = module
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if not isinstance(found, type):
        raise Unrebuildable(f"the program has no class {module_name}.{qualname} loaded")
    return found
