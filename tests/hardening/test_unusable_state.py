"""ppy's own state in a project (``.ppy``: the recording, the artifact, the
tools check's stamp) made unusable: ``ppy run`` still runs every program
python runs.

- ``UNUSABLE``: ``.ppy`` a file or a FIFO, something other than a regular
  file at ``.ppy/signatures.json``: ``ppy run`` (cold and warm) prints what
  python prints, exits as python exits, and warns once with
  ``run.state_unusable`` naming the real cause (``.ppy`` itself where it is
  not a folder); nothing is bound, every call takes jit's path, and nothing
  waits on a FIFO;
- a FIFO at the tools check's stamp beside the artifact: not waited on, and
  the artifact is still served;
- a FIFO at the build lock when ``ppy record``'s program ends: the file
  cannot be written, which is an error event; the program's output and exit
  status stand.

Run as root, permissions keep nothing from being read, so a recording
unreadable by its mode is not tried: it takes the path a FIFO takes (the
file could not be opened and read). A folder ppy cannot write is a build
that fails (``run.build_failed``, the program runs), tried as root nowhere
here. Each command has a time limit only so that a hang fails the test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import run_ppy, write_project
from tests.support.differential import SERVED, machine_noise
from tests.support.events import json_events

#: A hang fails the test after this many seconds.
LIMIT = 120

PROGRAM = """\
import sys

import jax
import jax.numpy as jnp


@jax.jit
def double(x):
    return x * 2


if __name__ == "__main__":
    print(double(jnp.arange(3.0)))
    print("done", file=sys.stderr)
    sys.exit(3)
