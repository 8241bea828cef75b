"""``import ppy`` as a program sees it under plain CPython."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import ppy
import pytest
from ppy import xla


def test_import_ppy_loads_no_heavy_dependency() -> None:
    heavy = "('jax', 'importlib.metadata', 'structlog')"
    code = f"import ppy, sys; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_no_module_of_core_imports_jax_as_it_is_imported() -> None:
    """Core imports jax only inside the functions that run where the program
    has imported it (``ppy.kinds.dispatch``, recording): a module of core
    that imported it at its top would put jax's start-up on every command,
    and ahead of a program that sets ``JAX_ENABLE_X64`` before its own import."""
    code = (
        "import importlib, pkgutil, sys, ppy\n"
        "names = [m.name for m in pkgutil.walk_packages(ppy.__path__, 'ppy.')]\n"
        "names = [n for n in names if n != 'ppy.__main__']\n"
        "for name in names: importlib.import_module(name)\n"
        "print(len(names), sorted(m for m in ('jax', 'jaxlib', 'numpy', 'ml_dtypes') "
        "if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    count, loaded = out.stdout.split(" ", 1)
    assert int(count) > 50 and loaded.strip() == "[]"


def test_rich_is_imported_only_where_a_line_is_drawn(tmp_path: Path) -> None:
    """rich draws ``ppy build``'s progress line on a terminal (``ppy.progress``)
    and costs tens of milliseconds to import: no module of core imports it as
    it is imported, and a ``ppy run`` never does."""
    code = (
        "import importlib, pkgutil, sys, ppy\n"
        "names = [m.name for m in pkgutil.walk_packages(ppy.__path__, 'ppy.')]\n"
        "for name in names: name != 'ppy.__main__' and importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'rich'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

    (tmp_path / "pyproject.toml").write_text('[project]\nname = "plain"\n')
    (tmp_path / "model.ppy").write_text('print("hi")\n')
    for options in (["--no-build"], []):
        ran = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "ppy", "run", *options, "model.ppy"],
            cwd=tmp_path,
            env={**os.environ, "PPY_CACHE_DIR": str(tmp_path / "cache")},
            capture_output=True,
            text=True,
            check=True,
        )
        assert ran.stdout == "hi\n"
        imported = [line.rsplit("|", 1)[-1].strip() for line in ran.stderr.splitlines()]
        assert [m for m in imported if m.split(".")[0] == "rich"] == [], options


def test_shape_keeps_ints_and_symbolic_dims() -> None:
    assert ppy.Shape("B", 4).dims == ("B", 4)
    assert ppy.Shape("2*B", "max(B, 1)", 0).dims == ("2*B", "max(B, 1)", 0)
    assert ppy.Shape() == ppy.Shape()


@pytest.mark.parametrize(
    ("dims", "message"),
    [
        ((-1,), "negative"),
        ((1.5,), "is a float"),
        ((True,), "is a bool"),
        (("",), "is not a dimension"),
        (("B +",), "is not a dimension"),
        (("x.y",), "is not a dimension"),
        (("4",), "write it as the int 4"),
    ],
)
def test_shape_rejects_bad_dims_with_a_clear_message(
    dims: tuple[object, ...], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ppy.Shape(*dims)  # type: ignore[arg-type]


def test_dtype_names_the_allowed_dtypes_when_wrong() -> None:
    assert ppy.DType("bfloat16").name == "bfloat16"
    with pytest.raises(
        ValueError, match=r"'float' is not a dtype name; use one of: bfloat16, bool"
    ):
        ppy.DType("float")


def test_like_keeps_the_axes_it_marks_in_one_order() -> None:
    def make() -> None: ...

    assert ppy.Like(make).axes == ()
    marked = ppy.Like(make, axes={-1: "T", 0: "B"})
    assert marked.axes == ((0, "B"), (-1, "T"))
    assert marked == ppy.Like(make, axes={0: "B", -1: "T"}) != ppy.Like(make)
    assert repr(marked) == "ppy.Like(make, axes={0: 'B', -1: 'T'})"


@pytest.mark.parametrize(
    ("axes", "message"),
    [
        ([0], r"axes=\[0\] is a list; give a dict from an axis of every leaf"),
        ({"0": "B"}, r"axes key '0' is a str; a key is an axis number"),
        ({True: "B"}, r"axes key True is a bool"),
        ({0: 32}, r"axes\[0\] is 32, which is not a symbolic name; .* such as \"B\""),
        ({0: "2*B"}, r"axes\[0\] is '2\*B', which is not a symbolic name"),
    ],
)
def test_like_refuses_axes_it_cannot_mark_with_a_clear_message(axes: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ppy.Like(len, axes=axes)  # type: ignore[arg-type]


def test_markers_are_inert() -> None:
    def f(x: float) -> float:
        return x + 1

    assert xla.jit(f) is f
    with pytest.raises(AttributeError):
        ppy.Shape(1).dims = (2,)  # type: ignore[misc]


def test_a_ppy_program_imports_a_ppy_module_beside_it(tmp_path: Path) -> None:
    (tmp_path / "helpers.ppy").write_text("def twice(x):\n    return 2 * x\n")
    (tmp_path / "main.ppy").write_text(
        textwrap.dedent(
            """
            import ppy
            import helpers
            print(helpers.twice(21), helpers.__file__.endswith("helpers.ppy"))
            """
        )
    )
    out = subprocess.run(
        [sys.executable, "main.ppy"], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert out.stdout == "42 True\n"


#: Paths of modules that moved into core's rooms before the first release.
#: No shim answers them: an import of one fails, so nothing depends on them.
GONE = (
    "ppy.entry",
    "ppy.source",
    "ppy.pytrees",
    "ppy.fingerprint",
    "ppy.jax_config",
    "ppy.jax_window",
    "ppy._moved",
)


@pytest.mark.parametrize("path", GONE)
def test_a_module_that_moved_has_no_old_path(path: str) -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(path)


@pytest.mark.parametrize(
    ("room", "name"), [("ppy.artifact", "read_artifact"), ("ppy.kinds", "JaxExport")]
)
def test_a_room_answers_no_names_of_its_modules(room: str, name: str) -> None:
    """A name is imported from its module, never through the room."""
    with pytest.raises(AttributeError):
        getattr(importlib.import_module(room), name)


def test_the_rooms_import_nothing_of_their_own() -> None:
    """Importing a room costs nothing until one of its modules is used."""
    rooms = ("artifact", "build", "cli", "discovery", "kinds", "record", "run", "warm")
    code = (
        "import ppy, sys; before = set(sys.modules)\n"
        f"for room in {rooms!r}: __import__('ppy.' + room)\n"
        "print(sorted(set(sys.modules) - before))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(sorted(f"ppy.{room}" for room in rooms))
