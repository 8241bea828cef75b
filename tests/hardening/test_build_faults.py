"""Faults in the user's code at build time: each ends in a decision with its reason,
and the build goes on.

One project, one real ``ppy build --keep-going`` with real jax export
workers: one module per fault in ``FAULTS`` (an exception, output on stdout,
``sys.exit``, ``os._exit``, an endless loop, a memory blow-up past
``export-memory-limit``, a segfault, a read of a secret from the
environment), and a last, well-behaved module that must still be staged.
"""

from __future__ import annotations

import textwrap

import pytest
from ppy.artifact.read import read_artifact
from ppy.decision import Decision, Outcome

from tests.hardening.support import ppy

pytestmark = pytest.mark.slow

SECRET = "hunter2-do-not-leak"
PYPROJECT = """\
[project]
name = "faults"

[tool.ppy]
build-execution = "allow"

[tool.ppy.plugins.jax]
allow-build-export = true
export-timeout = 12
export-memory-limit = 1024
"""

HEADER = """\
import os
import sys
from typing import Annotated

import jax
import ppy

Vec = Annotated[jax.Array, ppy.Shape(3), ppy.DType("float32")]
"""


def _module(at_import: str = "", in_function: str = "") -> str:
    return (
        HEADER
        + textwrap.dedent(at_import)
        + "\n\n@jax.jit\ndef f(x: Vec) -> jax.Array:\n"
        + textwrap.indent(textwrap.dedent(in_function), "    ")
        + "    return x + 1\n"
    )


#: module -> (its source, the outcome and rule of f's decision, words its reason has)
FAULTS: dict[str, tuple[str, Outcome, str, *tuple[str, ...]]] = {
    "raises": (
        _module('raise RuntimeError("no database here")'),
        Outcome.STAYS,
        "import-failed",
        "RuntimeError at raises.ppy:",
        "while importing raises.ppy: no database here",
    ),
    "prints": (
        _module(
            'print("hello from import")\nsys.stdout.write(\'{"event": "done"}\\n\')',
            'print("tracing f now")\nos.write(1, b"raw fd 1\\n")\n',
        ),
        Outcome.STAYS,
        "trace-side-effect",
        "its trace writes to stdout or stderr ('tracing f now')",
    ),
    "exits": (
        _module("sys.exit(3)"),
        Outcome.STAYS,
        "import-failed",
        "the code called sys.exit(3) while importing exits.ppy",
    ),
    "hard_exit": (
        _module(in_function="os._exit(7)\n"),
        Outcome.STAYS,
        "export-failed",
        "the export worker exited with code 7 while importing or exporting hard_exit.ppy",
    ),
    "loops": (
        _module(in_function="while True:\n    pass\n"),
        Outcome.STAYS,
        "export-failed",
        "timed out after 12 s (export-timeout) while importing or exporting loops.ppy",
    ),
    "memory": (
        _module(in_function="hoard = bytearray(4 << 30)\n"),
        Outcome.STAYS,
        "export-failed",
        "MemoryError at memory.ppy:",
        "while exporting it",
    ),
    "segfault": (
        _module(in_function="import ctypes\nctypes.string_at(0)\n"),
        Outcome.STAYS,
        "export-failed",
        "the export worker was killed by SIGSEGV while importing or exporting segfault.ppy",
    ),
    "secret": (
        _module(in_function="raise LookupError(f\"secret={os.environ.get('PPY_SECRET')!r}\")\n"),
        Outcome.STAYS,
        "export-failed",
        "LookupError at secret.ppy:",
        "while exporting it: secret=None",
    ),
    "well_behaved": (_module(), Outcome.STAGED, "staged", "exported for cpu"),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Decision], str, str]:
    root = tmp_path_factory.mktemp("faults")
    (root / "pyproject.toml").write_text(PYPROJECT)
    for name, (source, *_) in FAULTS.items():
        (root / f"{name}.ppy").write_text(source)
    env = {"PPY_SECRET": SECRET, "PPY_CACHE_DIR": str(root / "cache")}
    result = ppy("build", "--keep-going", str(root), env=env)
    assert result.returncode == 0, result.stderr
    artifact = read_artifact(root / ".ppy" / "artifact.ppyz")
    decisions = {d.module: d for d in artifact.decisions if d.qualname == "f"}
    return decisions, result.stdout, result.stderr


@pytest.mark.parametrize("module", list(FAULTS))
def test_each_fault_ends_in_a_decision_with_its_reason(
    module: str, built: tuple[dict[str, Decision], str, str]
) -> None:
    decisions, stdout, _ = built
    _, outcome, rule, *words = FAULTS[module]
    decision = decisions[module]
    assert (decision.outcome, decision.rule) == (outcome, rule), decision.reason
    for word in words:
        assert word in decision.reason
    if outcome is Outcome.STAYS:
        assert decision.remedy, "every failure says what to do"
        assert f"{module}" in stdout and "stays" in stdout
    if module == "memory":
        assert "export-memory-limit" in (decision.remedy or "")


def test_what_the_code_prints_never_reaches_the_build_output(
    built: tuple[dict[str, Decision], str, str],
) -> None:
    decisions, stdout, stderr = built
    # Only as the quoted output of the function it explains, never loose.
    loose = [line for line in stdout.splitlines() if not line.startswith("    | ")]
    for noise in ("hello from import", "raw fd 1", '{"event": "done"}'):
        assert not any(noise in line for line in loose) and noise not in stderr
    assert "    | raw fd 1" in stdout
    assert decisions["well_behaved"].outcome is Outcome.STAGED


def test_a_secret_in_the_parent_environment_does_not_reach_the_worker(
    built: tuple[dict[str, Decision], str, str],
) -> None:
    decisions, stdout, stderr = built
    assert "secret=None" in decisions["secret"].reason
    assert SECRET not in stdout + stderr + decisions["secret"].reason + decisions["secret"].output
