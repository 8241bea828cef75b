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

from tests.conftest import BuiltExample
from tests.hardening.support import copy_example, ppy

OTHER_UID = 54321
JAX_EXAMPLE = "25_jax_export"


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


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path, 0o600)


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
    "an entry that is a FIFO": (_each(_fifo), "cache.untrusted", "not a regular file", True),
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


@pytest.fixture(scope="module")
def jax_example(
    tmp_path_factory: pytest.TempPathFactory, built_examples: Callable[[str], BuiltExample]
) -> tuple[Path, str]:
    """The jax example, built, and what ``python model.ppy`` prints: its runs
    fill ``unstaged/`` as well as the staged entries. A copy of the session's
    build of it (``built_examples``)."""
    shared = built_examples(JAX_EXAMPLE)
    assert shared.plain.returncode == 0, shared.plain.stderr
    assert shared.build.returncode == 0, shared.build.stderr
    return shared.copy(tmp_path_factory.mktemp("cache-jax")), shared.plain.stdout


def _run_under_umask(
    umask: str, model: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    # The umask is set by a shell, not a preexec_fn: this process may hold jax's threads.
    return subprocess.run(
        [
            "sh",
            "-c",
            f'umask {umask} && exec "$0" -m ppy run --no-build "$1"',
            sys.executable,
            str(model),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        check=False,
    )


#: The umasks a cache is created under: none at all, and the common one.
UMASKS = ("0", "022")


@pytest.mark.parametrize("umask", UMASKS)
def test_every_cache_directory_is_created_private_whatever_the_umask(
    umask: str, jax_example: tuple[Path, str], tmp_path: Path
) -> None:
    root, plain = jax_example
    cache = tmp_path / "fresh" / "cache"
    run = _run_under_umask(umask, root / "model.ppy", {"PPY_CACHE_DIR": str(cache)})
    assert (run.returncode, run.stdout) == (0, plain), run.stderr
    assert "cache.untrusted" not in run.stderr and "cache.unwritable" not in run.stderr
    folders = [tmp_path / "fresh", cache, cache / "unstaged"]
    assert {f.name: stat.S_IMODE(f.stat().st_mode) for f in folders} == {
        f.name: 0o700 for f in folders
    }
    files = _entries(cache) + _entries(cache / "unstaged")
    assert _entries(cache) and _entries(cache / "unstaged"), "both caches filled"
    assert {stat.S_IMODE(p.stat().st_mode) for p in files} == {0o600}


def _shared_folder(cache: Path) -> Path:
    """A world-writable sticky folder (a /tmp) with the cache root linked to it."""
    shared = cache.parent / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    cache.symlink_to(shared)
    return shared


def _other_users_folder(cache: Path) -> Path:
    cache.mkdir(mode=0o700)
    os.chown(cache, OTHER_UID, OTHER_UID)
    return cache


#: A cache root that is refused: where it really is, made so.
UNTRUSTED_ROOTS: dict[str, Callable[[Path], Path]] = {
    "a link to a world-writable sticky folder": _shared_folder,
    "a folder of another user": _other_users_folder,
}


@pytest.mark.parametrize("case", list(UNTRUSTED_ROOTS))
def test_an_untrusted_root_refuses_the_whole_tree(
    case: str, jax_example: tuple[Path, str], tmp_path: Path
) -> None:
    root, plain = jax_example
    cache = tmp_path / "cache"
    folder = UNTRUSTED_ROOTS[case](cache)
    run = ppy("run", "--no-build", str(root / "model.ppy"), env={"PPY_CACHE_DIR": str(cache)})
    assert (run.returncode, run.stdout) == (0, plain), run.stderr
    assert "cache.untrusted" in run.stderr and "Traceback" not in run.stderr
    assert list(folder.iterdir()) == [], "nothing written under a refused root, unstaged/ included"
    shown = ppy("cache", env={"PPY_CACHE_DIR": str(cache)})
    assert shown.returncode == 0 and "so every run compiles in memory" in shown.stdout


def test_a_cache_path_that_is_a_file_is_left_alone_and_ppy_cache_says_so(
    jax_example: tuple[Path, str], tmp_path: Path
) -> None:
    root, plain = jax_example
    cache = tmp_path / "cache"
    cache.write_text("the user's notes")
    run = ppy("run", "--no-build", str(root / "model.ppy"), env={"PPY_CACHE_DIR": str(cache)})
    assert (run.returncode, run.stdout) == (0, plain), run.stderr
    assert "cache.untrusted" in run.stderr and "Traceback" not in run.stderr
    shown = ppy("cache", env={"PPY_CACHE_DIR": str(cache)})
    assert shown.returncode == 0, shown.stderr
    assert "not used: it is not a directory, so every run compiles in memory" in shown.stdout
    assert cache.read_text() == "the user's notes"


def test_cache_clear_removes_only_what_ppy_wrote(
    jax_example: tuple[Path, str], tmp_path: Path
) -> None:
    root, plain = jax_example
    cache = tmp_path / "cache"
    run = ppy("run", "--no-build", str(root / "model.ppy"), env={"PPY_CACHE_DIR": str(cache)})
    assert (run.returncode, run.stdout) == (0, plain), run.stderr
    written = _entries(cache) + _entries(cache / "unstaged")
    outside = tmp_path / "precious.exe"
    outside.write_bytes(_entries(cache)[0].read_bytes())
    theirs = {
        cache / "mytool.exe": b"MZ\x90\x00 a program of the user's",
        cache / ("0" * 64 + ".exe"): b"named like a key, not an entry",
        cache / "unstaged" / "notes.exe": b"",
    }
    for path, data in theirs.items():
        path.write_bytes(data)
    (cache / ("1" * 64 + ".exe")).symlink_to(outside)

    cleared = ppy("cache", "clear", env={"PPY_CACHE_DIR": str(cache)})
    assert cleared.returncode == 0, cleared.stderr
    assert f"removed {len(written)} cached executables" in cleared.stdout
    assert not any(p.exists() for p in written)
    assert {p: p.read_bytes() for p in theirs} == theirs, "what ppy did not write stays"
    assert (cache / ("1" * 64 + ".exe")).is_symlink() and outside.exists()


def test_other_xla_flags_compile_another_executable(
    jax_example: tuple[Path, str], tmp_path: Path
) -> None:
    root, plain = jax_example
    cache = tmp_path / "cache"
    env = {"PPY_CACHE_DIR": str(cache)}
    first = ppy("run", "--no-build", str(root / "model.ppy"), env=env)
    assert (first.returncode, first.stdout) == (0, plain), first.stderr
    staged = set(_entries(cache))
    flagged = ppy(
        "run",
        "--no-build",
        str(root / "model.ppy"),
        env={**env, "XLA_FLAGS": "--xla_cpu_enable_fast_math=false"},
    )
    assert (flagged.returncode, flagged.stdout) == (0, plain), flagged.stderr
    again = set(_entries(cache))
    assert staged < again and len(again) == 2 * len(staged), "each staged executable compiled again"


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
