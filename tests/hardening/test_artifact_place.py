"""What sits where the artifact goes is replaced only if ppy wrote it; links are never followed.

Each ``OCCUPIED`` case puts something that is not a ppy artifact at the xla
example's artifact path: a file of the user's, a zip of the user's, another
tool's archive, a symbolic link to a real artifact outside the project, a
folder. ``ppy build`` must refuse to replace it with one error naming the
path, and leave it as it was; ``ppy run`` must print what ``python model.ppy``
prints and leave it too. ``LINKED_LOCKS`` ships the build lock as a symbolic
link: ppy must not create, truncate or lock anything it points to.
"""

from __future__ import annotations

import io
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.hardening.support import copy_example, ppy, real_artifact


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    return buffer.getvalue()


def _write(content: bytes) -> Callable[[Path, Path], None]:
    return lambda place, outside: place.write_bytes(content)


def _link_out(place: Path, outside: Path) -> None:
    target = outside / "elsewhere.ppyz"
    target.write_bytes(real_artifact())
    place.symlink_to(target)


#: case -> (what is put at the artifact's place, words of the refusal)
OCCUPIED: dict[str, tuple[Callable[[Path, Path], None], str]] = {
    "a file of the user's": (_write(b"my notes\n"), "is not a ppy artifact"),
    "a zip of the user's": (_write(_zip({"photo.jpg": b"\xff\xd8"})), "is not a ppy artifact"),
    "another tool's archive": (
        _write(_zip({"manifest.json": b'{"format": "other-tool"}'})),
        "does not say format 'ppy-artifact'",
    ),
    "a link to an artifact outside": (_link_out, "is a symbolic link"),
    "a folder": (lambda place, outside: place.mkdir(), "is not a regular file"),
}


def _snapshot(path: Path) -> object:
    if path.is_symlink():
        return ("link", str(path.readlink()))
    if path.is_dir():
        return ("folder", sorted(p.name for p in path.iterdir()))
    return ("file", path.read_bytes())


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> str:
    """What ``python model.ppy`` prints for the xla example."""
    root = copy_example("40_xla_scalar", tmp_path_factory.mktemp("plain"))
    run = subprocess.run(
        [sys.executable, "model.ppy"], cwd=root, capture_output=True, text=True, check=True
    )
    return run.stdout


@pytest.mark.parametrize("case", list(OCCUPIED))
def test_what_ppy_did_not_write_is_never_replaced(case: str, plain: str, tmp_path: Path) -> None:
    put, words = OCCUPIED[case]
    root = copy_example("40_xla_scalar", tmp_path / "projects")
    outside = tmp_path / "outside"
    outside.mkdir()
    place = root / ".ppy" / "artifact.ppyz"
    place.parent.mkdir()
    put(place, outside)
    before, elsewhere = _snapshot(place), sorted(outside.iterdir())
    outside_bytes = [p.read_bytes() for p in elsewhere]
    env = {"PPY_CACHE_DIR": str(tmp_path / "cache")}

    built = ppy("build", str(root), env=env)
    assert built.returncode == 1, built.stderr
    assert f"ppy: error: {place}: " in built.stderr and words in built.stderr, built.stderr
    assert "ppy replaces only an artifact it wrote" in built.stderr
    assert "Traceback" not in built.stderr

    run = ppy("run", str(root / "model.ppy"), env=env)
    assert (run.returncode, run.stdout) == (0, plain), run.stderr
    assert words in run.stderr and "Traceback" not in run.stderr, run.stderr

    assert _snapshot(place) == before
    assert sorted(outside.iterdir()) == elsewhere
    assert [p.read_bytes() for p in elsewhere] == outside_bytes


#: case -> where the shipped lock link points, inside ``outside``
LINKED_LOCKS = {
    "a link to a file that does not exist": "created.txt",
    "a link to a file": "kept.txt",
}


@pytest.mark.parametrize("case", list(LINKED_LOCKS))
def test_a_lock_shipped_as_a_link_is_refused(case: str, plain: str, tmp_path: Path) -> None:
    root = copy_example("40_xla_scalar", tmp_path / "projects")
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / LINKED_LOCKS[case]
    if target.name == "kept.txt":
        target.write_text("the user's file\n")
    lock = root / ".ppy" / "artifact.ppyz.lock"
    lock.parent.mkdir()
    lock.symlink_to(target)
    env = {"PPY_CACHE_DIR": str(tmp_path / "cache")}

    built = ppy("build", str(root), env=env)
    assert built.returncode == 1, built.stderr
    assert f"ppy: error: {lock}: the build lock is a symbolic link" in built.stderr
    assert "Traceback" not in built.stderr

    run = ppy("run", str(root / "model.ppy"), env=env)
    assert (run.returncode, run.stdout) == (0, plain), run.stderr
    assert "the build lock is a symbolic link" in run.stderr, run.stderr

    assert lock.is_symlink()
    if target.name == "kept.txt":
        assert target.read_text() == "the user's file\n"
    else:
        assert not target.exists(), "ppy created a file through the link"
    assert not (root / ".ppy" / "artifact.ppyz").exists()
