"""Hostile artifacts: refused with one clear error, ``ppy run`` runs the plain program,
and nothing an artifact names or holds is ever executed.

Each ``HOSTILE`` case turns the real artifact of the xla example into one a
person or a broken copy could hand over. The reader must refuse it naming the
problem; ``ppy run --no-build`` must then print exactly what ``python
model.ppy`` prints and say why once; a ``ppy run`` that may build must replace
it and print the same. ``TRICKS`` is a valid artifact whose manifest and
payloads try pickle, marshal and imports: loading, inspecting and running it
must leave no trace of them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import marshal
import os
import pickle
import stat
import subprocess
import sys
import tracemalloc
import zipfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from ppy.artifact.entry import Entry
from ppy.artifact.model import FORMAT_VERSION, MANIFEST, MANIFEST_SIZE_LIMIT
from ppy.artifact.read import loads, read_artifact
from ppy.artifact.write import dumps
from ppy.errors import ArtifactError

from tests.hardening.support import copy_example, ppy, real_artifact

EXPORT = "entries/model/collatz_steps/stablehlo"


def _members(data: bytes) -> list[tuple[zipfile.ZipInfo, bytes]]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return [(info, archive.read(info)) for info in archive.infolist()]


def _zip(members: list[tuple[zipfile.ZipInfo | str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for info, content in members:
            archive.writestr(info, content)
    return buffer.getvalue()


def _add(name: str, content: bytes = b"x", mode: int | None = None) -> Callable[[bytes], bytes]:
    def make(data: bytes) -> bytes:
        info = zipfile.ZipInfo(name)
        if mode is not None:
            info.external_attr = mode << 16
        return _zip([*_members(data), (info, content)])

    return make


def _drop(name: str) -> Callable[[bytes], bytes]:
    return lambda data: _zip([(i, c) for i, c in _members(data) if i.filename != name])


def _duplicate(data: bytes) -> bytes:
    members = _members(data)
    with pytest.warns(UserWarning, match="Duplicate name"):
        return _zip([*members, (EXPORT, b"module @other {}")])


def _as_link(data: bytes) -> bytes:
    members = []
    for info, content in _members(data):
        if info.filename == EXPORT:
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            content = b"/etc/passwd"
        members.append((info, content))
    return _zip(members)


def _declared_size(size: int) -> Callable[[bytes], bytes]:
    """The member's headers claim ``size`` bytes; its data stays as it was."""

    def make(data: bytes) -> bytes:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            info = archive.getinfo(EXPORT)
        damaged = bytearray(data)
        field = size.to_bytes(4, "little")
        damaged[info.header_offset + 22 : info.header_offset + 26] = field
        at = data.find(EXPORT.encode(), data.find(b"PK\x01\x02")) - 46
        assert data[at : at + 4] == b"PK\x01\x02"
        damaged[at + 24 : at + 28] = field
        return bytes(damaged)

    return make


def _future(data: bytes) -> bytes:
    members = _members(data)
    return _zip(
        [
            (
                info,
                content.replace(
                    b'"format_version": 1', f'"format_version": {FORMAT_VERSION + 1}'.encode()
                )
                if info.filename == MANIFEST
                else content,
            )
            for info, content in members
        ]
    )


#: How deep the nested manifest goes: far past any parser's recursion limit.
NESTING = 100_000
#: The padded manifest's size: over ``MANIFEST_SIZE_LIMIT``, a few hundred KB zipped.
PADDED = MANIFEST_SIZE_LIMIT + (16 << 20)


def _manifest(content: bytes) -> Callable[[bytes], bytes]:
    """The archive with its manifest replaced by ``content``, the rest as it was."""
    return lambda data: _zip(
        [(i, content if i.filename == MANIFEST else c) for i, c in _members(data)]
    )


_HEAD = f'{{"format": "ppy-artifact", "format_version": {FORMAT_VERSION}, '.encode()
_nested = _manifest(_HEAD + b'"x": ' + b"[" * NESTING + b"]" * NESTING + b"}")


def _padded(data: bytes) -> bytes:
    return _manifest(_HEAD + b'"x": 1' + b" " * (PADDED - len(_HEAD) - 7) + b"}")(data)


def _encrypted(data: bytes) -> bytes:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        info = archive.getinfo(EXPORT)
    damaged = bytearray(data)
    damaged[info.header_offset + 6] |= 1
    at = data.find(EXPORT.encode(), data.find(b"PK\x01\x02")) - 46
    damaged[at + 8] |= 1
    return bytes(damaged)