"""


def _file(root: Path) -> None:
    shutil.rmtree(root / ".ppy")
    (root / ".ppy").write_text("notes\n")


def _fifo(root: Path) -> None:
    shutil.rmtree(root / ".ppy")
    os.mkfifo(root / ".ppy")


def _recording(make: Callable[[Path], None]) -> Callable[[Path], None]:
    def occupy(root: Path) -> None:
        target = root / ".ppy" / "signatures.json"
        target.unlink()
        make(target)

    return occupy


#: case -> (what is done to the recorded and built project, the path the
#: warning names, words of its reason)
UNUSABLE: dict[str, tuple[Callable[[Path], None], str, str]] = {
    ".ppy a file": (_file, ".ppy", "is a file, not a folder"),
    ".ppy a FIFO": (_fifo, ".ppy", "is a FIFO, not a folder"),
    "a FIFO at .ppy/signatures.json": (
        _recording(os.mkfifo),
        ".ppy/signatures.json",
        "it is a FIFO, not a regular file",
    ),
    "a folder at .ppy/signatures.json": (
        _recording(Path.mkdir),
        ".ppy/signatures.json",
        "it is a folder, not a regular file",
    ),
}


@dataclass(frozen=True)
class Built:
    """``PROGRAM`` recorded and built once, and what python did with it."""

    root: Path
    plain: subprocess.CompletedProcess[str]

    def copy(self, tmp_path: Path) -> tuple[Path, dict[str, str]]:
        """The test's own copy, and the environment of a fresh executable cache."""
        root = shutil.copytree(self.root, tmp_path / "project")
        return root, {"PPY_CACHE_DIR": str(tmp_path / "cache")}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    base = tmp_path_factory.mktemp("unusable")
    root = write_project(base / "project", {"model.ppy": PROGRAM})
    env = {"PPY_CACHE_DIR": str(base / "cache")}
    plain = subprocess.run(
        [sys.executable, "model.ppy"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=LIMIT,
        check=False,
    )
    assert plain.returncode == 3, plain.stderr
    for command in (("record", "model.ppy"), ("build",)):
        done = run_ppy(*command, cwd=root, env=env, timeout=LIMIT)
        assert done.returncode == (3 if command[0] == "record" else 0), done.stderr
    assert (root / ".ppy" / "artifact.ppyz").is_file()
    return Built(root, plain)


def _rest(stderr: str) -> str:
    """``stderr`` less ppy's JSON events and the machine's noise."""
    return machine_noise(
        "".join(line for line in stderr.splitlines(True) if not line.startswith("{"))
    )


@pytest.mark.parametrize("case", UNUSABLE)
def test_run_warns_naming_the_cause_and_runs_the_program_on_jits_path(
    built: Built, tmp_path: Path, case: str
) -> None:
    damage, named, reason = UNUSABLE[case]
    root, env = built.copy(tmp_path)
    damage(root)
    ran = run_ppy(
        "-v", "--log-format", "json", "run", "model.ppy", cwd=root, env=env, timeout=LIMIT
    )
    assert (ran.stdout, ran.returncode) == (built.plain.stdout, built.plain.returncode), ran.stderr
    assert _rest(ran.stderr) == machine_noise(built.plain.stderr)
    (warning,) = json_events(ran.stderr, "run.state_unusable")
    assert warning["path"] == str(root / named), warning
    assert reason in str(warning["error"]) and "remedy" in str(warning["error"]), warning
    assert not json_events(ran.stderr, "run.bind")
    assert {e["path"] for e in json_events(ran.stderr, "run.call")} <= {"original"}


def test_a_warm_run_warns_and_runs_the_program_too(built: Built, tmp_path: Path) -> None:
    """Each case under ``ppy run --warm``, from one server: python's output
    and exit status, python's stderr and the one warning."""
    root, env = built.copy(tmp_path)
    SERVED.add(Path(env["PPY_CACHE_DIR"]))  # the test's end stops the server
    pristine = shutil.copytree(root / ".ppy", tmp_path / "state")
    for damage, named, reason in UNUSABLE.values():
        if (root / ".ppy").is_dir():
            shutil.rmtree(root / ".ppy")
        else:
            (root / ".ppy").unlink()
        shutil.copytree(pristine, root / ".ppy")
        damage(root)
        ran = run_ppy("run", "--warm", "model.ppy", cwd=root, env=env, timeout=LIMIT)
        assert (ran.stdout, ran.returncode) == (built.plain.stdout, built.plain.returncode)
        expected = machine_noise(built.plain.stderr)
        assert machine_noise(ran.stderr).startswith("[warning  ] run.state_unusable"), ran.stderr
        assert machine_noise(ran.stderr).endswith(expected), ran.stderr
        assert f"{root / named}: " in ran.stderr and reason in ran.stderr, ran.stderr


def test_a_fifo_at_the_tools_stamp_is_not_waited_on(built: Built, tmp_path: Path) -> None:
    """The stamp of a passed tools check only saves a check: a FIFO there is
    read as no stamp, the tools are checked again, and the artifact is served."""
    root, env = built.copy(tmp_path)
    stamp = root / ".ppy" / "artifact.ppyz.checked"
    stamp.unlink(missing_ok=True)
    os.mkfifo(stamp)
    ran = run_ppy(
        "-v", "--log-format", "json", "run", "model.ppy", cwd=root, env=env, timeout=LIMIT
    )
    assert (ran.stdout, ran.returncode) == (built.plain.stdout, built.plain.returncode), ran.stderr
    assert _rest(ran.stderr) == machine_noise(built.plain.stderr)
    assert [e["function"] for e in json_events(ran.stderr, "run.bind")] == ["double"]
    assert not json_events(ran.stderr, "run.state_unusable")


def test_a_recording_that_cannot_be_written_keeps_the_programs_output(
    built: Built, tmp_path: Path
) -> None:
    """``ppy record`` that cannot take the project's lock when the program
    ends (a FIFO where the lock goes): python's output, exit status and
    stderr, one ``record.write_failed`` naming the lock, the file as it was
    and no traceback."""
    root, env = built.copy(tmp_path)
    lock = root / ".ppy" / "artifact.ppyz.lock"
    lock.unlink(missing_ok=True)
    os.mkfifo(lock)
    before = (root / ".ppy" / "signatures.json").read_bytes()
    done = run_ppy("--log-format", "json", "record", "model.ppy", cwd=root, env=env, timeout=LIMIT)
    assert (done.stdout, done.returncode) == (built.plain.stdout, built.plain.returncode)
    assert _rest(done.stderr) == machine_noise(built.plain.stderr), done.stderr
    (failed,) = json_events(done.stderr, "record.write_failed")
    assert f"{lock}: the build lock is not a regular file" in str(failed["error"]), failed
    assert (root / ".ppy" / "signatures.json").read_bytes() == before
