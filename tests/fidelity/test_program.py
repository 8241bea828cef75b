"""The program as python runs it: argv, excepthook, KeyboardInterrupt, exit handlers,
globals, the bound function's surface and jit's nesting around it, a syntax error, the
stack above the program.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import run_ppy
from tests.support.differential import SERVED, WARM, differential, machine_noise, project

STAGED = """\
from typing import Annotated

import jax
import jax.numpy as jnp

import ppy

Batch = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]


@jax.jit
def score(x: Batch) -> jax.Array:
    \"\"\"The row sums.\"\"\"
    return jnp.sum(x, axis=-1)


"""


def test_argv0_is_the_path_as_typed(tmp_path: Path) -> None:
    root = project(
        tmp_path / "p",
        {"model.ppy": STAGED + "import sys\nprint(sys.argv)\nprint(score(jnp.ones((2, 4))))\n"},
    )
    for typed in ("model.ppy", "./model.ppy"):
        compared = differential(
            root,
            "a",
            "--b",
            cache=tmp_path / "c",
            program=typed,
            python_argv=(typed,),
            build=typed == "model.ppy",
        )
        assert compared.bound() == {"score"}


def test_the_programs_excepthook_reports_an_uncaught_exception(tmp_path: Path) -> None:
    root = project(
        tmp_path / "p",
        {
            "model.ppy": STAGED + "import sys\n"
            "def hook(kind, value, tb):\n"
            "    print('hook saw', kind.__name__, value, tb.tb_frame.f_code.co_filename[-9:])\n"
            # python calls the hook with no exception being handled.
            "    print('handling', sys.exc_info())\n"
            "sys.excepthook = hook\n"
            "print(score(jnp.ones((2, 4))))\n"
            "raise ValueError('boom')\n"
        },
    )
    # The build's import raised too, so nothing is staged, and a quiet run says so.
    compared = differential(root, cache=tmp_path / "c", quiet_stderr=None)
    assert compared.python.returncode == 1 and "hook saw ValueError boom model.ppy" in (
        compared.python.stdout
    )


def test_an_uncaught_keyboard_interrupt_ends_the_process_by_sigint(tmp_path: Path) -> None:
    root = project(
        tmp_path / "p",
        {
            "model.ppy": STAGED + "import atexit\n"
            "atexit.register(lambda: print('atexit ran'))\n"
            "print(score(jnp.ones((2, 4))))\n"
            "raise KeyboardInterrupt\n"
        },
    )
    # The build's import raised too, so nothing is staged, and a quiet run says so.
    compared = differential(root, cache=tmp_path / "c", quiet_stderr=None)
    assert compared.python.returncode == -signal.SIGINT
    assert "atexit ran" in compared.python.stdout


def test_exit_handlers_see_the_programs_argv_path_and_main(tmp_path: Path) -> None:
    """python runs ``atexit`` handlers after the program, with its
    ``sys.argv``, ``sys.path`` and ``__main__`` still in place, and
    ``__file__`` and ``__cached__`` taken out of ``__main__`` once the
    script ended, unless it ended by ``sys.exit``."""
    root = project(
        tmp_path / "p",
        {
            "model.ppy": STAGED + "import atexit, os, sys\n"
            "MARK = 'the program'\n"
            "here = os.path.dirname(__file__)\n"
            "def bye():\n"
            "    main = sys.modules['__main__']\n"
            "    print(sys.argv, sys.path[0] == here, getattr(main, 'MARK', None))\n"
            "    print(sorted(k for k in vars(main) if k in ('__file__', '__cached__')))\n"
            "atexit.register(bye)\n"
            "print(score(jnp.ones((2, 4))))\n"
            "if sys.argv[1:] == ['exit']:\n"
            "    sys.exit(3)\n"
            "if sys.argv[1:] == ['raise']:\n"
            "    raise ValueError('ended by an exception')\n"
        },
    )
    for ending in ("end", "exit", "raise"):
        compared = differential(root, ending, cache=tmp_path / "c", build=ending == "end")
        assert compared.bound() == {"score"}
        assert f"['model.ppy', '{ending}'] True the program" in compared.python.stdout
        kept = "['__cached__', '__file__']" if ending == "exit" else "[]"
        assert compared.python.stdout.endswith(f"\n{kept}\n")


def test_the_program_sees_only_its_own_globals(tmp_path: Path) -> None:
    root = project(
        tmp_path / "p",
        {
            "model.ppy": STAGED + "x: int = 3\n"
            "print(sorted(globals()))\n"
            "print(__annotations__ if '__annotations__' in globals() else None)\n"
            "print(__name__, __spec__, __package__, globals().get('__cached__'))\n"
            "print(type(__loader__).__name__)\n"
            "print(__file__ == __import__('os').path.abspath('model.ppy'))\n"
            "import sys\n"
            "print(sys.path[0] == __import__('os').path.dirname(__file__))\n"
            "print(score(jnp.ones((2, 4))))\n"
        },
    )
    compared = differential(root, cache=tmp_path / "c")
    assert compared.bound() == {"score"}


def test_a_module_without_annotations_has_the_annotations_python_gives_it(
    tmp_path: Path,
) -> None:
    """python's ``__main__`` starts with ``__annotations__ = {}`` (before 3.14)."""
    root = project(
        tmp_path / "p",
        {
            "model.ppy": STAGED + "print(sorted(k for k in globals() if k.startswith('__')))\n"
            "print(globals().get('__annotations__', 'absent'))\n"
            "print(score(jnp.ones((2, 4))))\n"
        },
    )
    compared = differential(root, cache=tmp_path / "c")
    assert compared.bound() == {"score"}


