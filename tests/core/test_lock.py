"""The build lock (``ppy.artifact.lock``) on real files, held by real processes.

A holder is another Python process that takes the lock and keeps it until it
is told to let go or is killed, as a concurrent ``ppy build`` would. The
end-to-end cases (two ``ppy build`` at once, a lock shipped as a link) are in
tests/hardening/test_concurrency.py and test_artifact_place.py.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ppy.artifact.lock import (
    DEFAULT_TIMEOUT,
    LOCK_TIMEOUT_ENV,
    LockTimeout,
    build_lock,
    lock_path,
)
from ppy.errors import PpyError, UsageError
from structlog.testing import capture_logs

HOLDER = """\
import sys
from pathlib import Path

from ppy.artifact.lock import build_lock

with build_lock(Path(sys.argv[1]), timeout=0):
    print("held", flush=True)
    sys.stdin.readline()
print("released", flush=True)
"""


class Holder:
    """Another process holding the build lock of ``artifact`` until ``release``."""

    def __init__(self, artifact: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(artifact)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line == "held\n", line + self.process.stderr.read()  # type: ignore[union-attr]

    def release(self) -> None:
        out, err = self.process.communicate("go\n", timeout=30)
        assert (self.process.returncode, out) == (0, "released\n"), err

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.communicate(timeout=30)
        assert self.process.returncode == -signal.SIGKILL


@pytest.fixture
def artifact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where a project's artifact goes; its ``.ppy`` folder does not exist yet."""
    monkeypatch.delenv(LOCK_TIMEOUT_ENV, raising=False)
    return tmp_path / "project" / ".ppy" / "artifact.ppyz"


@pytest.fixture
def holder(artifact: Path) -> Iterator[Holder]:
    held = Holder(artifact)
    yield held
    if held.process.poll() is None:
        held.kill()


