"""The recording's file, ``.ppy/signatures.json``, under hostile input and concurrency.

- a static float that JSON has no number for (``inf``, ``-inf``, ``nan``),
  passed while recording: the program prints what python prints, the call is
  left out of the file with a line that says why, and ``ppy build`` and
  ``ppy run`` of the project go on;
- a non-finite number written into the file by hand: ``ppy build``,
  ``ppy run`` and ``ppy record`` stop with exit 2, naming the file and the line;
- something other than a regular file where the file goes (a FIFO, a folder,
  a link to a device), or a FIFO at the name an older ppy wrote through: no
  command waits on it; ``ppy build`` and ``ppy record`` stop with exit 2
  naming the file, ``ppy run`` warns naming it and runs the program on jit's
  path; or it records;
- ``RECORDERS`` recordings of different programs of one project that run at
  once: every program's functions are in the file afterwards.

Every command here runs with a subprocess time limit only so that a hang
fails the test instead of the suite; nothing is timed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import PERMISSIONS, write_project
from tests.hardening.support import start_ppy

#: A hang fails the test after this many seconds (a build imports jax).
LIMIT = 240

STATIC = """\
import sys
from functools import partial

import jax
import jax.numpy as jnp


@partial(jax.jit, static_argnames=("bound",))
def clip(x, bound):
    return jnp.clip(x, -bound, bound)


for text in sys.argv[1:] or ["2.0"]:
    print(clip(jnp.arange(4.0) - 1.5, bound=float(text)))