def test_the_bound_function_keeps_the_jitted_functions_surface(tmp_path: Path) -> None:
    root = project(
        tmp_path / "p",
        {
            "model.ppy": STAGED + "x = jnp.ones((2, 4))\n"
            "print(score.__name__, score.__qualname__, score.__doc__, score.__module__)\n"
            "print(score.__wrapped__.__name__, type(score.__wrapped__).__name__)\n"
            "print(score.lower(x).as_text() == jax.jit(score.__wrapped__).lower(x).as_text())\n"
            "print(score.trace(x).jaxpr)\n"
            "print(score.eval_shape(x))\n"
            "print(score(x))\n"
            # What jit's own object answers, in the verbose run as in the quiet one.
            "print(type(score).__name__, isinstance(score, type(jax.jit(abs))))\n"
            "print(score._cache_size() > 0)\n"
            "score.clear_cache()\n"
            "print(score(x))\n"
        },
    )
    compared = differential(root, cache=tmp_path / "c")
    assert compared.bound() == {"score"} and compared.staged_calls("score") == 2


def test_a_staged_function_traced_whole_is_a_nested_jit_as_under_python(tmp_path: Path) -> None:
    """``jax.make_jaxpr(f)`` and ``jax.jit(f).lower`` of a jitted ``f`` trace
    ``f``'s call: a ``jit[name=f]`` equation, a ``call @f`` in the module.
    So does the staged function, and the recorded one."""
    root = project(
        tmp_path / "p",
        {
            "model.ppy": STAGED + "x = jnp.ones((2, 4))\n"
            "print(jax.make_jaxpr(score)(x))\n"
            "print(jax.jit(score).lower(x).as_text().count('call @'))\n"
            "print(jax.jit(score).trace(x).jaxpr)\n"
            "print(jax.make_jaxpr(lambda y: score(y) * 2)(x))\n"
            "print(score(x))\n"
        },
    )
    compared = differential(root, cache=tmp_path / "c")
    assert compared.bound() == {"score"}
    assert "jit[" in compared.python.stdout and "\n1\n" in compared.python.stdout
    recorded = run_ppy("record", "model.ppy", cwd=root, env={"PPY_CACHE_DIR": str(tmp_path / "c")})
    assert (recorded.stdout, recorded.stderr) == (compared.python.stdout, compared.python.stderr)


def test_a_syntax_error_prints_what_python_prints(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"model.ppy": STAGED + "print('never'\n"})
    compared = differential(root, cache=tmp_path / "c")
    assert compared.python.returncode == 1 and "SyntaxError" in compared.python.stderr


def test_weakly_typed_outputs_stay_weak(tmp_path: Path) -> None:
    """``return x.sum(), 2.0``: jit's second output is weakly typed, so adding
    it to a bfloat16 gives bfloat16; a returned ``3`` and ``jnp.asarray(1.5)``
    the same. The staged outputs promote as jit's do."""
    root = project(
        tmp_path / "p",
        {
            "model.ppy": STAGED
            + """
@jax.jit
def with_constants(x: Batch):
    return x.sum(), 2.0, 3, jnp.asarray(1.5)


x = jnp.ones((2, 4), jnp.float32)
half = jnp.asarray(1, jnp.bfloat16)
for out in with_constants(x):
    print(out.dtype, out.weak_type, (out + half).dtype)
"""
        },
    )
    compared = differential(root, cache=tmp_path / "c")
    assert compared.bound() == {"score", "with_constants"}
    assert compared.staged_calls("with_constants") == 1
    assert "float32 True bfloat16" in compared.python.stdout