def _free(path: Path) -> bool:
    """Whether another open file description could take the lock now."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def test_the_lock_file_is_beside_the_artifact() -> None:
    assert lock_path(Path("/p/.ppy/artifact.ppyz")) == Path("/p/.ppy/artifact.ppyz.lock")
    assert lock_path(Path("out/other.zip")) == Path("out/other.zip.lock")


def test_a_free_lock_is_taken_at_once_and_released_after_the_block(artifact: Path) -> None:
    with capture_logs() as events, build_lock(artifact, timeout=0):
        assert not _free(lock_path(artifact))
        assert not artifact.exists(), "the lock does not write the artifact"
    assert events == [], "no wait, nothing to say"
    assert _free(lock_path(artifact))
    lock = lock_path(artifact)
    assert lock.is_file() and lock.read_bytes() == b"", "the lock file stays, empty"
    assert sorted(p.name for p in artifact.parent.iterdir()) == [lock.name]


def test_the_lock_is_released_when_the_block_raises(artifact: Path) -> None:
    with pytest.raises(RuntimeError, match="the build failed"), build_lock(artifact, timeout=0):
        raise RuntimeError("the build failed")
    assert _free(lock_path(artifact))
    with build_lock(artifact, timeout=0):
        pass


def test_a_held_lock_times_out_with_the_error_users_see(artifact: Path, holder: Holder) -> None:
    started = time.monotonic()
    with (
        capture_logs() as events,
        pytest.raises(LockTimeout) as raised,
        build_lock(artifact, timeout=0.3),
    ):
        pytest.fail("the block ran while another process held the lock")
    assert time.monotonic() - started >= 0.3
    error = raised.value
    lock = lock_path(artifact)
    assert isinstance(error, PpyError) and error.exit_code == 1
    assert error.message == f"{lock}: another ppy build of this project has held the lock for 0.3 s"
    assert error.remedy == f"wait for it to finish, or raise {LOCK_TIMEOUT_ENV}"
    assert str(error) == f"{error.message}\n  remedy: {error.remedy}"
    # One event for the wait, however many times it polled.
    assert [(e["event"], e["lock"], e["timeout"]) for e in events] == [
        ("build.waiting", str(lock), 0.3)
    ]
    assert not artifact.exists()
    holder.release()
    with build_lock(artifact, timeout=0):
        pass


def test_a_waiting_build_goes_on_when_the_holder_finishes(artifact: Path, holder: Holder) -> None:
    entered = threading.Event()
    errors: list[BaseException] = []

    def build() -> None:
        try:
            with build_lock(artifact, timeout=60):
                entered.set()
        except BaseException as error:  # reported by the test below
            errors.append(error)

    with capture_logs() as events:
        waiting = threading.Thread(target=build)
        waiting.start()
        time.sleep(0.5)
        assert not entered.is_set(), "the lock was taken while another process held it"
        holder.release()
        waiting.join(timeout=30)
    assert entered.is_set() and errors == []
    assert [e["event"] for e in events] == ["build.waiting"]


def test_the_lock_of_a_killed_build_is_taken_at_once(artifact: Path, holder: Holder) -> None:
    holder.kill()
    lock = lock_path(artifact)
    assert lock.is_file(), "a killed holder leaves its lock file behind"
    started = time.monotonic()
    with capture_logs() as events, build_lock(artifact, timeout=0):
        pass
    assert time.monotonic() - started < 5 and events == []


def test_a_stale_lock_file_from_an_earlier_build_is_taken(artifact: Path) -> None:
    lock = lock_path(artifact)
    lock.parent.mkdir(parents=True)
    lock.write_text("left by a build of another version\n")
    with build_lock(artifact, timeout=0):
        assert not _free(lock)
    assert lock.read_text() == "left by a build of another version\n", "its content is not read"


def test_the_timeout_comes_from_the_environment(
    artifact: Path, holder: Holder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(LOCK_TIMEOUT_ENV, "0.2")
    with pytest.raises(LockTimeout, match=r"held the lock for 0\.2 s"), build_lock(artifact):
        pass
    # An explicit timeout wins over the environment.
    with (
        pytest.raises(LockTimeout, match=r"held the lock for 0\.1 s"),
        build_lock(artifact, timeout=0.1),
    ):
        pass


def test_without_the_environment_a_build_waits_ten_minutes(artifact: Path, holder: Holder) -> None:
    assert DEFAULT_TIMEOUT == 600.0

    def build() -> None:
        with build_lock(artifact):
            pass

    with capture_logs() as events:
        waiting = threading.Thread(target=build)
        waiting.start()
        deadline = time.monotonic() + 30
        while not events and time.monotonic() < deadline:
            time.sleep(0.05)
        seen = list(events)
        holder.release()
        waiting.join(timeout=30)
    assert not waiting.is_alive()
    assert [(e["event"], e["timeout"]) for e in seen] == [("build.waiting", DEFAULT_TIMEOUT)]


@pytest.mark.parametrize("value", ["abc", "", "-1", "86401", "inf", "nan", "1e9"])
def test_a_timeout_that_is_not_a_number_of_seconds_is_bad_usage(
    artifact: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(LOCK_TIMEOUT_ENV, value)
    with pytest.raises(UsageError) as raised, build_lock(artifact):
        pytest.fail("the block ran with a bad timeout")
    assert raised.value.exit_code == 2
    assert raised.value.message == f"{LOCK_TIMEOUT_ENV}={value!r} is not a number of seconds"
    assert "from 0 to 86400" in str(raised.value.remedy)
    assert not artifact.parent.exists(), "refused before anything is created"


@pytest.mark.parametrize("value", ["0", "86400", " 2.5 "])
def test_a_timeout_from_zero_to_a_day_is_accepted(
    artifact: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(LOCK_TIMEOUT_ENV, value)
    with build_lock(artifact):
        pass


def test_a_lock_that_is_a_link_is_refused_and_its_target_left_alone(
    artifact: Path, tmp_path: Path
) -> None:
    lock = lock_path(artifact)
    lock.parent.mkdir(parents=True)
    missing = tmp_path / "elsewhere" / "created.txt"
    lock.symlink_to(missing)
    with (
        pytest.raises(PpyError, match="the build lock is a symbolic link") as raised,
        build_lock(artifact, timeout=0),
    ):
        pytest.fail("locked through a link")
    assert raised.value.remedy == "remove the link; ppy creates the lock file itself"
    assert not missing.exists() and not missing.parent.exists()


def test_a_lock_that_is_not_a_regular_file_is_refused(artifact: Path) -> None:
    lock = lock_path(artifact)
    lock.parent.mkdir(parents=True)
    os.mkfifo(lock)
    with (
        pytest.raises(PpyError, match="the build lock is not a regular file"),
        build_lock(artifact, timeout=0),
    ):
        pytest.fail("locked a fifo")


def test_a_lock_that_cannot_be_created_says_where(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    artifact = blocker / ".ppy" / "artifact.ppyz"
    with (
        pytest.raises(PpyError, match="cannot open the build lock") as raised,
        build_lock(artifact, timeout=0),
    ):
        pytest.fail("locked under a file")
    assert str(lock_path(artifact)) in raised.value.message
    assert raised.value.remedy == "check that the artifact's folder is writable"