HOSTILE: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "a member held twice": (_duplicate, "holds this member twice"),
    "a listed member missing": (_drop(EXPORT), "the archive lacks it"),
    "no manifest": (_drop(MANIFEST), "has no manifest.json"),
    "a member named with ..": (_add("entries/model/../../../escape"), "contains '..'"),
    "an absolute member name": (_add("/etc/cron.d/ppy"), "is an absolute path"),
    "a drive-letter member name": (_add("C:/Windows/ppy"), "is an absolute path"),
    "a backslash member name": (_add("entries\\model\\x"), "contains a backslash"),
    "a symbolic link member": (_as_link, "is a symbolic link"),
    "a folder member": (_add("entries/model/dir/", b"", stat.S_IFDIR | 0o755), "empty or '.'"),
    "a device member": (_add("entries/model/dev", b"", stat.S_IFCHR | 0o600), "a special file"),
    "an unlisted member": (_add("entries/model/collatz_steps/extra"), "does not list"),
    "a member declared at 2 GiB": (_declared_size(2 << 30), "over the limit"),
    "a member smaller than declared": (_declared_size(1000), "the manifest says"),
    "an encrypted member": (_encrypted, "encrypted"),
    "a future format version": (_future, f"format version {FORMAT_VERSION + 1} is not one"),
    "a manifest nested 100,000 deep": (_nested, "nests deeper than"),
    "a manifest over the size limit": (_padded, "the manifest would decompress"),
}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The xla example and what ``python model.ppy`` prints."""
    root = copy_example("40_xla_scalar", tmp_path_factory.mktemp("hostile"))
    plain = subprocess.run(
        [sys.executable, "model.ppy"], cwd=root, capture_output=True, text=True, check=True
    )
    return root, plain.stdout


#: The cases a ``ppy run`` that may build is also tried on (each costs a build).
REBUILT = (
    "a member held twice",
    "a symbolic link member",
    "a future format version",
    "a manifest nested 100,000 deep",
    "a manifest over the size limit",
)


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_artifact_is_refused_and_the_plain_program_runs(
    case: str, project: tuple[Path, str], tmp_path: Path
) -> None:
    make, words = HOSTILE[case]
    data = make(real_artifact())
    with pytest.raises(ArtifactError) as caught:
        loads(data, path="artifact.ppyz")
    assert words in str(caught.value) and "ppy build" in str(caught.value)

    _, plain = project
    root = copy_example("40_xla_scalar", tmp_path)
    artifact = root / ".ppy" / "artifact.ppyz"
    artifact.parent.mkdir()
    artifact.write_bytes(data)
    env = {"PPY_CACHE_DIR": str(tmp_path / "cache")}
    run = ppy("run", "--no-build", str(root / "model.ppy"), env=env)
    assert (run.returncode, run.stdout) == (0, plain), run.stderr
    assert run.stderr.count(words) == 1, run.stderr
    assert "run.artifact_unreadable" in run.stderr and "Traceback" not in run.stderr
    assert artifact.read_bytes() == data, "--no-build leaves the file as it was"
    if case not in REBUILT:
        return
    rebuilt = ppy("run", str(root / "model.ppy"), env=env)
    assert (rebuilt.returncode, rebuilt.stdout) == (0, plain), rebuilt.stderr
    assert rebuilt.stderr.count(words) == 1, rebuilt.stderr
    assert read_artifact(artifact).project == "xla-scalar", "the build replaced it"


@contextlib.contextmanager
def _allocating_under(limit: int) -> Iterator[None]:
    """Fail unless what runs inside allocates less than ``limit`` bytes at its peak."""
    tracemalloc.start()
    try:
        yield
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < limit, f"the reader allocated {peak} bytes"


def test_a_zip_bomb_is_refused_before_it_is_inflated() -> None:
    """256 MiB of zeros in a member: refused from its header under a 1 MiB limit,
    and, where the header lies about the size, by its CRC after at most the
    declared bytes. Either way the reader allocates nothing near the bomb."""
    original = _members(real_artifact())
    size = next(len(c) for i, c in original if i.filename == EXPORT)
    members = [
        (
            i,
            c.replace(f'"size": {size}'.encode(), b'"size": 17000')
            if i.filename == MANIFEST
            else c,
        )
        for i, c in original
        if i.filename != EXPORT
    ]
    bomb = bytes(256 << 20)
    data = _zip([*members, (EXPORT, bomb)])
    del bomb
    lying = _declared_size(17_000)(data)
    with _allocating_under(16 << 20):
        with pytest.raises(ArtifactError, match="over the limit"):
            loads(data, path="bomb.ppyz", member_size_limit=1 << 20)
        with pytest.raises(ArtifactError, match="damaged"):
            loads(lying, path="bomb.ppyz")


def test_a_huge_manifest_is_refused_from_its_header(tmp_path: Path) -> None:
    """A manifest of 80 MiB in a few hundred KB: refused before it is inflated."""
    data = _padded(real_artifact())
    assert len(data) < 1 << 20
    with _allocating_under(16 << 20), pytest.raises(ArtifactError, match="would decompress"):
        loads(data, path="padded.ppyz")


def test_inspect_says_why_a_deep_manifest_is_refused(tmp_path: Path) -> None:
    artifact = tmp_path / "deep.ppyz"
    artifact.write_bytes(_nested(real_artifact()))
    for args in (("inspect",), ("inspect", "--json")):
        shown = ppy(*args, str(artifact))
        assert shown.returncode == 1, shown.stderr
        assert f"ppy: error: {artifact} [manifest.json]: the manifest nests deeper" in shown.stderr
        assert "Traceback" not in shown.stderr and "RecursionError" not in shown.stderr


# -- a member is streamed, never held -------------------------------------------

#: A member of 256 MiB of zeros, within ``MEMBER_SIZE_LIMIT`` and about 256 KB
#: deflated, listed in collatz_steps's entry beside the stablehlo it reads.
ZEROS = 256 << 20
ZEROS_MEMBER = "entries/model/collatz_steps/zeros"
#: How far past the same command on the real artifact a command may peak: a
#: few chunks of the reader's, an eighth of the member.
HEADROOM = 32 << 20
#: The zeros member listed with its own sha256 (a valid artifact) or another's.
ZEROS_CASES = ("its own sha256", "another sha256")
MEASURED = ("ppy inspect", "ppy doctor", "ppy run --no-build")

#: Runs a command and says what it did and its peak resident memory. A fresh
#: interpreter: ``RUSAGE_CHILDREN`` would count every child pytest waited for.
_PEAK = """
import json, resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True, check=False)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(json.dumps([done.returncode, done.stdout, done.stderr, peak]))
"""


@dataclasses.dataclass(frozen=True)
class Measured:
    """What one command did, and the most memory it held at once."""

    returncode: int
    stdout: str
    stderr: str
    peak: int


def _with_zeros(sha256: str) -> bytes:
    """The real artifact with ``ZEROS_MEMBER`` added, listed under ``sha256``."""
    original = _members(real_artifact())
    document = json.loads(next(c for i, c in original if i.filename == MANIFEST))
    entry = next(e for e in document["entries"] if e["qualname"] == "collatz_steps")
    entry["members"].append(
        {"name": "zeros", "member": ZEROS_MEMBER, "size": ZEROS, "sha256": sha256}
    )
    listed = json.dumps(document).encode()
    return _zip(
        [
            *((i, listed if i.filename == MANIFEST else c) for i, c in original),
            (ZEROS_MEMBER, bytes(ZEROS)),
        ]
    )


def _command(how: str, root: Path) -> list[str]:
    artifact = str(root / ".ppy" / "artifact.ppyz")
    return {
        "ppy inspect": ["inspect", artifact],
        "ppy doctor": ["doctor", "--no-import", str(root)],
        "ppy run --no-build": ["run", "--no-build", str(root / "model.ppy")],
    }[how]


def _measure(how: str, root: Path) -> Measured:
    env = {**os.environ, "PPY_CACHE_DIR": str(root / "cache")}
    helper = [sys.executable, "-c", _PEAK, sys.executable, "-m", "ppy", *_command(how, root)]
    done = subprocess.run(helper, capture_output=True, text=True, env=env, timeout=300, check=True)
    return Measured(*json.loads(done.stdout))


@pytest.fixture(scope="module")
def zeros_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Measured]:
    """Every command on the real artifact (``"real"``) and on each ``ZEROS_CASES``
    artifact, each in its own project, measured a few at a time."""
    digests = (hashlib.sha256(bytes(ZEROS)).hexdigest(), "0" * 64)
    with ThreadPoolExecutor(max_workers=len(digests)) as pool:
        # zlib lets go of the GIL while it deflates: the two are made at once.
        made = dict(zip(ZEROS_CASES, pool.map(_with_zeros, digests), strict=True))
    artifacts = {"real": real_artifact(), **made}
    jobs = {}
    for case, data in artifacts.items():
        for how in MEASURED:
            root = copy_example("40_xla_scalar", tmp_path_factory.mktemp("zeros"))
            (root / ".ppy").mkdir()
            (root / ".ppy" / "artifact.ppyz").write_bytes(data)
            jobs[case, how] = root
    with ThreadPoolExecutor(max_workers=len(MEASURED)) as pool:
        running = {key: pool.submit(_measure, key[1], root) for key, root in jobs.items()}
        return {key: future.result() for key, future in running.items()}


@pytest.mark.parametrize("how", MEASURED)
@pytest.mark.parametrize("case", ZEROS_CASES)
def test_a_member_of_zeros_is_streamed_never_held(
    case: str,
    how: str,
    zeros_runs: dict[tuple[str, str], Measured],
    project: tuple[Path, str],
) -> None:
    """A member of 256 MiB in a 256 KB artifact: each command peaks within
    ``HEADROOM`` of what it takes on the real artifact, and says what it would
    have said of any artifact so listed: the report where the digest is right,
    the member's error where it is not."""
    _, plain = project
    done, real = zeros_runs[case, how], zeros_runs["real", how]
    assert "Traceback" not in done.stderr, done.stderr
    valid = case == ZEROS_CASES[0]
    if how == "ppy inspect":
        assert done.returncode == (0 if valid else 1), done.stderr
        if valid:
            listed = [line.split() for line in done.stdout.splitlines()]
            assert [ZEROS_MEMBER, str(ZEROS), "bytes"] in [line[:3] for line in listed]
        else:
            assert f"[{ZEROS_MEMBER}]: sha256 does not match" in done.stderr, done.stderr
    elif how == "ppy doctor":
        assert done.returncode == 0, done.stderr
        assert (": unreadable" in done.stdout) != valid, done.stdout
        assert ("sha256 does not match" in done.stdout) != valid, done.stdout
    else:
        assert (done.returncode, done.stdout) == (0, plain), done.stderr
        assert ("run.artifact_unreadable" in done.stderr) != valid, done.stderr
    over = done.peak - real.peak
    assert over < HEADROOM, f"{how} peaked {over >> 20} MiB over its run on the real artifact"