"""

#: Static floats ``ppy record model.ppy VALUE`` passes that JSON has no number for.
NON_FINITE = ("inf", "-inf", "nan")

#: The file written by hand with a number no recording holds, and where it is.
HAND_EDITED = {
    "NaN": '"bound": {"static": NaN}',
    "Infinity": '"bound": {"static": Infinity}',
    "-Infinity": '"bound": {"static": -Infinity}',
    "1e999": '"bound": {"static": 1e999}',
}

#: What may sit where the file goes, and is not a regular file.
SPECIAL = ("a FIFO", "a folder", "a link to /dev/zero", "a FIFO at the temporary name")

#: Programs of one project recorded at once.
RECORDERS = 3


def _run(root: Path, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ppy", *args],
        cwd=root,
        env={**os.environ, "PPY_CACHE_DIR": str(cache)},
        capture_output=True,
        text=True,
        timeout=LIMIT,
        check=False,
    )


def _python(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "model.ppy", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=LIMIT,
        check=False,
    )


@dataclass(frozen=True)
class Recorded:
    """``STATIC`` recorded once with a finite value and every value of
    ``NON_FINITE``, then built and run: what each case reads."""

    plain: subprocess.CompletedProcess[str]
    recorded: subprocess.CompletedProcess[str]
    #: The recording's file as the recording left it.
    text: str
    built: subprocess.CompletedProcess[str]
    ran: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def non_finite(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    """Each value is a call of its own, skipped with a line of its own: one
    recording, build and run serve the three cases."""
    base = tmp_path_factory.mktemp("non-finite")
    root = write_project(base / "p", {"model.ppy": STATIC})
    cache = base / "cache"
    argv = ("2.0", *NON_FINITE)
    plain = _python(root, *argv)
    recorded = _run(root, cache, "record", "model.ppy", *argv)
    text = (root / ".ppy" / "signatures.json").read_text()
    built = _run(root, cache, "build")
    ran = _run(root, cache, "run", "model.ppy", *argv)
    return Recorded(plain, recorded, text, built, ran)


@pytest.mark.parametrize("value", NON_FINITE)
def test_a_non_finite_static_float_is_left_out_of_the_file_with_a_line(
    non_finite: Recorded, value: str
) -> None:
    plain, recorded = non_finite.plain, non_finite.recorded
    assert (recorded.stdout, recorded.returncode) == (plain.stdout, plain.returncode)
    said = [line for line in recorded.stderr.splitlines() if "record.skipped" in line]
    assert [line for line in said if f"the static float {value}," in line], recorded.stderr
    text = non_finite.text
    json.loads(text, parse_constant=lambda constant: pytest.fail(f"{constant} in the file"))
    assert '"static": 2.0' in text
    # Every later command of the project goes on, and the program prints what python prints.
    built, ran = non_finite.built, non_finite.ran
    assert built.returncode == 0, built.stdout + built.stderr
    assert "staged 1 of 1 candidate functions" in built.stdout
    assert (ran.stdout, ran.returncode) == (plain.stdout, plain.returncode), ran.stderr


@pytest.mark.parametrize("number", sorted(HAND_EDITED))
def test_a_non_finite_number_written_into_the_file_is_an_error_naming_the_line(
    tmp_path: Path, number: str
) -> None:
    root = write_project(tmp_path / "p", {"model.ppy": STATIC})
    cache = tmp_path / "cache"
    (root / ".ppy").mkdir()
    lines = [
        '{"format": "ppy-signatures", "version": 1, "runs": 1, "functions": {',
        '  "model.clip": {"signatures": [',
        '    {"calls": 1, "inputs": {"x": {"array": "float32[4]"},',
        f"      {HAND_EDITED[number]}}}}}",
        "  ]}}}",
    ]
    (root / ".ppy" / "signatures.json").write_text("\n".join(lines) + "\n")
    for command in (("build",), ("run", "model.ppy"), ("record", "model.ppy")):
        done = _run(root, cache, *command)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert "signatures.json" in done.stderr and "line 4" in done.stderr, done.stderr
        assert f"{number} is not a finite number" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
        assert done.stdout == "" or command == ("build",)


def _occupy(target: Path, what: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if what == "a FIFO":
        os.mkfifo(target)
    elif what == "a folder":
        target.mkdir()
    elif what == "a link to /dev/zero":
        target.symlink_to("/dev/zero")
    else:  # the name a write went through before the file took its place
        os.mkfifo(target.with_name(target.name + ".tmp"))


@pytest.mark.parametrize("what", SPECIAL)
def test_no_command_waits_on_what_is_not_a_regular_file(tmp_path: Path, what: str) -> None:
    root = write_project(tmp_path / "p", {"model.ppy": STATIC})
    cache = tmp_path / "cache"
    target = root / ".ppy" / "signatures.json"
    _occupy(target, what)
    plain = _python(root)
    if what == "a FIFO at the temporary name":  # not the file: recording writes it
        recorded = _run(root, cache, "record", "model.ppy")
        assert (recorded.stdout, recorded.returncode) == (plain.stdout, 0), recorded.stderr
        assert '"model.clip"' in target.read_text()
        assert _run(root, cache, "run", "model.ppy").stdout == plain.stdout
        return
    for command in (("build",), ("run", "model.ppy"), ("record", "model.ppy")):
        done = _run(root, cache, *command)
        assert "signatures.json" in done.stderr and "not a regular file" in done.stderr
        assert "Traceback" not in done.stderr
        if command[0] == "run":  # the program runs, on jit's path, with a warning
            assert (done.stdout, done.returncode) == (plain.stdout, 0), done.stderr
            assert "run.state_unusable" in done.stderr
            continue
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert done.stdout == "" or command == ("build",)


WAITS = """\
import os
import sys
import time
import jax
import jax.numpy as jnp


@jax.jit
def {name}(x):
    return x * {factor}


if __name__ == "__main__":
    print({name}(jnp.ones(3)))
    # Every recording has read the file before any program ends: each waits for the others.
    open(os.path.join(sys.argv[1], "{name}"), "w").close()
    while len(os.listdir(sys.argv[1])) < int(sys.argv[2]):
        time.sleep(0.05)
"""


def test_recordings_of_programs_of_one_project_at_once_all_land(tmp_path: Path) -> None:
    names = [f"step{i}" for i in range(RECORDERS)]
    files = {f"{name}.ppy": WAITS.format(name=name, factor=i + 2) for i, name in enumerate(names)}
    root = write_project(tmp_path / "p", files, PERMISSIONS)
    met = tmp_path / "met"
    met.mkdir()
    cache = tmp_path / "cache"
    env = {"PPY_CACHE_DIR": str(cache)}
    started = [
        start_ppy("record", f"{name}.ppy", str(met), str(RECORDERS), cwd=root, env=env)
        for name in names
    ]
    for process in started:
        _, err = process.communicate(timeout=LIMIT)
        assert process.returncode == 0, err
    data = json.loads((root / ".ppy" / "signatures.json").read_text())
    assert data["runs"] == RECORDERS
    assert sorted(data["functions"]) == sorted(f"{name}.{name}" for name in names)
    built = _run(root, cache, "build")
    assert f"staged {RECORDERS} of {RECORDERS}" in built.stdout, built.stdout
