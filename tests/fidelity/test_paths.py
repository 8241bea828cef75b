"""Where the program is and what its imports find: `./model.ppy` and
`../p/model.ppy` as typed, `PYTHONSAFEPATH` and `-P`, a module beside it named
like one ppy imported first, a folder whose name is not UTF-8.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import run_ppy
from tests.support.differential import SERVED, WARM, differential, project

STAGED = """\
import os
import sys
from typing import Annotated

import jax
import jax.numpy as jnp

import ppy

Batch = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]


@jax.jit
def score(x: Batch) -> jax.Array:
    return jnp.sum(x, axis=-1)


"""

WHERE = (
    STAGED
    + """\
import traceback

if __name__ == "__main__":
    print(__file__, __loader__.path, sys.path[0])
    print(traceback.extract_stack()[-1].filename, sys._getframe().f_code.co_filename)
    print(score(jnp.ones((2, 4))))
    raise ValueError("the traceback names the file as typed")
"""
)


def test_the_path_as_typed_is_the_path_python_gives_the_program(tmp_path: Path) -> None:
    """python makes a relative script path absolute by putting the working
    folder in front of it, and normalizes nothing (3.11 to 3.13 alike):
    ``./model.ppy`` is ``/cwd/./model.ppy`` in ``__file__`` and in
    tracebacks, ``../p/model.ppy`` is ``/cwd/../p/model.ppy``."""
    root = project(tmp_path / "p", {"model.ppy": WHERE})
    cache = tmp_path / "c"
    assert run_ppy("build", cwd=root, env={"PPY_CACHE_DIR": str(cache)}).returncode == 0
    beside = tmp_path / "beside"
    beside.mkdir()
    for cwd, typed in ((root, "./model.ppy"), (beside, "../p/model.ppy"), (root, "model.ppy")):
        compared = differential(cwd, cache=cache, program=typed, build=False)
        assert compared.bound() == {"score"}
        assert f"{cwd}/{typed}" in compared.python.stdout, compared.python.stdout
        assert f'File "{cwd}/{typed}", line' in compared.python.stderr


SAFE = (
    STAGED
    + """\
here = os.path.dirname(os.path.abspath(__file__))
print(here in sys.path, sys.flags.safe_path)
try:
    import helper
except ImportError as error:
    print("not found:", error)
else:
    print("found", helper.NAME)
print(score(jnp.ones((2, 4))))
"""
)


def test_pythonsafepath_keeps_the_programs_folder_off_the_path(tmp_path: Path) -> None:
    """``PYTHONSAFEPATH=1`` (python 3.11+): python does not put the script's
    folder first on ``sys.path``, so a module beside it is not found."""
    root = project(tmp_path / "p", {"model.ppy": SAFE, "helper.py": "NAME = 'helper'\n"})
    compared = differential(root, cache=tmp_path / "c", env={"PYTHONSAFEPATH": "1"})
    assert compared.bound() == {"score"}
    assert "False True\nnot found: No module named 'helper'" in compared.python.stdout
    plain = differential(root, cache=tmp_path / "c", build=False)
    assert "True False\nfound helper" in plain.python.stdout


def test_dash_p_keeps_the_programs_folder_off_the_path(tmp_path: Path) -> None:
    """``python -P -m ppy run``: the interpreter's ``-P`` is the run's, as
    ``python -P model.ppy`` has it."""
    root = project(tmp_path / "p", {"model.ppy": SAFE, "helper.py": "NAME = 'helper'\n"})
    cache = tmp_path / "c"
    environ = {**os.environ, "PPY_CACHE_DIR": str(cache)}
    assert run_ppy("build", cwd=root, env=environ).returncode == 0
    python = subprocess.run(
        [sys.executable, "-P", "model.ppy"], cwd=root, capture_output=True, text=True
    )
    assert "False True\nnot found" in python.stdout, python.stderr
    runs = [["run", "model.ppy"]]
    if WARM:
        SERVED.add(cache)
        runs.append(["run", "--warm", "model.ppy"])
    for run in runs:
        ppy = subprocess.run(
            [sys.executable, "-P", "-m", "ppy", *run],
            cwd=root,
            capture_output=True,
            text=True,
            env=environ,
        )
        assert (ppy.stdout, ppy.stderr, ppy.returncode) == (
            python.stdout,
            python.stderr,
            python.returncode,
        )


SHADOWS = (
    STAGED
    + """\