def test_a_staged_call_loads_lapack_only_where_the_function_calls_it(tmp_path: Path) -> None:
    """jit loads scipy.linalg for LAPACK only when a function calls a LAPACK
    routine; a cold staged call does the same, so the program sees the same
    modules. (A warm run's server has loaded what it loads ahead of time.)
    The warm run's executable comes from the cache, not lowered: LAPACK's
    function pointers must be filled in for it all the same, or it crashes."""
    root = project(
        tmp_path / "p",
        {
            "model.ppy": STAGED + "import sys\n"
            "@jax.jit\n"
            "def inverse(m: Annotated[jax.Array, ppy.Shape(3, 3), ppy.DType('float32')]):\n"
            "    return jnp.linalg.inv(m)\n\n"
            "loaded = (lambda: 'scipy.linalg' in sys.modules) if sys.argv[1:] else (lambda: '')\n"
            "print(score(jnp.ones((2, 4))), loaded())\n"
            "print(inverse(jnp.eye(3) * 2.0), loaded())\n"
        },
    )
    compared = differential(root, cache=tmp_path / "c")
    assert compared.staged_calls("score") == 1 and compared.staged_calls("inverse") == 1
    environ = {**os.environ, "PPY_CACHE_DIR": str(tmp_path / "cold")}
    plain = subprocess.run(
        [sys.executable, "model.ppy", "modules"], cwd=root, capture_output=True, text=True
    )
    cold = run_ppy("run", "model.ppy", "modules", cwd=root, env=environ)
    assert cold.stdout == plain.stdout and "False" in plain.stdout.splitlines()[0], cold.stdout


FRAMES = """\
import inspect
import io
import json
import json
import os
import sys
import traceback


def show(where):
    \"\"\"Print this file's frames as three APIs see them; write down the rest.\"\"\"
    stack = traceback.extract_stack()
    print(where, [(f.name, f.lineno, f.line) for f in stack if f.filename == __file__])
    print(where, [(i.function, i.lineno) for i in inspect.stack() if i.filename == __file__])
    printed = io.StringIO()
    traceback.print_stack(file=printed)
    lines = printed.getvalue().splitlines()
    first = next(n for n, line in enumerate(lines) if f'File "{__file__}"' in line)
    print(where, lines[first:])
    return [f"{os.path.basename(f.filename)}:{f.name}" for f in stack if f.filename != __file__]


above = show("module")
back = sys._getframe().f_back
outer = {"module": above, "f_back": back and back.f_code.co_name}
outer["length"] = len(traceback.extract_stack())


def function():
    outer["function"] = show("function")


function()
with open(os.path.join(os.path.dirname(__file__), "frames.txt"), "a") as record:
    print(json.dumps(outer), file=record)
"""


def test_the_stack_above_the_program_is_ppys_fewest_frames(tmp_path: Path) -> None:
    """python runs a script's module code with no frame above it. Under
    ``ppy run`` something has to call the program's code, and a frame cannot be
    taken out of the chain: the stack shows the program's own frames as python
    does, and above them only the outermost module frame and
    ``ppy.cli.main.main`` (a warm child's ``ppy.commands.run.run``), which
    runs the program's code itself
    (docs/limitations.md). That module frame is the ``ppy`` script's, or a warm
    server's ``-c`` entry; ``python -m ppy`` adds runpy's two frames and
    ``ppy/__main__.py`` above it."""
    root = project(tmp_path / "p", {"model.ppy": FRAMES})
    differential(root, cache=tmp_path / "c")
    script = str(Path(sys.executable).with_name("ppy"))
    environ = {**os.environ, "PPY_CACHE_DIR": str(tmp_path / "c")}
    runs = [[script, "run", "model.ppy"], [script, "run", "--warm", "model.ppy"]]
    SERVED.add(tmp_path / "c")  # the test's end stops the server these runs start
    if not WARM:  # the differential's runs were python's and a cold one
        runs.insert(0, [sys.executable, "-m", "ppy", "run", "--warm", "model.ppy"])
    for command in runs:
        ran = subprocess.run(
            command,
            cwd=root,
            capture_output=True,
            text=True,
            env=environ,
        )
        assert (ran.returncode, machine_noise(ran.stderr)) == (0, ""), ran.stderr
    python, cold, warm, script_cold, script_warm = (
        json.loads(line) for line in (root / "frames.txt").read_text().splitlines()
    )
    assert python == {"module": [], "function": [], "f_back": None, "length": 1}

    def above(*frames: str, runner: str = "main.py:main") -> dict[str, object]:
        named = [*frames, runner]
        back = runner.rpartition(":")[2]
        return {"module": named, "function": named, "f_back": back, "length": len(named) + 1}

    # A warm child runs the request the client parsed: the run command, not the CLI.
    served = above("<string>:<module>", runner="run.py:run")
    assert (script_cold, script_warm, warm) == (above("ppy:<module>"), served, served)
    runpy = ["<frozen runpy>:_run_module_as_main", "<frozen runpy>:_run_code"]
    assert cold == above(*runpy, "__main__.py:<module>")
