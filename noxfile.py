"""Sessions: ``nox`` runs them all, as the README's test command does.

- tests: the whole pytest suite against the four distributions, shared
  between the Pythons in ``PYTHONS`` (pip gives 3.11 jax 0.10, and 3.12+ jax
  0.12): the unit suites on each, the differential suite on the newest, the
  rest on the oldest (``_suites``); on four pytest-xdist workers (``XDIST``).
- lint: ruff, and the import contract (import-linter, ``[tool.importlinter]``
  in the root pyproject.toml): plugins and runtimes reach core only through
  ``ppy.plugin``, ``ppy.runtime`` and ``ppy.kinds``.
- typecheck: mypy, strict on the four distributions and the example plugin.
- runtime_only: a venv with only ppy-core and ppy-runtime-pjrt runs an artifact
  built in another venv, on each Python in ``PYTHONS``.
- docs: the site under docs/, built with mkdocs --strict (its hooks import ppy).

``nox -s arch`` (not among the defaults: ``tests/architecture/test_folders.py``
runs the same check in every test session) prints the graph of core's rooms,
counting imports made inside functions, and fails when some of them form a
loop (``tests/architecture/folders.py``).

``nox -s quick`` (not among the defaults) is the inner loop: on ``PYTHON``
only, the unit and differential suites (``QUICK``) without the tests marked
``models`` (the programs of flax, optax, equinox, jaxtyping and beartype, which it does
not install). Arguments after ``--`` go to pytest in ``tests`` and ``quick``
alike: ``nox -s tests-3.11 -- tests/core -k lock``. CONTRIBUTING.md has the
habits, tests/README.md the map of the suites.

``nox -s bench-3.11`` (not among the defaults) runs the benchmarks: ppy
against plain JAX, in a venv installed as the README says (not editable),
with matplotlib and numba; ``nox -s bench-3.13`` the same on 3.13 and jax
0.12. ``nox -s bench-3.11 -- --quick`` is the short pass.

``nox -s device`` (not among the defaults: CI has no accelerator) runs the
differential tests on an accelerator, in one pytest process
(``tests/device/run.py``); where there is none it is skipped with a notice.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
from pathlib import Path

import nox
import nox.virtualenv

nox.options.sessions = ["lint", "typecheck", "tests", "runtime_only", "docs"]
nox.options.reuse_existing_virtualenvs = True
#: uv makes the venvs and installs into them where it is installed (the
#: README's test command installs it): the same packages, a few times faster
#: than pip, which is most of what the sessions besides pytest spend.
nox.options.default_venv_backend = "uv|virtualenv"
#: As pip does, uv compiles what it installs to bytecode: where the
#: environment sets PYTHONDONTWRITEBYTECODE (CI's does), no process writes
#: any, and each of the suite's thousand would compile jax from source.
os.environ.setdefault("UV_COMPILE_BYTECODE", "1")

CORE = "./packages/core"
RUNTIME = "./packages/runtime-pjrt"
PACKAGES = [CORE, "./packages/plugin-jax", "./packages/plugin-xla", RUNTIME]
PYTHON = "3.11"
#: Every Python the test suite runs on: the oldest supported, and the newest,
#: which gets the newest jax.
PYTHONS = ["3.11", "3.13"]


def _runs(command: str) -> bool:
    try:
        return subprocess.run([command, "-c", ""], capture_output=True).returncode == 0
    except OSError:
        return False


def _use_pyenv(versions: list[str]) -> None:
    """Put pyenv's interpreters on PATH for the versions PATH cannot run.

    Where pyenv's shims are on PATH, ``python3.13`` is found but refuses to
    run unless 3.13 is among pyenv's global versions, and nox does not look
    behind the shims.
    """
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for version in versions:
        if _runs(f"python{version}"):
            continue
        found = sorted(
            root.glob(f"{version}.*/bin/python{version}"),
            key=lambda p: [int(n) for n in re.findall(r"\d+", p.parent.parent.name)],
        )
        if found:
            os.environ["PATH"] = f"{found[-1].parent}{os.pathsep}{os.environ.get('PATH', '')}"


_use_pyenv(PYTHONS)


#: The model libraries real programs use; tests and examples only, never ppy's own.
MODEL_LIBRARIES = ("flax", "optax", "equinox", "jaxtyping", "beartype")


#: What the tests need besides ppy; pip and setuptools: tests install fixture
#: plugins with pip's --target, without build isolation (a uv venv has no pip).
#: import-linter: tests/architecture runs the import contract as lint does.
TEST_TOOLS = (
    "pytest",
    "pytest-xdist",
    "hypothesis",
    "pip",
    "setuptools>=68",
    "import-linter>=2.17",
)
#: Four workers on two cores: the tests mostly wait on ``ppy`` and
#: ``python`` subprocesses, and the workers beyond two keep the cores busy
#: while the others wait (the 3.11 session's pytest took 498 s with four,
#: 527 s with three, run one after the other on a clean clone, 2026-12-07;
#: 604 s with two the day before). ``loadfile`` sends a whole file
#: to one worker, so a module-scoped build is made once, and each worker builds
#: a shared example (tests/conftest.py's ``built_examples``) at most once. On 2
#: cores it measured ahead of ``load`` and of ``loadgroup``. The files go out
#: longest first (tests/conftest.py's ``LONGEST_FIRST``), not by their number
#: of tests as pytest-xdist would send them: the workers end together.
XDIST = ("-n", "4", "--dist", "loadfile")
#: The unit suites of the four distributions and the differential ones (python
#: against ``ppy run``): ``quick`` runs these, less the ``models`` tests.
QUICK = (
    "tests/core",
    "tests/architecture",
    "tests/plugin_jax",
    "tests/plugin_xla",
    "tests/runtime_pjrt",
    "tests/benchmarks",
    "tests/fidelity",
    "tests/programs",
    "tests/warm",
    "tests/record",
)


#: ml_dtypes 0.7 spends about 0.8 s of every ``import jax`` registering ufunc
#: promoters, and the suite starts over a thousand processes that import jax.
#: The test sessions install ml_dtypes 0.6, the fast import ``ppy doctor``
#: recommends: both sides of every differential test run in the same venv.
#: runtime_only and bench take what pip gives (0.7), as a user's install does.
FAST_IMPORT = ("ml_dtypes<0.7",)


#: The suites that run on every Python: the unit suites of core and of the
#: compiler, seconds each, where the language shows first (ast, frames,
#: the standard library); and the programs written before ppy, recorded as
#: written, whose staged calls jax 0.12 once computed otherwise than jit
#: (kernel_regression's closed-over constants, ``ppy_plugin_jax.constants``),
#: about 30 s on four workers; and the capture scan, which reads each
#: Python's bytecode (3.13 loads two locals in one instruction), in-process,
#: seconds. What jax 0.12 compares of weak types and dtypes is the
#: differential suite's (fidelity/test_captured.py), which runs there.
EVERY_PYTHON = (
    "tests/core",
    "tests/architecture",
    "tests/plugin_xla",
    "tests/record/test_foreign.py",
    "tests/record/test_foreign_keys.py",
    "tests/plugin_jax/test_captures.py",
)
#: The suites that run on the newest Python only: the differential suite,
#: against the newest jax, where the last three version differences were
#: found (a libm slip in jaxlib 0.12.1, a moved warning line, a standard
#: library module jax 0.12 no longer imports). The oldest Python runs every
#: other suite. Each differential test runs once, cold and warm, on one
#: Python or the other: two full passes took 23 minutes on CI's 2 cores,
#: and the README's test command must finish in 15.
NEWEST_ONLY = ("tests/fidelity",)


def _suites(python: object) -> list[str]:
    """What ``tests`` runs on ``python`` when no test is named after ``--``."""
    if python == PYTHONS[-1]:
        return [*EVERY_PYTHON, *NEWEST_ONLY]
    return [f"--ignore={suite}" for suite in NEWEST_ONLY]


@nox.session(python=PYTHONS)
def tests(session: nox.Session) -> None:
    """The suite, shared between the Pythons (``_suites``); a differential
    test runs its program cold and warm (tests/support/differential.py's ``WARM``)."""
    session.install(*PACKAGES, *MODEL_LIBRARIES, *TEST_TOOLS, *FAST_IMPORT)
    chosen = session.posargs or _suites(session.python)
    session.run("pytest", *XDIST, *chosen, env={"PPY_TESTS_WARM": "1"})


@nox.session(python=PYTHON)
def quick(session: nox.Session) -> None:
    """The inner loop: ``QUICK`` on one Python, without the model libraries."""
    session.install(*PACKAGES, *TEST_TOOLS, *FAST_IMPORT)
    session.run("pytest", *XDIST, "-m", "not models", *QUICK, *session.posargs)


#: What mypy checks, strictly: the four distributions and the example plugin,
#: whose conformance lines (``_: type[Plugin] = ...``) check the contracts.
TYPED = [f"{package}/src" for package in PACKAGES] + ["examples/third_party_plugin/src"]


#: Where ``lint-imports`` finds the packages its contract names (grimp reads
#: their source and imports none of them, so none is installed), and the
#: repository root, for the contract's type (tests/architecture/surface.py).
SOURCES = [".", *TYPED]


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    session.install("ruff", "import-linter>=2.17")
    session.run(
        "ruff", "check", "packages", "tests", "benchmarks", "examples", "docs", "noxfile.py"
    )
    session.run(
        "lint-imports",
        "pyproject.toml",
        "--no-cache",
        "--no-logo",
        env={"PYTHONPATH": os.pathsep.join(SOURCES)},
    )


@nox.session(python=PYTHON)
def arch(session: nox.Session) -> None:
    """The graph of core's rooms; fails on a loop. Reads the source, installs nothing."""
    session.run("python", "-m", "tests.architecture.folders", *session.posargs)


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    session.install("mypy", *PACKAGES)
    session.run("mypy", *TYPED)


@nox.session(python=PYTHONS)
def runtime_only(session: nox.Session) -> None:
    """Build with every package in one venv, run with core and the runtime in another."""
    builder = session.create_tmp() + "/build-env"
    if session.venv_backend == "uv":
        uv = nox.virtualenv.UV
        python = ("--python", str(session.python))
        session.run(uv, "venv", "-q", "--clear", *python, builder, external=True)
        installer = (uv, "pip", "install", "--python", f"{builder}/bin/python")
    else:
        session.run("python", "-m", "venv", "--clear", builder)
        installer = (f"{builder}/bin/python", "-m", "pip", "install")
    session.run(*installer, "-q", *PACKAGES, external=True)
    session.install(CORE, RUNTIME)
    session.run("python", "tests/runtime_only/check.py", "--build-python", f"{builder}/bin/python")


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """Build the site; a broken link, a missing page or missing results fail it."""
    session.install("mkdocs", "mkdocs-material", *PACKAGES)
    session.run("mkdocs", "build", "--strict", "--site-dir", session.create_tmp() + "/site")


@nox.session(python=PYTHONS)
def bench(session: nox.Session) -> None:
    """The benchmark runner; posargs go to benchmarks/run.py (e.g. ``-- --quick``).

    ``nox -s bench-3.11`` writes benchmarks/results/ and the README's table;
    another Python (``nox -s bench-3.13``) writes benchmarks/results/pythonX.Y/
    and leaves the README alone.
    """
    session.install(*PACKAGES, "matplotlib", "numba", "optax")
    # A reused venv must measure this checkout, not the ppy it was made with.
    session.install("--force-reinstall", "--no-deps", *PACKAGES)
    where = (
        []
        if session.python == PYTHON
        else ["--results", f"benchmarks/results/python{session.python}", "--no-readme"]
    )
    session.run("python", "benchmarks/run.py", *where, *session.posargs)


#: The device files an accelerator shows, by the jax extra that drives it: a
#: TPU VM's chips are /dev/accel* (v2-v4) or VFIO groups under /dev/vfio (v5e,
#: v5p, v6e); an NVIDIA GPU is /dev/nvidia0 and up. Looking costs nothing and
#: opens no device.
DEVICE_FILES = {
    "jax[tpu]": ("/dev/accel*", "/dev/vfio/[0-9]*"),
    "jax[cuda12]": ("/dev/nvidia[0-9]*",),
}


def _accelerator_extra() -> str | None:
    """The jax extra for the accelerator this machine shows, or None."""
    for extra, patterns in DEVICE_FILES.items():
        if any(glob.glob(pattern) for pattern in patterns):
            return extra
    return None


@nox.session(python=PYTHON)
def device(session: nox.Session) -> None:
    """The differential tests on an accelerator; skipped with a notice where there is none.

    The rule, in two steps, each cheap: no device file (``DEVICE_FILES``)
    skips before anything is installed; then ``tests/device/run.py --probe``
    asks jax, in one process that ends at once, for its default backend, and
    the CPU's skips too (a device file jax does not drive). posargs go to
    the runner (``nox -s device -- --deadline 480``, ``-- --resume``).
    """
    extra = _accelerator_extra()
    if extra is None:
        shown = ", ".join(p for patterns in DEVICE_FILES.values() for p in patterns)
        session.skip(f"no accelerator here (none of {shown}): nothing to run")
    session.install(*PACKAGES, extra, *MODEL_LIBRARIES, *TEST_TOOLS)
    found = json.loads(
        str(session.run("python", "tests/device/run.py", "--probe", silent=True)).splitlines()[-1]
    )
    if found.get("platform") in (None, "cpu"):
        why = found.get("error") or "jax's default backend is the CPU"
        session.skip(f"no accelerator jax can use here: {why}")
    session.run("python", "tests/device/run.py", *session.posargs)
