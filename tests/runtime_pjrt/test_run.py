"""run_program on real project folders: the program runs as ``python FILE``
would, with the staged functions of it and of its ``.ppy`` imports bound."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from ppy.artifact.model import Artifact, ModuleRecord
from ppy.artifact.write import write_artifact
from ppy.run.program import run_program
from ppy_runtime_pjrt.export import ExportRuntime
from structlog.testing import capture_logs

from tests.runtime_pjrt.exports import make_entry, spec

PROGRAM = """\
import sys

import jax
import jax.numpy as jnp

from pkg.helpers import double


@jax.jit
def score(x):
    return jnp.sum(jnp.tanh(x), axis=-1)


def main():
    x = jnp.arange(8, dtype=jnp.float32).reshape(2, 4) / 8
    print(__name__, sys.argv[1:])
    print("bound:", hasattr(score, "ppy_stats"), hasattr(double, "ppy_stats"))
    print([round(float(v), 5) for v in score(double(x))])
    stats = getattr(score, "ppy_stats", None)
    print("sources:", list(stats.executables.values()) if stats else None)


if __name__ == "__main__":
    main()
"""

HELPERS = """\
import jax


@jax.jit
def double(x):
    return x * 2
"""


def _score(x):
    return jnp.sum(jnp.tanh(x), axis=-1)


def _double(x):
    return x * 2


EXPECTED = [
    round(float(v), 5) for v in _score(_double(jnp.arange(8, dtype=jnp.float32).reshape(2, 4) / 8))
]


@pytest.fixture
def project(make_project):
    return make_project({"model.ppy": PROGRAM, "pkg/helpers.ppy": HELPERS})


@pytest.fixture(autouse=True)
def _forget_imported_modules():
    """Each test's ``pkg.helpers`` is its own file; don't reuse another test's."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name == "pkg" or name.startswith("pkg."):
            del sys.modules[name]


def artifact_for(root: Path) -> Artifact:
    def record(name: str, path: str) -> ModuleRecord:
        return ModuleRecord(name, path, hashlib.sha256((root / path).read_bytes()).hexdigest())

    batch = [spec(("B", 4), name="x")]
    return Artifact(
        project="demo",
        config_digest="0" * 64,
        written_by={"ppy": "0.1.0", "jax": jax.__version__},
        modules=(record("model", "model.ppy"), record("pkg.helpers", "pkg/helpers.ppy")),
        entries=(
            make_entry(_score, batch, module="model", qualname="score"),
            make_entry(_double, batch, module="pkg.helpers", qualname="double"),
        ),
        decisions=(),
    )


def run(root: Path, *argv: str, artifact=None, runtimes=None) -> int:
    return run_program(
        root / "model.ppy",
        list(argv),
        artifact=artifact if artifact is not None else artifact_for(root),
        runtimes=runtimes if runtimes is not None else {"jax.export": ExportRuntime(cache=False)},
        root=root,
    )


def test_the_program_runs_as_main_with_both_modules_bound(project, capsys) -> None:
    with capture_logs() as events:
        assert run(project, "a", "b") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == ["__main__ ['a', 'b']", "bound: True True", str(EXPECTED)]
    bound = {(e["module"], e["function"]) for e in events if e["event"] == "run.bind"}
    assert bound == {("model", "score"), ("pkg.helpers", "double")}
    assert not [e for e in events if e["event"] == "run.fallback"]


def test_without_an_artifact_it_is_plain_python(project, capsys) -> None:
    assert run_program(project / "model.ppy", [], artifact=None, runtimes={}, root=project) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:3] == ["bound: False False", str(EXPECTED)]


def test_a_module_edited_since_the_build_keeps_its_originals(project, capsys) -> None:
    artifact = artifact_for(project)
    helpers = project / "pkg" / "helpers.ppy"
    helpers.write_text(helpers.read_text() + "\n# edited\n")
    with capture_logs() as events:
        assert run(project, artifact=artifact) == 0
    assert capsys.readouterr().out.splitlines()[1] == "bound: True False"
    (unbound,) = [e for e in events if e["event"] == "run.unbound"]
    assert unbound["function"] == "double"
    assert unbound["reason"] == "source changed since the build"


def test_an_entry_kind_without_a_runtime_is_left_unbound(project, capsys) -> None:
    with capture_logs() as events:
        assert run(project, runtimes={"xla.scalar": ExportRuntime(cache=False)}) == 0
    assert capsys.readouterr().out.splitlines()[1] == "bound: False False"
    reasons = {e["reason"] for e in events if e["event"] == "run.unbound"}
    assert reasons == {"no runtime for entry kind 'jax.export' is installed"}


def test_an_entry_the_runtime_refuses_is_left_unbound(project, capsys) -> None:
    artifact = artifact_for(project)
    other = make_entry(
        _score, [spec(("B", 4))], module="model", qualname="score", platforms=["cuda"]
    )
    artifact = Artifact(**{**artifact.__dict__, "entries": (other, artifact.entries[1])})
    with capture_logs() as events:
        assert run(project, artifact=artifact) == 0
    assert capsys.readouterr().out.splitlines()[1] == "bound: False True"
    (unbound,) = [e for e in events if e["event"] == "run.unbound"]
    assert "cuda" in unbound["reason"]


@pytest.mark.parametrize(
    ("ending", "code", "stderr"),
    [
        ("sys.exit(3)", 3, ""),
        ("sys.exit()", 0, ""),
        ("sys.exit('bye')", 1, "bye\n"),
    ],
)
def test_exit_codes_are_pythons(make_project, capsys, ending, code, stderr) -> None:
    root = make_project(
        {
            "model.ppy": PROGRAM.replace("    main()", f"    main()\n    {ending}"),
            "pkg/helpers.ppy": HELPERS,
        }
    )
    assert run(root) == code
    assert capsys.readouterr().err == stderr


def test_an_uncaught_error_prints_the_programs_traceback(make_project, capsys) -> None:
    program = PROGRAM.replace("    main()", "    main()\n    raise RuntimeError('boom')")
    root = make_project({"model.ppy": program, "pkg/helpers.ppy": HELPERS})
    assert run(root) == 1
    err = capsys.readouterr().err
    line = program.splitlines().index("    raise RuntimeError('boom')") + 1
    assert err.startswith("Traceback (most recent call last):\n")
    assert f'model.ppy", line {line}, in <module>' in err
    assert err.rstrip().endswith("RuntimeError: boom")
    assert f"ppy{os.sep}run.py" not in err


def test_a_second_process_loads_the_executable_from_the_cache(project, cache_dir) -> None:
    path = project / ".ppy" / "artifact.zip"
    path.parent.mkdir()
    write_artifact(artifact_for(project), path)
    driver = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from ppy.artifact.read import read_artifact
        from ppy.log import configure
        from ppy.run.program import run_program
        from ppy_runtime_pjrt.export import ExportRuntime
        configure()
        root = Path({str(project)!r})
        sys.exit(run_program(root / "model.ppy", [], artifact=read_artifact(Path({str(path)!r})),
                             runtimes={{"jax.export": ExportRuntime()}}, root=root))
        """
    )
    env = {**os.environ, "PPY_CACHE_DIR": str(cache_dir)}
    outputs = [
        subprocess.run(
            [sys.executable, "-c", driver],
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=120,
        )
        for _ in range(2)
    ]
    for done in outputs:
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[2] == str(EXPECTED)
    assert outputs[0].stdout.splitlines()[3] == "sources: ['compiled']"
    assert outputs[1].stdout.splitlines()[3] == "sources: ['cache']"
