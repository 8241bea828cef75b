"""The graph of core's rooms, counting imports made inside functions.

Core (``packages/core/src/ppy``) is in rooms: its folders (``build``,
``run``, ``record``, ...) and its top-level modules (``config``, ``log``,
``plugin``, ...). An arrow from one room to another is an import of the
second made anywhere in the first: at module level, inside a function or
under ``if TYPE_CHECKING``, relative imports resolved. The rooms must form a
graph without a loop, so that each can be read, tested and changed with only
the rooms below it in mind; an import put inside a function hides a loop from
Python, not from this graph.

``python -m tests.architecture.folders`` (``nox -s arch``) prints the graph
and exits 1 when some rooms form a loop, naming the imports that make it; or
when some modules do, inside one room or across rooms (``--modules`` prints
the modules' graph whole).
The source is read with ``ast``; nothing of it is imported.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "packages" / "core" / "src" / "ppy"
#: The rooms that make up what a program imports of ``ppy`` (``import ppy``,
#: ``ppy.xla``, the ``.ppy`` import hook): one room, named for the package.
PACKAGE_ROOM = ("__init__", "annotations", "xla", "_hook")


@dataclass(frozen=True)
class Import:
    """One import of one room by another: where it is made and of what."""

    source: str
    target: str
    module: str
    where: str
    in_function: bool


@dataclass
class Graph:
    """The rooms of a package and the imports between them."""

    package: str
    rooms: set[str] = field(default_factory=set)
    imports: list[Import] = field(default_factory=list)

    def arrows(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {room: set() for room in self.rooms}
        for item in self.imports:
            out[item.source].add(item.target)
        return out

    def loops(self) -> list[list[str]]:
        """The strongly connected groups of more than one room, each sorted."""
        return [sorted(group) for group in _components(self.arrows()) if len(group) > 1]


def room_of(package: str, module: str, root: Path) -> str | None:
    """The room a dotted module of ``package`` belongs to (None: another package)."""
    parts = module.split(".")
    if parts[0] != package:
        return None
    if len(parts) == 1:
        return package
    head = parts[1]
    if (root / head).is_dir():
        return head
    if head in PACKAGE_ROOM:
        return package
    return head


def _is_module(package: str, module: str, root: Path) -> bool:
    parts = module.split(".")
    if parts[0] != package:
        return False
    path = root.joinpath(*parts[1:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _module_name(package: str, path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def _imported(
    tree: ast.Module, module: str, is_package: bool, package: str, root: Path
) -> Iterator[tuple[str, int, bool]]:
    """Each module of ``package`` this source imports: name, line, inside a function."""

    def walk(node: ast.AST, in_function: bool) -> Iterator[tuple[str, int, bool]]:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
            )
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name, child.lineno, inside
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    here = module.split(".") if is_package else module.split(".")[:-1]
                    here = here[: len(here) - child.level + 1]
                    base = ".".join([*here, *([child.module] if child.module else [])])
                for alias in child.names:
                    whole = f"{base}.{alias.name}"
                    # ``from ppy import config`` imports a module, ``from
                    # ppy.config import Config`` a name of one.
                    yield (
                        (whole if _is_module(package, whole, root) else base),
                        child.lineno,
                        inside,
                    )
            yield from walk(child, inside)

    yield from walk(tree, False)


def _node(package: str, module: str, root: Path, modules: bool) -> str | None:
    if not modules:
        return room_of(package, module, root)
    if module.split(".")[0] != package or not _is_module(package, module, root):
        return None
    return module


def read(root: Path = CORE, *, modules: bool = False) -> Graph:
    """The graph of the package whose source folder is ``root``: of its rooms,
    or with ``modules``, of its modules (a package's ``__init__`` by the
    package's name)."""
    package = root.name
    graph = Graph(package)
    for path in sorted(root.rglob("*.py")):
        module = _module_name(package, path, root)
        source = _node(package, module, root, modules)
        assert source is not None
        graph.rooms.add(source)
        tree = ast.parse(path.read_bytes(), filename=str(path))
        for name, line, inside in _imported(
            tree, module, path.name == "__init__.py", package, root
        ):
            target = _node(package, name, root, modules)
            if target is None or target == source:
                continue
            graph.rooms.add(target)
            where = f"{path.relative_to(root).as_posix()}:{line}"
            found = Import(source, target, name, where, inside)
            if found not in graph.imports:  # ``from a import b, c``: one import of a
                graph.imports.append(found)
    return graph


def _components(arrows: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(arrows):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(arrows[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, rest = work[-1]
            step = next(rest, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(arrows.get(step, ())))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    group.append(top)
                    if top == node:
                        break
                found.append(group)
    return found


def layers(graph: Graph) -> list[list[str]]:
    """The rooms in layers, leaves first: each imports only rooms of layers below."""
    arrows = graph.arrows()
    placed: dict[str, int] = {}
    remaining = set(arrows)
    out: list[list[str]] = []
    while remaining:
        ready = sorted(r for r in remaining if arrows[r] - {r} <= placed.keys())
        if not ready:  # a loop: what is left goes in one last layer
            ready = sorted(remaining)
        for room in ready:
            placed[room] = len(out)
        out.append(ready)
        remaining -= set(ready)
    return out


def render(graph: Graph, *, what: str = "rooms") -> str:
    arrows = graph.arrows()
    lines = [f"the {what} of {graph.package}, leaves first (imports inside functions counted):"]
    width = max((len(room) for room in arrows), default=0)
    for number, layer in enumerate(layers(graph)):
        for room in layer:
            below = ", ".join(sorted(arrows[room])) or "-"
            lines.append(f"  {number:2d}  {room:<{width}} -> {below}")
    loops = graph.loops()
    for group in loops:
        lines.append(f"LOOP between {', '.join(group)}; the imports that make it:")
        members = set(group)
        for item in sorted(graph.imports, key=lambda i: (i.source, i.target, i.where)):
            if item.source in members and item.target in members:
                inside = " (inside a function)" if item.in_function else ""
                lines.append(
                    f"  {item.source} -> {item.target}: {item.where} imports {item.module}{inside}"
                )
    if not loops:
        lines.append("no loop")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.architecture.folders",
        description="Print the graph of a package's rooms and find the loops in it.",
    )
    parser.add_argument(
        "root", nargs="?", type=Path, default=CORE, help="the package's source folder"
    )
    parser.add_argument(
        "--modules",
        action="store_true",
        help="draw the graph of its modules too (the rooms' own are checked for loops always)",
    )
    args = parser.parse_args(argv)
    rooms = read(args.root)
    print(render(rooms))
    modules = read(args.root, modules=True)
    if args.modules or modules.loops():
        print(render(modules, what="modules"))
    else:
        print("no loop between modules either")
    return 1 if rooms.loops() or modules.loops() else 0


if __name__ == "__main__":
    sys.exit(main())
