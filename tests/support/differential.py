"""The one check every fidelity test makes: a program under ``python`` and
under ``ppy run``, compared as a user would compare them.

stdout and the exit status must be identical. stderr must be identical once
ppy's own log lines are taken out: the verbose run logs every event as one
JSON object per line, which are set apart and returned for the test to read;
a quiet run (no ``-v``) must print nothing of its own at all unless the test
expects it to. The verbose run is a cold ``ppy run``, the quiet one a warm
``ppy run --warm``: every case checks both paths.

One line of the machine's is set apart on both sides too (``machine_noise``):
on a TPU v5e or newer whose host has no transparent hugepages, ``import jax``
warns of it on stderr, in every process that imports jax. A warm run's
program does not print it (its server imported jax, and the warning went to
the server's stderr), so it would differ from python's for no fault of the
program's. Only that warning, from jax's own file, is taken out.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import PERMISSIONS, run_ppy, write_project

__all__ = ["Compared", "differential", "machine_noise", "project"]


@dataclass(frozen=True)
class Compared:
    """Both runs, and ppy's events from the verbose one."""

    python: subprocess.CompletedProcess[str]
    ppy: subprocess.CompletedProcess[str]
    events: list[dict[str, object]]

    def named(self, event: str) -> list[dict[str, object]]:
        return [e for e in self.events if e.get("event") == event]

    def bound(self) -> set[str]:
        return {str(e["function"]) for e in self.named("run.bind")}

    def fallbacks(self) -> list[dict[str, object]]:
        return self.named("run.fallback")

    def staged_calls(self, function: str) -> int:
        return sum(
            1
            for e in self.named("run.call")
            if e.get("function") == function and e.get("path") == "staged"
        )


def project(root: Path, files: Mapping[str, str], pyproject: str = PERMISSIONS) -> Path:
    """Write a project: ``files`` (dedented) and a pyproject that opts in."""
    return write_project(root, files, pyproject)


#: The warning ``import jax`` prints on a TPU v5e or newer when the host's
#: transparent hugepages are off (jax/_src/cloud_tpu_init.py), as Python's
#: warnings module writes it: the message's line, and the source line it
#: quotes when the file is readable.
HUGEPAGES = re.compile(
    r"^[^\n]*cloud_tpu_init\.py:\d+: UserWarning: Transparent hugepages are not enabled\."
    r"[^\n]*\n(?:[ \t]+warnings\.warn\([^\n]*\n)?",
    re.MULTILINE,
)


def machine_noise(stderr: str) -> str:
    """``stderr`` less what the machine, not the program, printed there (``HUGEPAGES``)."""
    return HUGEPAGES.sub("", stderr)


def _split(stderr: str) -> tuple[list[dict[str, object]], str]:
    events, rest = [], []
    for line in stderr.splitlines(keepends=True):
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if isinstance(event, dict) and "event" in event:
            events.append(event)
        else:
            rest.append(line)
    return events, "".join(rest)


#: The caches of the warm servers this test's differential runs started.
SERVED: set[Path] = set()
#: Whether each differential test also runs the program warm: always, but
#: where ``PPY_TESTS_WARM=0`` says otherwise (tests/device/run.py: on an
#: accelerator a forked child opens the chip as a fresh process does).
WARM = os.environ.get("PPY_TESTS_WARM", "1") != "0"


def _bytecode(root: Path) -> list[Path]:
    """The bytecode caches under ``root``, ppy's own folder left out."""
    return sorted(p for p in root.rglob("__pycache__") if ".ppy" not in p.parts)


def differential(
    root: Path,
    *argv: str,
    cache: Path,
    program: str = "model.ppy",
    env: Mapping[str, str] | None = None,
    build: bool = True,
    quiet_stderr: str | None = "",
    python_argv: tuple[str, ...] | None = None,
) -> Compared:
    """Run ``program`` both ways in ``root`` and assert they agree.

    ``build`` runs ``ppy build`` first (a failed build is the test's to
    read from the events). The verbose run is cold; the quiet one is warm
    (``ppy run --warm``, from a server the test's first such run started,
    and its end stops).
    ``quiet_stderr`` is what the quiet run may print besides python's stderr
    (None: not checked).
    """
    environ = {**os.environ, "PPY_CACHE_DIR": str(cache), **(env or {})}
    plain = subprocess.run(
        [sys.executable, *(python_argv or (program,)), *argv],
        cwd=root,
        capture_output=True,
        text=True,
        env=environ,
        check=False,
        timeout=300,
    )
    bytecode = _bytecode(root)
    if build:
        run_ppy("build", cwd=root, env=environ)
    verbose = run_ppy("-v", "--log-format", "json", "run", program, *argv, cwd=root, env=environ)
    # Nothing is left in the project that python would not have left there.
    assert _bytecode(root) == bytecode, "ppy wrote bytecode beside the sources"
    events, rest = _split(verbose.stderr)
    expected = machine_noise(plain.stderr)
    assert verbose.stdout == plain.stdout, (verbose.stdout, plain.stdout, verbose.stderr)
    assert verbose.returncode == plain.returncode, verbose.stderr
    assert machine_noise(rest) == expected, (rest, plain.stderr)
    if WARM:
        # The quiet run is a warm one: what a quiet ppy run prints is checked on
        # the path that adds the most (a server, a fork, the client's stdio handed over).
        # The server stays up for the test's next differential run, which forks
        # from it too; the test's end stops it (tests/conftest.py).
        SERVED.add(cache)
        quiet = run_ppy("run", "--warm", program, *argv, cwd=root, env=environ)
        assert (quiet.stdout, quiet.returncode) == (plain.stdout, plain.returncode), quiet.stderr
        if quiet_stderr is not None:
            assert machine_noise(quiet.stderr) == expected + quiet_stderr, quiet.stderr
    return Compared(plain, verbose, events)
