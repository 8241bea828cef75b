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
    heavy = "('jax', 'stevedore', 'structlog')"
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
