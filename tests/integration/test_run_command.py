"""``ppy run`` as a user runs it: stale artifacts, ``--no-build``, ``-v`` and ``ppy cache``.

The page's example is built once for the session (``built_examples``); each
test that runs it works on its own copy of that build.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.conftest import BuiltExample

Run = Callable[..., subprocess.CompletedProcess[str]]
Built = Callable[[str], BuiltExample]
EXAMPLE = "25_jax_export"


def python(program: Path) -> str:
    done = subprocess.run(
        [sys.executable, program.name],
        cwd=program.parent,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def test_a_stale_artifact_is_rebuilt_and_no_build_runs_the_edited_source(
    built_examples: Built, built_example: Path, ppy: Run
) -> None:
    assert built_examples(EXAMPLE).build.returncode == 0
    example = built_example
    artifact = example / ".ppy" / "artifact.ppyz"
    built = artifact.read_bytes()
    program = example / "model.ppy"
    old = "jnp.sum(jnp.tanh(normalize(x)), axis=-1)"
    new = "jnp.sum(jnp.tanh(normalize(x)) ** 2, axis=-1)"
    assert old in program.read_text()
    program.write_text(program.read_text().replace(old, new))
    expected = python(program)
    assert expected != "cpu\n[0.0, 0.0, 0.0]\n"

    kept = ppy("run", "--no-build", "model.ppy", cwd=example)
    assert kept.returncode == 0, kept.stderr
    assert kept.stdout == expected
    assert "run.unbound" in kept.stderr and "source changed since the build" in kept.stderr
    assert artifact.read_bytes() == built

    rebuilt = ppy("-v", "run", "model.ppy", cwd=example)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert rebuilt.stdout == expected
    assert "run.build" in rebuilt.stderr and "model.ppy changed since the build" in rebuilt.stderr
    assert "run.bind" in rebuilt.stderr and "run.unbound" not in rebuilt.stderr
    assert artifact.read_bytes() != built

    again = ppy("run", "model.ppy", cwd=example)
    assert (again.stdout, again.stderr) == (expected, "")


PROGRAM = """\
from typing import Annotated

import jax
import jax.numpy as jnp

import ppy

Batch = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]


@jax.jit
def total(x: Batch) -> jax.Array:
    return jnp.sum(x, axis=-1)


if __name__ == "__main__":
    x = jnp.ones((2, 4), jnp.float32)
    print(total(x).tolist(), total(x * 2).tolist())
    print(total(jnp.ones((2, 4), jnp.int32)).tolist())
"""


def test_verbose_logs_every_calls_path_and_ppy_cache_shows_and_clears(
    make_project: Callable[..., Path], ppy: Run
) -> None:
    root = make_project({"prog.ppy": PROGRAM})
    ran = ppy("-v", "--log-format", "json", "run", "prog.ppy", cwd=root)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == python(root / "prog.ppy")
    events = [json.loads(line) for line in ran.stderr.splitlines()]
    paths = [e["path"] for e in events if e["event"] == "run.call"]
    assert paths == ["staged", "staged", "original"]
    (fallback,) = [e for e in events if e["event"] == "run.fallback"]
    assert (fallback["function"], fallback["category"]) == ("total", "dtype")

    shown = ppy("cache")
    assert shown.returncode == 0 and "1 staged executable," in shown.stdout
    unstaged = int(shown.stdout.split(" unstaged ")[0].split()[-1])
    assert unstaged > 0  # the program's eager ops
    cleared = ppy("cache", "clear")
    assert cleared.returncode == 0
    assert cleared.stdout.startswith(f"removed {1 + unstaged} cached executables")
    emptied = ppy("cache").stdout
    assert "0 staged executables" in emptied and "0 unstaged computations" in emptied


SCALAR_PROGRAM = """\
from ppy import xla


@xla.jit
def halve(n: int) -> int:
    return n // 2


if __name__ == "__main__":
    print(halve(9), halve(9.0), halve(-3))
