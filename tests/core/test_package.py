"""``import ppy`` as a program sees it under plain CPython."""

from __future__ import annotations

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


#: Each pre-0.2 import path a plugin could use, with one name it offered.
OLD_PATHS = {
    "ppy.artifact": "read_artifact",
    "ppy.discovery": "discover_source",
    "ppy.kinds": "JaxExport",
    "ppy.build": "build_project",
    "ppy.cli": "main",
    "ppy.entry": "Entry",
    "ppy.source": "FunctionInfo",
    "ppy.pytrees": "structure",
    "ppy.fingerprint": "fingerprint",
    "ppy.jax_config": "differences",
    "ppy.jax_window": "outside_window",
}


@pytest.mark.parametrize(("path", "name"), sorted(OLD_PATHS.items()))
def test_an_old_import_path_still_gives_the_same_object(path: str, name: str) -> None:
    """Plugins written before the rooms keep working for one release."""
    code = textwrap.dedent(
        f"""
        import importlib
        old = getattr(importlib.import_module({path!r}), {name!r})
        print(old.__module__ if hasattr(old, "__module__") else "", old is getattr(
            importlib.import_module(old.__module__), {name!r}, None))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    module, same = out.stdout.split()
    assert module.startswith("ppy.") and module != path and same == "True"


def test_an_old_path_offers_only_its_old_names() -> None:
    import ppy.artifact

    with pytest.raises(AttributeError, match="has no attribute 'Entry'"):
        _ = ppy.artifact.Entry  # type: ignore[attr-defined]


def test_the_rooms_import_nothing_of_their_own() -> None:
    """Importing a room costs nothing until one of its modules is used."""
    rooms = ("artifact", "build", "cli", "discovery", "kinds", "record", "run", "warm")
    code = (
        "import ppy, sys; before = set(sys.modules)\n"
        f"for room in {rooms!r}: __import__('ppy.' + room)\n"
        "print(sorted(set(sys.modules) - before))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(sorted({"ppy._moved"} | {f"ppy.{room}" for room in rooms}))