# -- loading executes nothing -------------------------------------------------


class _Pickled:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, ...]:
        return (os.system, (f"touch {self.marker}",))


def _tricks(root: Path) -> tuple[bytes, list[Path]]:
    """A valid artifact for ``root`` whose every part tries to run something."""
    markers = [root / f"ran-{n}" for n in ("pickle", "marshal", "import", "plugin", "meta")]
    pickled = pickle.dumps(_Pickled(markers[0]))
    code = marshal.dumps(compile(f"open({str(markers[1])!r}, 'w')", "<trick>", "exec"))
    (root / "evil_import.py").write_text(f"open({str(markers[2])!r}, 'w')\n")
    (root / "evil_kind.py").write_text(f"open({str(markers[3])!r}, 'w')\n")
    artifact = loads(real_artifact())
    entries = []
    for entry in artifact.entries:
        if entry.qualname == "collatz_steps":
            entry = dataclasses.replace(entry, payload={"stablehlo": pickled})
        if entry.qualname == "leibniz":
            entry = dataclasses.replace(
                entry, kind="jax.export", payload={"export": code, "stablehlo": pickled}
            )
        entries.append(entry)
    entries.append(
        Entry(
            module="evil_import",
            qualname="run",
            kind="evil_kind:main",
            inputs=(),
            outputs=(),
            platforms=("cpu",),
            payload={"__init__.py": code, "pickle": pickled},
            metadata={
                "__reduce__": ["os.system", f"touch {markers[4]}"],
                "py/object": "subprocess.Popen",
                "py/reduce": [{"py/function": "os.system"}, f"touch {markers[4]}"],
                "__import__": "evil_import",
                "!!python/object/apply:os.system": [f"touch {markers[4]}"],
            },
        )
    )
    hostile = dataclasses.replace(
        artifact, project="__import__('os').system('touch x')", entries=tuple(entries)
    )
    return dumps(hostile), markers


TRICKS = ("read_artifact", "ppy inspect", "ppy inspect --json", "ppy run --no-build")


def test_loading_inspecting_and_running_a_tricked_artifact_runs_none_of_it(
    project: tuple[Path, str], tmp_path: Path
) -> None:
    _, plain = project
    root = copy_example("40_xla_scalar", tmp_path)
    data, markers = _tricks(root)
    artifact = root / ".ppy" / "artifact.ppyz"
    artifact.parent.mkdir()
    artifact.write_bytes(data)
    env = {"PPY_CACHE_DIR": str(tmp_path / "cache")}
    done = []
    for how in TRICKS:
        if how == "read_artifact":
            loaded = read_artifact(artifact)
            assert loaded.entry("evil_import", "run") is not None
        elif how.startswith("ppy inspect"):
            shown = ppy(*how.split()[1:], str(artifact), env=env)
            assert shown.returncode == 0, shown.stderr
            assert "evil_import" in shown.stdout
        else:
            run = ppy("run", "--no-build", str(root / "model.ppy"), cwd=root, env=env)
            assert (run.returncode, run.stdout) == (0, plain), run.stderr
        assert [m.name for m in markers if m.exists()] == [], f"{how} ran something"
        done.append(how)
    assert done == list(TRICKS)