"""


def test_verbose_logs_the_path_of_every_scalar_call(
    make_project: Callable[..., Path], ppy: Run
) -> None:
    root = make_project(
        {"prog.ppy": SCALAR_PROGRAM},
        pyproject='[project]\nname = "demo"\n[tool.ppy.plugins.xla]\nforce-staging = true\n',
    )
    ran = ppy("-v", "--log-format", "json", "run", "prog.ppy", cwd=root)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == python(root / "prog.ppy") == "4 4.0 -2\n"
    events = [json.loads(line) for line in ran.stderr.splitlines()]
    calls = [(e["function"], e["path"]) for e in events if e["event"] == "run.call"]
    assert calls == [("halve", "staged"), ("halve", "original"), ("halve", "staged")]
    (fallback,) = [e for e in events if e["event"] == "run.fallback"]
    assert fallback["category"] == "type"

    quiet = ppy("--log-format", "json", "run", "prog.ppy", cwd=root)
    assert quiet.returncode == 0 and "run.call" not in quiet.stderr

    again = ppy("-v", "--log-format", "json", "run", "prog.ppy", cwd=root)
    assert again.stdout == ran.stdout
    assert "1 staged executable," in ppy("cache").stdout


def test_a_plugins_tools_changing_makes_run_build_again(
    built_examples: Built, built_example: Path, ppy: Run, tmp_path: Path
) -> None:
    assert built_examples(EXAMPLE).build.returncode == 0
    example = built_example
    assert not (example / ".ppy" / "artifact.ppyz.checked").exists()
    current = ppy("-v", "run", "model.ppy", cwd=example)
    assert "run.build" not in current.stderr  # the tools passed, and that is remembered
    assert (example / ".ppy" / "artifact.ppyz.checked").is_file()
    # A jax backend plugin appearing changes what the jax plugin exports for.
    site = tmp_path / "site"
    metadata = site / "jax_cuda12_plugin-9.9.dist-info"
    metadata.mkdir(parents=True)
    (metadata / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: jax-cuda12-plugin\nVersion: 9.9\n"
    )
    plain = built_examples(EXAMPLE).plain  # python model.ppy
    assert plain.returncode == 0, plain.stderr
    expected = plain.stdout

    rebuilt = ppy("-v", "run", "model.ppy", cwd=example, PYTHONPATH=str(site))
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert rebuilt.stdout == expected
    assert "plugin 'jax' or its tools changed since the build" in rebuilt.stderr

    again = ppy("-v", "run", "model.ppy", cwd=example, PYTHONPATH=str(site))
    assert again.stdout == expected
    assert "run.build" not in again.stderr and "run.bind" in again.stderr


#: What a cold ``ppy run`` of a built program imports of ppy before the
#: program's first line: the command, the engine, the artifact's reader, the
#: kinds its entries are, the registry and the runtime that binds them. Not
#: the build, discovery beyond the name reader, the recorder, the warm
#: server, the plugins or the progress line: start-up cost is held by this
#: structure, and a change to it is a change to this list.
RUN_IMPORTS = {
    "ppy": "_hook artifact artifact.entry artifact.model artifact.payload "
    "artifact.read cache cli cli.main commands commands.run config decision discovery "
    "discovery.names errors kinds kinds.base kinds.dispatch kinds.fingerprint "
    "kinds.jax_compat kinds.jax_export kinds.jax_programs kinds.keys kinds.linearized "
    "kinds.pytrees kinds.statics kinds.trace_config "
    "kinds.tracers layout log "
    "registry request run run.binding run.collector run.import_hooks run.made run.program "
    "run.shadow runtime snapshot spec warm warm.client warm.protocol",
    "ppy_runtime_pjrt": "behind calls compile conditions dims eager guard pickled "
    "placement unstaged",
}


def test_a_cold_run_imports_only_what_it_runs(built_example: Path, cache_dir: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "ppy", "run", "--no-build", "model.ppy"],
        cwd=built_example,
        env={**os.environ, "PPY_CACHE_DIR": str(cache_dir)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == python(built_example / "model.ppy")
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    for package, names in RUN_IMPORTS.items():
        ours = {m for m in imported if m.split(".")[0] == package and m != package}
        assert sorted(ours) == sorted(f"{package}.{name}" for name in names.split()), package
    others = {m.split(".")[0] for m in imported} & {"ppy_plugin_jax", "ppy_plugin_xla", "rich"}
    assert not others
