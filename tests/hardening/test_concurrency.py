"""Several ppy processes on one project or one cache at once: all end well, nobody
reads half a file.

- two real ``ppy build`` started while a third party holds the build lock:
  both wait, then run one after the other, the second reusing the first's
  entries; with the lock held too long, a build stops with a clear error;
- a writer rewrites the artifact and a cache entry over and over while
  readers read them (``REWRITES`` times each): every read sees a whole old or
  a whole new file;
- ``RUNS`` real ``ppy run`` of the jax example at once on a cold cache all
  print what ``python model.ppy`` prints and leave one good entry per
  signature.
"""

from __future__ import annotations

import dataclasses
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from ppy.artifact.lock import build_lock, lock_path
from ppy.artifact.read import loads, read_artifact
from ppy.artifact.write import write_artifact
from ppy.cache import ExecutableCache

from tests.conftest import BuiltExample
from tests.hardening.support import copy_example, ppy, real_artifact, start_ppy

REWRITES = 200
RUNS = 3
BUILDS = 2


def _wait_for(process: subprocess.Popen[str], words: str) -> list[str]:
    """The stderr lines up to the first holding ``words``; fails if the process ends first."""
    assert process.stderr is not None
    lines = []
    for line in process.stderr:
        lines.append(line)
        if words in line:
            return lines
    raise AssertionError(f"the process ended without saying {words!r}: {''.join(lines)}")


def test_builds_started_together_wait_for_the_lock_and_the_second_reuses(
    tmp_path: Path,
) -> None:
    root = copy_example("40_xla_scalar", tmp_path)
    artifact = root / ".ppy" / "artifact.ppyz"
    env = {"PPY_CACHE_DIR": str(tmp_path / "cache")}
    with build_lock(artifact):
        builds = [start_ppy("-v", "build", str(root), env=env) for _ in range(BUILDS)]
        early = [_wait_for(b, "build.waiting") for b in builds]
    outputs = []
    for build, lines in zip(builds, early, strict=True):
        stdout, stderr = build.communicate(timeout=300)
        assert build.returncode == 0, "".join(lines) + stderr
        outputs.append(next(ln for ln in stdout.splitlines() if ln.startswith("wrote ")))
    assert sorted(outputs) == [
        f"wrote {artifact}: 0 staged, 3 reused, 1 stay",
        f"wrote {artifact}: 3 staged, 0 reused, 1 stay",
    ]
    assert len(read_artifact(artifact).entries) == 3
    assert sorted(p.name for p in artifact.parent.iterdir()) == sorted(
        [artifact.name, lock_path(artifact).name]
    ), "no temporary file is left"


def test_a_build_that_waits_too_long_says_so(tmp_path: Path) -> None:
    root = copy_example("40_xla_scalar", tmp_path)
    artifact = root / ".ppy" / "artifact.ppyz"
    with build_lock(artifact):
        result = ppy("build", str(root), env={"PPY_LOCK_TIMEOUT": "0.5"})
    assert result.returncode == 1
    assert f"ppy: error: {lock_path(artifact)}: another ppy build" in result.stderr
    assert "remedy: wait for it to finish, or raise PPY_LOCK_TIMEOUT" in result.stderr
    assert "Traceback" not in result.stderr and not artifact.exists()


#: ``PPY_LOCK_TIMEOUT`` values that are not a number of seconds ppy will wait.
BAD_TIMEOUTS = ("abc", "-1", "inf", "nan", "1e9")


@pytest.mark.parametrize("value", BAD_TIMEOUTS)
def test_a_lock_timeout_that_is_not_a_number_of_seconds_is_bad_usage(
    value: str, tmp_path: Path
) -> None:
    root = copy_example("40_xla_scalar", tmp_path)
    result = ppy("build", str(root), env={"PPY_LOCK_TIMEOUT": value})
    assert result.returncode == 2
    assert f"ppy: error: PPY_LOCK_TIMEOUT={value!r} is not a number of seconds" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (root / ".ppy" / "artifact.ppyz").exists()


def _hammer(write: object, read: object, rewrites: int) -> list[str]:
    """Run ``write(i)`` ``rewrites`` times in a thread while ``read()`` runs in two others."""
    done = threading.Event()
    seen: list[str] = []
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for i in range(rewrites):
                write(i)  # type: ignore[operator]
        finally:
            done.set()

    def reader() -> None:
        try:
            while not done.is_set():
                seen.append(read())  # type: ignore[operator]
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=t) for t in (writer, reader, reader)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return seen


def test_an_artifact_rewritten_while_it_is_read_is_always_read_whole(tmp_path: Path) -> None:
    base = loads(real_artifact())
    versions = [dataclasses.replace(base, project=f"version-{i}") for i in range(2)]
    path = tmp_path / "artifact.ppyz"
    write_artifact(versions[0], path)
    seen = _hammer(
        lambda i: write_artifact(versions[i % 2], path),
        lambda: read_artifact(path).project,
        REWRITES,
    )
    assert set(seen) <= {"version-0", "version-1"} and seen
    assert [p.name for p in tmp_path.iterdir()] == ["artifact.ppyz"]


def test_a_cache_entry_rewritten_while_it_is_read_is_always_read_whole(tmp_path: Path) -> None:
    cache = ExecutableCache(tmp_path / "cache")
    key = "ab" * 32
    bodies = [bytes([i]) * (1 << 18) for i in range(2)]
    cache.put(key, bodies[0])

    def read() -> str:
        body = cache.get(key)
        assert body in bodies, "a reader saw a missing or torn entry"
        return str(bodies.index(body))

    seen = _hammer(lambda i: cache.put(key, bodies[i % 2]), read, REWRITES)
    assert set(seen) <= {"0", "1"} and seen
    assert cache.stats()[0] == 1 and not list(cache.directory.glob(".tmp-*"))


@pytest.mark.slow
def test_runs_at_once_on_a_cold_cache_leave_one_good_entry_per_signature(
    tmp_path: Path, built_examples: Callable[[str], BuiltExample]
) -> None:
    shared = built_examples("25_jax_export")  # copied, run under python, built
    assert shared.plain.returncode == 0, shared.plain.stderr
    plain = shared.plain.stdout
    built = shared.build
    assert built.returncode == 0, built.stderr
    root = shared.copy(tmp_path)
    cache = tmp_path / "cache"
    env = {"PPY_CACHE_DIR": str(cache)}
    runs = [start_ppy("run", "--no-build", str(root / "model.ppy"), env=env) for _ in range(RUNS)]
    for run in runs:
        stdout, stderr = run.communicate(timeout=300)
        assert (run.returncode, stdout) == (0, plain), stderr
        assert "cache.corrupt" not in stderr and "cache.untrusted" not in stderr
    # score is called with one shape: one signature, one entry, however many wrote it.
    entries = sorted(cache.glob("*.exe"))
    assert [p.name.startswith(".tmp-") for p in entries] == [False]
    assert ExecutableCache(cache).get(entries[0].stem) is not None