import tomllib
import stat

print(getattr(tomllib, "SHADOW", "the standard library's tomllib"))
print(getattr(stat, "SHADOW", "the standard library's stat"))
print(score(jnp.ones((2, 4))))
"""
)


def test_a_module_named_like_one_ppy_imported_first_is_the_programs(tmp_path: Path) -> None:
    """``tomllib.py`` beside the program is the ``tomllib`` python imports.
    ppy has imported the standard library's before the program starts (to
    read pyproject.toml), so the program runs as
    python runs it, and ``run.shadowed`` says why. ``stat.py`` is no such
    module: python has ``stat`` at start, so its ``import stat`` never finds
    the folder's, and the run is ppy's. (Run from the folder above: ``python
    -m ppy`` run from the program's folder has it first on ``sys.path`` for
    its own imports too.)"""
    files = {"model.ppy": SHADOWS, "stat.py": "SHADOW = 'the folder'\n"}
    root = project(tmp_path / "p", files)
    cache = tmp_path / "c"
    environ = {"PPY_CACHE_DIR": str(cache)}
    assert run_ppy("build", cwd=root, env=environ).returncode == 0
    staged = differential(tmp_path, cache=cache, program="p/model.ppy", build=False)
    assert staged.bound() == {"score"} and not staged.named("run.shadowed")
    assert "the standard library's tomllib\nthe standard library's stat" in staged.python.stdout
    (root / "tomllib.py").write_text("SHADOW = 'the folder'\n")
    compared = differential(
        tmp_path, cache=cache, program="p/model.ppy", build=False, quiet_stderr=None
    )
    assert "the folder\nthe standard library's stat" in compared.python.stdout
    (shadowed,) = compared.named("run.shadowed")
    assert shadowed["modules"] == "tomllib" and not compared.bound()
    recorded = run_ppy("record", "p/model.ppy", cwd=tmp_path, env=environ)
    assert (recorded.stdout, recorded.returncode) == (compared.python.stdout, 0)


#: A folder name that is not UTF-8: the byte 0xff, as python decodes it.
NOT_UTF8 = os.fsdecode(b"data\xff")

ELSEWHERE = """\
import os
import sys

import jax

import ppy
from typing import Annotated


@jax.jit
def unstageable(x: Annotated[jax.Array, ppy.Shape(4), ppy.DType("float32")]) -> jax.Array:
    return x + 1


print(ascii(__file__), ascii(sys.path[0]), unstageable.__name__)
"""


def test_a_module_in_a_folder_whose_name_is_not_utf8_runs_and_the_build_says_why(
    tmp_path: Path,
) -> None:
    """python runs a program from a folder whose name is not UTF-8. The
    artifact names modules in UTF-8 (JSON, zip members), so the build leaves
    such a module out, says so (``build.unnamed_module``), and stages the
    rest; the program in it runs with nothing bound."""
    root = project(
        tmp_path / "p",
        {
            "model.ppy": STAGED + "print(score(jnp.ones((2, 4))))\n",
            f"{NOT_UTF8}/main.ppy": ELSEWHERE,
        },
    )
    cache = tmp_path / "c"
    environ = {"PPY_CACHE_DIR": str(cache)}
    built = run_ppy("-v", "--log-format", "json", "build", cwd=root, env=environ)
    assert built.returncode == 0, built.stdout + built.stderr
    assert "staged 1 of 1 candidate functions" in built.stdout
    (unnamed,) = [line for line in built.stderr.splitlines() if "build.unnamed_module" in line]
    assert "data\\\\xff/main.ppy" in unnamed  # shown with the byte escaped
    compared = differential(root, cache=cache, program=f"{NOT_UTF8}/main.ppy", build=False)
    assert not compared.bound() and "unstageable" in compared.python.stdout
    assert differential(root, cache=cache, build=False).bound() == {"score"}
    recorded = run_ppy("record", f"{NOT_UTF8}/main.ppy", cwd=root, env=environ)
    assert (recorded.stdout, recorded.returncode) == (compared.python.stdout, 0)
