"""Sessions: ``nox`` runs them all, as the README's test command does.

- tests: the whole pytest suite against the four distributions.
- lint: ruff.
- typecheck: mypy, strict on core.
- runtime_only: a venv with only ppy-core and ppy-runtime-pjrt runs an artifact
  built in another venv.
- docs: the site under docs/, built with mkdocs --strict (its hooks import ppy).

``nox -s bench`` (not among the defaults) runs the benchmarks: ppy against
plain JAX, in a venv installed as the README says (not editable), with
matplotlib and numba. ``nox -s bench -- --quick`` is the short pass.
"""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "typecheck", "tests", "runtime_only", "docs"]
nox.options.reuse_existing_virtualenvs = True

CORE = "./packages/core"
RUNTIME = "./packages/runtime-pjrt"
PACKAGES = [CORE, "./packages/plugin-jax", "./packages/plugin-xla", RUNTIME]
PYTHON = "3.11"


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    session.install(*PACKAGES, "pytest", "pytest-xdist", "hypothesis")
    session.run("pytest", "-n", "2", *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run(
        "ruff", "check", "packages", "tests", "benchmarks", "examples", "docs", "noxfile.py"
    )


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    session.install("mypy", *PACKAGES)
    session.run("mypy", "packages/core/src")


@nox.session(python=PYTHON)
def runtime_only(session: nox.Session) -> None:
    """Build with every package in one venv, run with core and the runtime in another."""
    builder = session.create_tmp() + "/build-env"
    session.run("python", "-m", "venv", "--clear", builder)
    session.run(f"{builder}/bin/python", "-m", "pip", "install", "-q", *PACKAGES, external=True)
    session.install(CORE, RUNTIME)
    session.run("python", "tests/runtime_only/check.py", "--build-python", f"{builder}/bin/python")


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """Build the site; a broken link, a missing page or missing results fail it."""
    session.install("mkdocs", "mkdocs-material", *PACKAGES)
    session.run("mkdocs", "build", "--strict", "--site-dir", session.create_tmp() + "/site")


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """The benchmark runner; posargs go to benchmarks/run.py (e.g. ``-- --quick``)."""
    session.install(*PACKAGES, "matplotlib", "numba")
    # A reused venv must measure this checkout, not the ppy it was made with.
    session.install("--force-reinstall", "--no-deps", *PACKAGES)
    session.run("python", "benchmarks/run.py", *session.posargs)
