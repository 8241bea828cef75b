"""Core's rooms form a graph without a loop, and no two of its modules share a name.

``folders.py`` draws the graph (``nox -s arch`` prints it); these tests hold
core to it, and show on a small tree that a loop made by an import inside a
function is found.
"""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from tests.architecture import folders

ROOT = Path(__file__).resolve().parents[2]


def test_core_has_no_two_modules_of_one_name() -> None:
    # ``imports.py`` in two rooms read as one module in a traceback, a search
    # or an import-linter report; each module's name says its own job.
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(folders.CORE.rglob("*.py")):
        if path.name not in ("__init__.py", "__main__.py"):
            where[path.name].append(path.relative_to(folders.CORE).as_posix())
    clashes = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert clashes == {}


def test_core_rooms_form_no_loop() -> None:
    graph = folders.read()
    assert graph.loops() == [], folders.render(graph)
    # Every folder of core is a room of the graph, and the commands sit
    # above the rooms they put together.
    assert {"artifact", "build", "cli", "commands", "record", "run", "warm"} <= graph.rooms
    arrows = graph.arrows()
    assert {"build", "record", "run"} <= arrows["commands"]
    assert "commands" in arrows["cli"]


def test_core_modules_form_no_loop() -> None:
    # Two modules of one room that import each other (the signatures file and
    # its generalisation did) read as one module in two files.
    graph = folders.read(modules=True)
    assert graph.loops() == [], folders.render(graph, what="modules")
    assert "ppy.record.format" in graph.rooms


def test_the_script_prints_the_graph_and_exits_0() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tests.architecture.folders"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no loop\n" in result.stdout
    assert "no loop between modules either" in result.stdout
    assert "commands" in result.stdout


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "shop" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "shop"


def test_a_loop_made_inside_a_function_is_found(tmp_path: Path) -> None:
    # Python never sees this loop (the import runs only when ``sell`` is
    # called); the graph does, and names the import that closes it.
    shop = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "leaf.py": "VALUE = 1\n",
            "till/__init__.py": "",
            "till/count.py": "from ..stock import shelf\nfrom shop.leaf import VALUE\n",
            "stock/__init__.py": "",
            "stock/shelf.py": (
                "import shop.leaf\n\n\ndef sell():\n    from shop.till.count import total\n"
                "    return total\n"
            ),
        },
    )
    graph = folders.read(shop)
    assert graph.rooms == {"shop", "leaf", "till", "stock"}
    assert graph.arrows() == {
        "shop": set(),
        "leaf": set(),
        "till": {"stock", "leaf"},
        "stock": {"till", "leaf"},
    }
    assert graph.loops() == [["stock", "till"]]
    text = folders.render(graph)
    assert "LOOP between stock, till" in text
    assert "stock -> till: stock/shelf.py:5 imports shop.till.count (inside a function)" in text
    assert "till -> stock: till/count.py:1 imports shop.stock.shelf" in text
    assert folders.main([str(shop)]) == 1
    # The same loop between the two modules.
    assert folders.read(shop, modules=True).loops() == [["shop.stock.shelf", "shop.till.count"]]


def test_a_tree_without_a_loop_is_drawn_in_layers(tmp_path: Path) -> None:
    shop = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "leaf.py": "VALUE = 1\n",
            "stock/__init__.py": "",
            "stock/shelf.py": "def sell():\n    from shop import leaf\n",
            "till/__init__.py": "",
            "till/count.py": "from ..stock.shelf import sell\n",
        },
    )
    graph = folders.read(shop)
    assert graph.loops() == []
    assert folders.layers(graph) == [["leaf", "shop"], ["stock"], ["till"]]
    assert folders.main([str(shop)]) == 0
