"""What a warm run's modules read when they were imported: the key that picks
the server, the check a child makes when the program first imports jax or
numpy, and the preloaded modules' sources.

Each case compares a warm run with ``python model.ppy`` in the same
environment and with the same interpreter options.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import PERMISSIONS
from tests.support.events import json_events
from tests.warm.support import Warm, servers


def _project(tmp_path: Path, program: str, pyproject: str = "") -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "model.ppy").write_text(textwrap.dedent(program).lstrip())
    (root / "pyproject.toml").write_text('[project]\nname = "demo"\n' + textwrap.dedent(pyproject))
    return root


def _verbose(warm: Warm, *argv: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return warm.run("-v", "--log-format", "json", "run", "--warm", "model.ppy", *argv, **kwargs)  # type: ignore[arg-type]


# -- the program sets a variable jax or numpy reads when it is imported ----------------

SETS_X64 = {
    "an alias of os.environ": """
        import os
        env = os.environ
        env["JAX_ENABLE_X64"] = "1"
        """,
    "os.environ |= a dict": """
        import os
        os.environ |= {"JAX_ENABLE_X64": "1"}
        """,
    "a function given the values": """
        import os
        def configure(**values):
            os.environ.update(values)
        configure(JAX_ENABLE_X64="1")
        """,
    "a project module that sets it": """
        import settings
        """,
    "a name built at run time through setattr": """
        import os
        setattr(os, "environ", os.environ)
        getattr(os, "environ").__setitem__("JAX_" + "ENABLE_X64", "1")
        """,
}


@pytest.mark.parametrize("name", list(SETS_X64))
def test_a_variable_set_before_the_first_import_of_jax_is_what_jax_reads(
    tmp_path: Path, name: str
) -> None:
    program = textwrap.dedent(SETS_X64[name])
    program += "import jax.numpy as jnp\nprint(jnp.ones(1).dtype)\n"
    root = _project(tmp_path, program)
    (root / "settings.py").write_text('import os\nos.environ["JAX_ENABLE_X64"] = "1"\n')
    with servers(root, tmp_path / "cache") as warm:
        plain = warm.python()
        assert plain.stdout == "float64\n", plain.stderr
        for _ in range(2):  # the first starts the server, the second is a child of it
            done = _verbose(warm)
            assert done.stdout == plain.stdout, done.stderr
            assert done.returncode == 0
            (cold,) = json_events(done.stderr, "run.cold")
            assert "JAX_ENABLE_X64" in str(cold["reason"]), cold


@pytest.mark.slow
def test_a_build_before_the_program_is_not_the_program_acting(tmp_path: Path) -> None:
    """The child builds the stale artifact first, starting an export worker
    and writing files: that is ppy's start-up, not the program, so the run
    still goes cold rather than being refused."""
    program = """
        import os
        env = os.environ
        env["JAX_ENABLE_X64"] = "1"
        from typing import Annotated
        import jax, jax.numpy as jnp
        import ppy

        @jax.jit
        def double(x: Annotated[jax.Array, ppy.Shape("N"), ppy.DType("float32")]):
            return x * 2

        print(double(jnp.ones(3, dtype=jnp.float32)), jnp.ones(1).dtype)
        """
    root = _project(tmp_path, program)
    (root / "pyproject.toml").write_text(PERMISSIONS)
    with servers(root, tmp_path / "cache") as warm:
        plain = warm.python()
        assert plain.stdout.endswith("float64\n"), plain.stderr
        for _ in range(2):
            done = _verbose(warm)
            assert (done.stdout, done.returncode) == (plain.stdout, 0), done.stderr
            assert json_events(done.stderr, "run.cold") and not json_events(
                done.stderr, "run.warm_refused"
            )
            (root / "model.ppy").write_text((root / "model.ppy").read_text() + "\n")  # stale


def test_numpy_is_checked_as_jax_is(tmp_path: Path) -> None:
    program = """
        import os
        env = os.environ
        env["NPY_DISABLE_CPU_FEATURES"] = "X86_V4"
        import numpy._core._multiarray_umath as m
        print(sum(m.__cpu_features__.values()))
        """
    root = _project(tmp_path, program)
    with servers(root, tmp_path / "cache") as warm:
        plain = warm.python()
        for _ in range(2):
            done = _verbose(warm)
            assert (done.stdout, done.returncode) == (plain.stdout, plain.returncode), done.stderr
            (cold,) = json_events(done.stderr, "run.cold")
            assert "NPY_DISABLE_CPU_FEATURES" in str(cold["reason"])


def test_a_variable_set_after_jax_is_imported_is_served_warm(tmp_path: Path) -> None:
    program = """
        import os
        import jax
        env = os.environ
        env["JAX_ENABLE_X64"] = "1"
        import jax.numpy as jnp
        print(jnp.ones(1).dtype)
        """
    root = _project(tmp_path, program)
    with servers(root, tmp_path / "cache") as warm:
        plain = warm.python()
        warm.warm()
        done = _verbose(warm)
    assert plain.stdout == done.stdout == "float32\n"
    assert json_events(done.stderr, "run.warm") and not json_events(done.stderr, "run.cold")


def test_a_program_that_wrote_before_it_set_the_variable_is_refused(tmp_path: Path) -> None:
    """Running it again cold would print its first line twice: the run stops
    with one error line instead of printing another dtype than python."""
    program = """
        import os
        print("first", flush=True)
        env = os.environ
        env["JAX_ENABLE_X64"] = "1"
        import jax.numpy as jnp
        print(jnp.ones(1).dtype)
        """
    root = _project(tmp_path, program)
    with servers(root, tmp_path / "cache") as warm:
        assert warm.python().stdout == "first\nfloat64\n"
        warm.warm()
        done = warm.warm()
    assert done.stdout == "first\n"
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert "run.warm_refused" in line and "JAX_ENABLE_X64" in line and "--no-warm" in line


def test_output_still_in_the_buffer_is_not_written(tmp_path: Path) -> None:
    """A line in stdout's buffer has not reached the pipe: the child ends
    before it is flushed, and the cold run prints it once."""
    program = """
        import os
        print("first")
        os.environ |= {"JAX_ENABLE_X64": "1"}
        import jax.numpy as jnp
        print(jnp.ones(1).dtype)
        """
    root = _project(tmp_path, program)
    buffered = {"PYTHONUNBUFFERED": ""}  # under -u the first line is written at once
    with servers(root, tmp_path / "cache") as warm:
        warm.warm(env=buffered)
        done = warm.warm(env=buffered)
        assert done.stdout == warm.python(env=buffered).stdout == "first\nfloat64\n"


def test_what_importing_jax_sets_in_the_environment_is_set_when_the_program_imports_it(
    tmp_path: Path,
) -> None:
    program = """
        import os
        print(os.environ.get("TF_CPP_MIN_LOG_LEVEL"))
        import jax
        print(os.environ.get("TF_CPP_MIN_LOG_LEVEL"))
        """
    root = _project(tmp_path, program)
    with servers(root, tmp_path / "cache") as warm:
        env = warm.env()
        env.pop("TF_CPP_MIN_LOG_LEVEL", None)

        def run(*command: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                command,
                cwd=root,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )

        plain = run(sys.executable, "model.ppy")
        run(*warm.command("run", "--warm", "model.ppy"))
        done = run(*warm.command("run", "--warm", "model.ppy"))
    assert plain.stdout == "None\n1\n", plain.stderr
    assert done.stdout == plain.stdout, done.stderr


def test_a_project_module_named_as_a_preloaded_one_is_imported_as_python_does(
    tmp_path: Path,
) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "projmod.py").write_text("VALUE = 'installed'\n")
    root = _project(
        tmp_path,
        "import projmod\nprint(projmod.VALUE)\n",
        '[tool.ppy.run]\npreload = ["projmod"]\n',
    )
    (root / "projmod.py").write_text("VALUE = 'the project'\n")
    env = {"PYTHONPATH": _path(lib)}
    with servers(root, tmp_path / "cache") as warm:
        warm.warm(env=env)
        done = warm.warm(env=env)
        assert done.stdout == warm.python(env=env).stdout == "the project\n", done.stderr


# -- the key ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "program"),
    [
        pytest.param(
            ["-W", "error::DeprecationWarning"],
            "import warnings\nwarnings.warn('old', DeprecationWarning)\nprint('after')\n",
            id="-W error",
        ),
        pytest.param(
            ["-X", "no_debug_ranges"],
            "def f():\n    return 1 / 0\nf()\n",
            id="-X no_debug_ranges",
        ),
        pytest.param(
            ["-X", "frozen_modules=off"],
            "import os\nprint(os.__spec__.origin)\n",
            id="-X frozen_modules=off",
        ),
    ],
)
def test_interpreter_options_get_their_own_server(
    tmp_path: Path, options: list[str], program: str
) -> None:
    root = _project(tmp_path, program)
    with servers(root, tmp_path / "cache") as warm:
        plain = warm.warm()  # a server without the options
        assert plain.stdout == warm.python().stdout
        direct = subprocess.run(
            [sys.executable, *options, "model.ppy"],
            cwd=root,
            env=warm.env(),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        for _ in range(2):
            served = subprocess.run(
                [sys.executable, *options, "-m", "ppy", "run", "--warm", "model.ppy"],
                cwd=root,
                env=warm.env(),
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            assert (served.stdout, served.stderr, served.returncode) == (
                direct.stdout,
                direct.stderr,
                direct.returncode,
            )
        assert len(warm.servers()) == 2


@pytest.mark.parametrize(
    ("variable", "value", "program"),
    [
        (
            "EAGER_CONSTANT_FOLDING",
            "1",
            "import jax\nprint(jax.config.values['eager_constant_folding'])\n",
        ),
        ("CHECK_VMA", "1", "import jax\nprint(jax.config.values['check_vma'])\n"),
        (
            "NPY_DISABLE_CPU_FEATURES",
            "X86_V4",
            "import numpy._core._multiarray_umath as m\nprint(sum(m.__cpu_features__.values()))\n",
        ),
    ],
)
def test_a_variable_read_at_import_without_a_known_prefix_gets_its_own_server(
    tmp_path: Path, variable: str, value: str, program: str
) -> None:
    root = _project(tmp_path, program)
    with servers(root, tmp_path / "cache") as warm:
        warm.warm()
        env = {variable: value}
        plain = warm.python(env=env)
        done = warm.warm(env=env)
        assert (done.stdout, done.returncode) == (plain.stdout, plain.returncode)
        assert done.stdout != warm.warm().stdout or plain.returncode != 0


#: The server's imports in a fresh interpreter (``ppy.warm.server.imports``):
#: the variables they read, and the files of the modules they imported.
_RECORD = """
import json, os, sys
from ppy.warm.environment import recorded
from ppy.warm.server import imports
groups = recorded(imports(sys.argv[1:]), dict(os.environ))
files = [getattr(m, "__file__", None) for m in list(sys.modules.values())]
print(json.dumps({
    "read": sorted({n for g in groups for n in g.read}),
    "files": sorted(f for f in files if isinstance(f, str) and f.endswith(".py")),
}))
"""


@pytest.fixture(scope="module")
def server_imports() -> dict[str, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", _RECORD], capture_output=True, text=True, timeout=300, check=True
    )
    found: dict[str, list[str]] = json.loads(done.stdout)
    return found


def test_the_key_holds_every_variable_read_while_the_server_imports(
    server_imports: dict[str, list[str]],
) -> None:
    """Run the server's imports in a fresh interpreter and note every variable
    they read: each is in the key, so another value gets another server."""
    from ppy.warm.key import import_environment

    read = server_imports["read"]
    assert "JAX_ENABLE_X64" in read and "EAGER_CONSTANT_FOLDING" in read
    missing = [name for name in read if name not in import_environment(dict.fromkeys(read, ""))]
    assert not missing, f"read at import but not in the key: {missing}"


def _module_level_reads(path: Path) -> set[str]:
    """The variables a module's top level reads by a literal name.

    Every read ``_read_name`` knows names ``environ`` or ``getenv``: a source
    that holds neither word is not parsed (most of jax's 400 modules; parsing
    them all took most of the test's time).
    """
    source = path.read_bytes()
    if b"environ" not in source and b"getenv" not in source:
        return set()
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    found: set[str] = set()
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            if isinstance(node, ast.ClassDef):
                stack.extend(node.body)
            continue
        name = _read_name(node)
        if name is not None:
            found.add(name)
        stack.extend(ast.iter_child_nodes(node))
    return found


def _read_name(node: ast.AST) -> str | None:
    """``os.environ["X"]``, ``os.environ.get("X")``, ``os.getenv("X")``, ``"X" in os.environ``."""

    def literal(value: ast.AST | None) -> str | None:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            return value.value
        return None

    def environ(value: ast.AST) -> bool:
        return isinstance(value, ast.Attribute) and value.attr == "environ"

    if isinstance(node, ast.Subscript) and environ(node.value):
        return literal(node.slice)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
        owner, method = node.func.value, node.func.attr
        if method == "getenv" or (method in ("get", "setdefault", "pop") and environ(owner)):
            return literal(node.args[0])
    if isinstance(node, ast.Compare) and any(environ(c) for c in node.comparators):
        return literal(node.left)
    return None


def test_the_key_holds_every_variable_read_at_module_level_by_what_the_server_imports(
    server_imports: dict[str, list[str]],
) -> None:
    """The sources of every module the server imports (jax, jaxlib, numpy,
    ml_dtypes, ppy...), scanned: a variable their top level reads by name,
    in a branch the recording above did not take, is in the key too."""
    from ppy.warm.key import import_environment

    stdlib = os.path.dirname(os.__file__)
    found: dict[str, str] = {}
    for path in server_imports["files"]:
        if os.path.dirname(path) == stdlib or path.startswith(os.path.join(stdlib, "")):
            continue
        for name in _module_level_reads(Path(path)):
            found.setdefault(name, path)
    assert "TF_CPP_MIN_LOG_LEVEL" in found  # jax/__init__.py: the scan sees what it should
    missing = {n: p for n, p in found.items() if n not in import_environment({n: ""})}
    assert not missing, f"read at import but not in the key: {missing}"


def test_the_variables_numpy_reads_in_c_are_in_its_binary() -> None:
    """The names the key holds for numpy's C code are the ones its extension
    reads: a numpy that renamed one shows here."""
    import numpy._core._multiarray_umath as umath
    from ppy.warm.environment import C_READS

    binary = Path(umath.__file__).read_bytes()
    for name in C_READS["numpy"]:
        assert name.encode() + b"\0" in binary, name


# -- the preloaded modules' sources -------------------------------------------------


def _path(*folders: Path) -> str:
    return os.pathsep.join(p for p in (*map(str, folders), os.environ.get("PYTHONPATH")) if p)


@pytest.mark.parametrize("edited", ["projmod.py", "projdep.py"])
def test_a_preloaded_module_whose_source_changed_is_imported_again(
    tmp_path: Path, edited: str
) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "projmod.py").write_text("from projdep import BASE\nVALUE = BASE + 1\n")
    (lib / "projdep.py").write_text("BASE = 1\n")
    root = _project(
        tmp_path,
        "import projmod\nprint(projmod.VALUE)\n",
        '[tool.ppy.run]\npreload = ["projmod"]\n',
    )
    env = {"PYTHONPATH": _path(lib)}
    with servers(root, tmp_path / "cache") as warm:
        assert warm.warm(env=env).stdout == "2\n"
        assert warm.warm(env=env).stdout == "2\n"
        source = lib / edited
        source.write_text(source.read_text().replace("1", "5"))  # same size, another time
        expected = warm.python(env=env).stdout
        assert expected != "2\n"
        done = _verbose(warm, env=env)
        assert done.stdout == expected, done.stderr
        assert json_events(done.stderr, "run.warm"), done.stderr
        assert warm.warm(env=env).stdout == expected
        (server,) = warm.servers(env=env)
        assert server["served"] == 2
