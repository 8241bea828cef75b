"""The executable cache trusts only what the user alone could have written.

Real ``ppy run`` of the xla example against a real cache directory. Each
``DAMAGE`` case changes a warm cache the way another user, a careless
``chmod`` or a torn write would; the program must still print what ``python
model.ppy`` prints, the problem must be logged, and nothing untrusted may be
loaded: an untrusted or broken entry is replaced by a fresh one of the
user's own, an untrusted directory is left alone.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from ppy.cache import ExecutableCache

from tests.hardening.support import copy_example, ppy

OTHER_UID = 54321


def _entries(cache: Path) -> list[Path]:
    return sorted(p for p in cache.glob("*.exe") if not p.name.startswith(".tmp-"))


def _each(change: Callable[[Path], None]) -> Callable[[Path], None]:
    def damage(cache: Path) -> None:
        for path in _entries(cache):
            change(path)

    return damage


def _link(path: Path) -> None:
    elsewhere = path.parent.parent / f"elsewhere-{path.name}"
    shutil.copy2(path, elsewhere)
    path.unlink()
    path.symlink_to(elsewhere)


#: case -> (what it does to the cache, the event logged, words of the reason, entries replaced)
DAMAGE: dict[str, tuple[Callable[[Path], None], str, str, bool]] = {
    "a group-writable entry": (
        _each(lambda p: p.chmod(0o620)),
        "cache.untrusted",
        "writable by other users",
        True,
    ),
    "a world-writable entry": (
        _each(lambda p: p.chmod(0o606)),
        "cache.untrusted",
        "writable by other users",
        True,
    ),
    "an entry of another user": (
        _each(lambda p: os.chown(p, OTHER_UID, OTHER_UID)),
        "cache.untrusted",
        f"belongs to uid {OTHER_UID}",
        True,
    ),
    "an entry that is a symbolic link": (_each(_link), "cache.untrusted", "symbolic link", True),
    "a truncated entry": (
        _each(lambda p: p.write_bytes(p.read_bytes()[:40])),
        "cache.corrupt",
        "compiled again",
        True,
    ),
    "a garbage entry": (
        _each(lambda p: p.write_bytes(os.urandom(300))),
        "cache.corrupt",
        "compiled again",
        True,
    ),
    "a group-writable directory": (
        lambda c: c.chmod(0o770),
        "cache.untrusted",
        "writable by other users",
        False,
    ),
    "a directory of another user": (
        lambda c: os.chown(c, OTHER_UID, OTHER_UID),
        "cache.untrusted",
        f"belongs to uid {OTHER_UID}",
        False,
    ),
}


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """The example, a cache one run filled, and what ``python model.ppy`` prints."""
    base = tmp_path_factory.mktemp("cache-trust")
    root = copy_example("40_xla_scalar", base)
    plain = subprocess.run(
        [sys.executable, "model.ppy"], cwd=root, capture_output=True, text=True, check=True
    ).stdout
    cache = base / "cache"
    first = ppy("run", str(root / "model.ppy"), env={"PPY_CACHE_DIR": str(cache)})
    assert (first.returncode, first.stdout) == (0, plain), first.stderr
    assert _entries(cache), "the first run fills the cache"
    return root, cache, plain


def test_the_cache_directory_is_created_private_whatever_the_umask(
    warm: tuple[Path, Path, str], tmp_path: Path
) -> None:
    root, _, plain = warm
    cache = tmp_path / "fresh" / "cache"
    # The umask is set by a shell, not a preexec_fn: this process may hold jax's threads.
    run = subprocess.run(
        [
            "sh",
            "-c",
            'umask 0 && exec "$0" -m ppy run "$1"',
            sys.executable,
            str(root / "model.ppy"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PPY_CACHE_DIR": str(cache)},
        check=False,
    )
    assert (run.returncode, run.stdout) == (0, plain), run.stderr
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in _entries(cache)} == {0o600}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_an_untrusted_or_broken_cache_is_never_loaded(
    case: str, warm: tuple[Path, Path, str], tmp_path: Path
) -> None:
    root, source, plain = warm
    cache = tmp_path / "cache"
    shutil.copytree(source, cache, symlinks=True)
    damage, event, words, replaced = DAMAGE[case]
    damage(cache)
    before = {p.name: p.lstat() for p in _entries(cache)}

    run = ppy("run", str(root / "model.ppy"), env={"PPY_CACHE_DIR": str(cache)})
    assert (run.returncode, run.stdout) == (0, plain), run.stderr
    assert event in run.stderr and words in run.stderr, run.stderr
    assert "Traceback" not in run.stderr

    after = _entries(cache)
    assert sorted(p.name for p in after) == sorted(before)
    if replaced:
        for path in after:
            status = path.lstat()
            assert stat.S_ISREG(status.st_mode) and status.st_uid == os.geteuid()
            assert stat.S_IMODE(status.st_mode) == 0o600
            assert ExecutableCache(cache).get(path.stem) is not None, "a good entry again"
    else:
        assert {p.name: p.lstat() for p in after} == before, "an untrusted directory is not written"
