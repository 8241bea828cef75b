"""The frames a program's tracebacks and stack show: a module that raises as it
is imported (importlib's frames taken out), an error inside a staged or
recorded function, the recursion depth left to the program.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import run_ppy
from tests.support.differential import SERVED, WARM, differential, machine_noise, project

STAGED = """\
import sys
import traceback
from typing import Annotated

import jax
import jax.numpy as jnp

import ppy

Batch = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]


"""

HELPER = (
    STAGED
    + """\
@jax.jit
def double(x: Batch) -> jax.Array:
    return x * 2


if "fail" in sys.argv[1:]:
    raise ValueError("helper failed as it was imported")
"""
)

IMPORTS = (
    STAGED
    + """\
try:
    import plain
except ValueError:
    print(traceback.format_exc())
try:
    import broken
except SyntaxError:
    print(traceback.format_exc())
import helper

print(helper.double(jnp.ones((2, 4))))
"""
)


def test_an_error_importing_a_module_shows_the_frames_python_shows(tmp_path: Path) -> None:
    """python takes importlib's frames out of the traceback of an error
    raised by a module's code as it is imported (``_call_with_frames_removed``):
    a plain module, one with a syntax error, and a ``.ppy`` module whose
    functions are staged, whether the program prints the traceback itself or
    leaves it uncaught."""
    root = project(
        tmp_path / "p",
        {
            "model.ppy": IMPORTS,
            "helper.ppy": HELPER,
            "plain.py": "X = 1\nraise ValueError('plain failed as it was imported')\n",
            "broken.py": "x = (\n",
        },
    )
    compared = differential(root, cache=tmp_path / "c")
    assert compared.bound() == {"double"}
    differential(root, "fail", cache=tmp_path / "c", build=False)
    for text in (compared.python.stdout, compared.python.stderr):
        assert "importlib" not in text
    assert 'File "' + str(root / "plain.py") + '", line 2' in compared.python.stdout
    # helper.ppy broken after the build: its entries are not bound, and its syntax
    # error is reported as python reports it (the stale build's lines set apart).
    (root / "helper.ppy").write_text(HELPER + "x = (\n")
    broken = differential(root, cache=tmp_path / "c", build=False, quiet_stderr=None)
    assert "SyntaxError" in broken.python.stderr and "importlib" not in broken.python.stderr


FALLS_BACK = (
    STAGED
    + """\
@jax.jit
def width(x: Batch) -> jax.Array:
    if x.shape[-1] != 4:
        raise ValueError(f"{x.shape[-1]} columns")
    return x.sum()


print(width(jnp.ones((2, 4))))
try:
    width(jnp.ones((2, 5)))  # another width: the original is called, and raises
except ValueError:
    lines = traceback.format_exc().splitlines()
    print([line for line in lines if line.lstrip().startswith("File")])
"""
)


def test_an_error_in_a_function_called_through_ppy_shows_no_frame_of_ppy(
    tmp_path: Path,
) -> None:
    """A call that falls back from a staged function, or that a recording
    notes, reaches the original through a function of ppy's, which takes its
    own frame out of what the call raises, as jax takes out its own."""
    root = project(tmp_path / "p", {"model.ppy": FALLS_BACK})
    cache = tmp_path / "c"
    compared = differential(root, cache=cache)
    assert compared.bound() == {"width"}
    assert {e["category"] for e in compared.fallbacks()} == {"dim"}
    assert "model.ppy" in compared.python.stdout
    recorded = run_ppy("record", "model.ppy", cwd=root, env={"PPY_CACHE_DIR": str(cache)})
    assert (recorded.stdout, recorded.stderr, recorded.returncode) == (
        compared.python.stdout,
        compared.python.stderr,
        compared.python.returncode,
    )


DEPTH = """\
import json
import os
import sys
import traceback


def deepest(n):
    try:
        return deepest(n + 1)
    except RecursionError:
        return n


frames = {"depth": deepest(1), "stack": len(traceback.extract_stack())}
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "depth.txt"), "a") as out:
    print(json.dumps(frames), file=out)
"""


def test_the_program_has_the_recursion_depth_python_gives_it_less_two(tmp_path: Path) -> None:
    """Two of ppy's frames sit above the program (docs/limitations.md): the
    ``ppy`` script's (or a warm server's) and ``ppy.cli.main.main``, which
    calls the program's code in line. The program can recurse two levels
    less deep than under python, no fewer, under ``ppy run``, ``--warm`` and
    ``ppy record`` alike; its module level sees three frames where python's
    sees one."""
    root = project(tmp_path / "p", {"model.ppy": DEPTH})
    cache = tmp_path / "c"
    environ = {**os.environ, "PPY_CACHE_DIR": str(cache)}
    script = str(Path(sys.executable).with_name("ppy"))
    commands = [
        [sys.executable, "model.ppy"],
        [script, "run", "model.ppy"],
        [script, "record", "model.ppy"],
    ]
    if WARM:
        SERVED.add(cache)
        commands.append([script, "run", "--warm", "model.ppy"])
    for command in commands:
        ran = subprocess.run(command, cwd=root, capture_output=True, text=True, env=environ)
        assert (ran.returncode, machine_noise(ran.stderr)) == (0, ""), (command, ran.stderr)
    python, *ppy = (json.loads(line) for line in (root / "depth.txt").read_text().splitlines())
    assert python["stack"] == 1
    for frames in ppy:
        assert frames == {"depth": python["depth"] - 2, "stack": 3}
