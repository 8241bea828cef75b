"""A project module the staged module imports (a .ppy module, or a plain .py one), edited
after the build.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_ppy
from tests.support.differential import differential, project

MODEL = """\
from typing import Annotated

import jax
import jax.numpy as jnp

import ppy
from pkg import helper

Batch = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]


@jax.jit
def score(x: Batch) -> jax.Array:
    return helper.scale(x).sum(axis=-1)


print(score(jnp.ones((2, 4), jnp.float32)))
"""


def test_an_edited_imported_module_is_exported_again_and_run_as_edited(tmp_path: Path) -> None:
    root = project(
        tmp_path / "p",
        {
            "model.ppy": MODEL,
            "pkg/__init__.py": "",
            "pkg/helper.ppy": "from pkg import consts\n\ndef scale(x):\n    return x * consts.K\n",
            "pkg/consts.ppy": "K = 3\n",
        },
    )
    env = {"PPY_CACHE_DIR": str(tmp_path / "c")}
    assert " exported " in run_ppy("build", cwd=root, env=env).stdout
    before = differential(root, cache=tmp_path / "c", build=False)
    assert before.staged_calls("score") == 1 and "[12. 12.]" in before.python.stdout

    (root / "pkg" / "consts.ppy").write_text("K = 4\n")  # two imports away
    rebuilt = run_ppy("build", cwd=root, env=env)
    line = next(ln for ln in rebuilt.stdout.splitlines() if " score " in ln)
    assert " exported " in line and " reused " not in line, rebuilt.stdout
    after = differential(root, cache=tmp_path / "c", build=False)
    assert "[16. 16.]" in after.python.stdout
    assert after.staged_calls("score") == 1 and not after.fallbacks()


def test_ppy_run_rebuilds_after_an_imported_module_changed(tmp_path: Path) -> None:
    root = project(
        tmp_path / "p",
        {
            "model.ppy": MODEL,
            "pkg/__init__.py": "",
            "pkg/helper.ppy": "K = 3\n\ndef scale(x):\n    return x * K\n",
        },
    )
    first = differential(root, cache=tmp_path / "c")
    assert first.staged_calls("score") == 1
    (root / "pkg" / "helper.ppy").write_text("K = 4\n\ndef scale(x):\n    return x * K\n")
    again = differential(root, cache=tmp_path / "c", build=False)
    assert [e["reason"] for e in again.named("run.build")] == [
        "pkg/helper.ppy changed since the build"
    ]
    assert again.staged_calls("score") == 1 and "[16. 16.]" in again.python.stdout


def test_an_edited_plain_python_helper_takes_the_original(tmp_path: Path) -> None:
    root = project(
        tmp_path / "p",
        {
            "model.ppy": MODEL,
            "pkg/__init__.py": "",
            "pkg/helper.py": "def scale(x):\n    return x * 3\n",
        },
    )
    first = differential(root, cache=tmp_path / "c")
    assert first.staged_calls("score") == 1
    (root / "pkg" / "helper.py").write_text("def scale(x):\n    return x * 4\n")
    again = differential(root, cache=tmp_path / "c", build=False)
    assert "[16. 16.]" in again.python.stdout
    (fallback,) = again.fallbacks()
    assert fallback["category"] == "captured" and "helper.scale" in str(fallback["reason"])
